// Paged attention: plans work tiles (query tokens x kv head x key range), runs them on the caller's
// threads with a shared atomic counter (dynamic balance), and merges flash-decoding splits.
#include <algorithm>
#include <atomic>
#include <utility>

#include "../vec/vec.h"  // the intrinsics headers, before exact_float.h (their inline functions keep their options)

// No compiler-chosen fused multiply-adds (exact_float.h): each output's float operations are the ones
// written, in every template instance, so a row's result does not depend on which tile shape computed it.
#include "exact_float.h"

#include "amx_linear.h"
#include "attention_tile.h"

namespace llmchat {
namespace {

using attn::Tile;

constexpr int kMaxTileRows = 64;      // query rows (tokens x group heads x kv heads) per tile
constexpr int kMinStreamKeys = 1024;  // key ranges at least this long are read by multi-head tiles

struct Merge {
  Tile tile;  // the key range is the whole one
  int num_parts;
  int64_t first_partial, partial_stride;
};

struct Plan {
  std::vector<Tile> tiles;
  std::vector<Merge> merges;
  int64_t partial_floats = 0;
};

// A tile of a few query tokens over a long key range takes several kv heads (all of them when decoding): its
// reads then run through a grouped cache's heads in order, which streams better than one head's pieces. Short
// ranges keep a tile per head, so a few short sequences still give every thread work.
int heads_per_tile(const PagedAttentionArgs& a, int num_q, int num_keys) {
  const int G = a.num_q_heads / a.num_kv_heads;
  if (num_keys < kMinStreamKeys) return 1;
  return std::clamp(kMaxTileRows / (num_q * G), 1, a.num_kv_heads);
}

// Keys seen by query tokens at positions [p0, p0 + nq): all before them, or the sliding window's, from the
// window's first whole chunk (the keys before the window are masked), so every walk starts at a chunk edge.
std::pair<int, int> key_range(const PagedAttentionArgs& a, int p0, int nq) {
  const int chunk = attn::chunk_keys(a.block_size);
  const int lo = a.sliding_window > 0 ? std::max(0, p0 - a.sliding_window + 1) : 0;
  return {lo / chunk * chunk, p0 + nq};
}

Plan plan_tiles(const PagedAttentionArgs& a, int num_threads) {
  const int G = a.num_q_heads / a.num_kv_heads, tile_q = std::max(1, kMaxTileRows / G);
  int64_t base_units = 0;
  for (int s = 0; s < a.num_seqs; ++s) {
    const int q_len = a.query_start_loc[s + 1] - a.query_start_loc[s];
    const int first = a.seq_lens[s] - q_len;
    for (int t0 = 0; t0 < q_len; t0 += tile_q) {
      const int nq = std::min(tile_q, q_len - t0);
      const auto [kv_lo, kv_hi] = key_range(a, first + t0, nq);
      const int hpt = heads_per_tile(a, nq, kv_hi - kv_lo);
      base_units += (a.num_kv_heads + hpt - 1) / hpt;
    }
  }
  // Too few tiles to keep every thread busy: split long key ranges (flash-decoding), one part per softmax
  // segment. The results are the same split or not (see segment_keys), so this choice may follow the threads.
  const int64_t want = 8 * int64_t(num_threads);
  const bool split = num_threads > 1 && base_units > 0 && base_units < want;
  const int seg = attn::segment_keys(a.block_size);

  Plan plan;
  for (int s = 0; s < a.num_seqs; ++s) {
    const int q0 = a.query_start_loc[s], q_len = a.query_start_loc[s + 1] - q0;
    const int first = a.seq_lens[s] - q_len;
    for (int t0 = 0; t0 < q_len; t0 += tile_q) {
      const int nq = std::min(tile_q, q_len - t0), p0 = first + t0;
      const auto [kv_lo, kv_hi] = key_range(a, p0, nq);
      const int len = kv_hi - kv_lo, first_seg = kv_lo / seg;
      const int parts = split ? (kv_hi - 1) / seg - first_seg + 1 : 1;
      const int hpt = heads_per_tile(a, nq, len);
      for (int h = 0; h < a.num_kv_heads; h += hpt) {
        const Tile whole{s, h, std::min(hpt, a.num_kv_heads - h), q0 + t0, nq, p0, kv_lo, kv_hi, -1};
        if (parts == 1) {
          plan.tiles.push_back(whole);
          continue;
        }
        const int64_t stride = int64_t(nq) * G * whole.num_heads * (a.head_size + 2);
        plan.merges.push_back({whole, parts, plan.partial_floats, stride});
        for (int i = 0; i < parts; ++i) {
          Tile part = whole;
          part.kv_begin = std::max(kv_lo, (first_seg + i) * seg);
          part.kv_end = std::min(kv_hi, (first_seg + i + 1) * seg);
          part.partial = plan.partial_floats;
          plan.tiles.push_back(part);
          plan.partial_floats += stride;
        }
      }
    }
  }
  // Largest tiles first, so the dynamic schedule ends with small ones (better balance).
  auto work = [](const Tile& x) { return int64_t(x.num_q) * x.num_heads * (x.kv_end - x.kv_begin); };
  std::stable_sort(plan.tiles.begin(), plan.tiles.end(), [&](const Tile& x, const Tile& y) { return work(x) > work(y); });
  return plan;
}

// Combines the parts (softmax segments) of one split tile: folded in key order, as an unsplit tile folds them.
template <typename T>
void merge_parts(const PagedAttentionArgs& a, const Merge& mg, const float* partials) {
  const int G = a.num_q_heads / a.num_kv_heads, D = a.head_size, rows = mg.tile.num_q * G * mg.tile.num_heads;
  T* out = static_cast<T*>(a.out);
  std::vector<float> row(D);
  for (int r = 0; r < rows; ++r) {
    float M = attn::kNegInf, L = 0.f;
    std::fill(row.begin(), row.end(), 0.f);
    for (int i = 0; i < mg.num_parts; ++i) {
      const float* p = partials + mg.first_partial + i * mg.partial_stride;
      attn::fold_segment(row.data(), M, L, p + r * D, p[rows * D + 2 * r], p[rows * D + 2 * r + 1], D);
    }
    const vec::VecF inv = vec::VecF::set1(L > 0.f ? 1.f / L : 0.f);
    T* orow = out + attn::row_offset(mg.tile, G, r, a.o_stride_token, a.o_stride_head);
    for (int c = 0; c < D; c += 16) (vec::VecF::load(&row[c]) * inv).store(orow + c);
  }
}

template <typename T>
using TileFn = void (*)(const PagedAttentionArgs&, const Tile&, attn::Scratch&, float*);

template <typename T>
TileFn<T> tile_fn(int head_size) {
  switch (head_size) {  // specialized head sizes unroll fully; others take the generic loop
    case 64: return attn::run_tile<T, 4>;
    case 80: return attn::run_tile<T, 5>;
    case 96: return attn::run_tile<T, 6>;
    case 128: return attn::run_tile<T, 8>;
    case 256: return attn::run_tile<T, 16>;
    default: return attn::run_tile<T, 0>;
  }
}

template <typename T>
void run(const PagedAttentionArgs& a, const Runtime& rt) {
  const Plan plan = plan_tiles(a, rt.num_threads);
  std::vector<float> partials(plan.partial_floats);
  const TileFn<T> fn = tile_fn<T>(a.head_size);
  std::atomic<int64_t> next{0};
  const int64_t n = int64_t(plan.tiles.size());
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(rt.num_threads, n));
#if defined(LLMCHAT_HAS_AMX)
  const bool tiles = std::is_same_v<T, bf16_t> && attn::amx_attn::fits(a.head_size, attn::chunk_keys(a.block_size)) &&
                     amx_ready();  // for every row (attention_amx.h)
#endif
  rt.parallel_for(workers, 1, [&](int64_t, int64_t) {
    attn::Scratch scratch;
#if defined(LLMCHAT_HAS_AMX)
    scratch.amx = tiles;
    if (tiles) amx::configure(amx::full_tiles());  // tile state belongs to the thread that runs it
#endif
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(a, plan.tiles[i], scratch, partials.data());
#if defined(LLMCHAT_HAS_AMX)
    if (tiles) amx::release();
#endif
  });
  if (!plan.merges.empty()) {
    rt.parallel_for(int64_t(plan.merges.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) merge_parts<T>(a, plan.merges[i], partials.data());
    });
  }
}

}  // namespace

const char* attention_path_name() {
#if defined(LLMCHAT_HAS_BFMMLA)
  return "bfmmla";  // every bf16 row (attention_bfmmla.h)
#endif
#if defined(LLMCHAT_HAS_AMX)
  if (amx_ready()) return "amx";
#endif
  return "vector";
}

void paged_attention(const PagedAttentionArgs& a, const Runtime& rt) {
  if (a.num_seqs == 0) return;
  switch (a.dtype) {
    case DType::F32: return run<float>(a, rt);
    case DType::BF16: return run<bf16_t>(a, rt);
    case DType::F16: return run<fp16_t>(a, rt);
  }
}

}  // namespace llmchat
