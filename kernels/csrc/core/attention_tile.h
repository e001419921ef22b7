// Paged attention over one work tile: a few query tokens x the query-head groups of one or more consecutive
// kv heads, against a range of key positions. Each K/V row is loaded once per tile and used by every query
// row of its group. Online softmax over one chunk of keys at a time: the only scratch is rows x D plus one
// head's rows x chunk of scores.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../vec/vec.h"
#include "attention_amx.h"
#include "attention_bfmmla.h"
#include "attention_micro.h"
#include "kernels.h"

namespace llmchat::attn {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Tile {
  int seq, kv_head, num_heads;  // kv heads [kv_head, kv_head + num_heads); query rows are head-major
  int q_begin, num_q;     // flat query tokens [q_begin, q_begin + num_q)
  int first_pos;          // position of query token q_begin
  int kv_begin, kv_end;   // key positions [kv_begin, kv_end) this tile reads
  int64_t partial;        // -1: write the normalized output; else offset (floats) of its partial result
};

struct Scratch {
  std::vector<float> q, acc, scores, m, l, total, total_m, total_l;
  std::vector<bf16_t> q_bf16, probs_bf16;
  Prefetch prefetch;
#if defined(LLMCHAT_HAS_AMX)
  bool amx = false;  // this thread has configured the tiles: bf16 tiles with D % 32 == 0 run on them
  amx_attn::Scratch tiles;
#endif
#if defined(LLMCHAT_HAS_BFMMLA)
  mmla_attn::Scratch mmla;  // every bf16 row of an ARM build with bf16 runs on BFMMLA tiles
#endif
  void reserve(int rows, int head_size, int score_rows, int score_stride) {
    q.resize(size_t(rows) * head_size);
    q_bf16.resize(size_t(rows) * head_size);
    acc.resize(size_t(rows) * head_size);
    scores.resize(size_t(score_rows) * score_stride);
    probs_bf16.resize(size_t(score_rows) * score_stride);
    m.resize(rows);
    l.resize(rows);
  }
  void reserve_totals(int rows, int head_size) {
    total.resize(size_t(rows) * head_size);
    total_m.resize(rows);
    total_l.resize(rows);
  }
};

// Keys per softmax step: several blocks at once, so the row max/sum reductions and accumulator
// rescales happen once per 64 keys rather than once per block.
inline constexpr int kChunkKeys = 64;
inline int chunk_keys(int block_size) { return std::max(block_size, kChunkKeys / block_size * block_size); }

// Keys per softmax segment: each segment of absolute key positions [i * seg, (i + 1) * seg) gets its own
// online softmax, and segments are folded in key order (fold_segment). A flash-decoding split is then one
// segment per part and its merge the same folds: a row's result is the same split or not, whatever the
// thread count or the rest of the batch.
inline int segment_keys(int block_size) { return 8 * chunk_keys(block_size); }

// (A, M, L) += one segment's (a, m, l) for one row of D values, in key order; L == 0 means empty so far.
// std::fma and plain products: the operations are the ones written wherever this is inlined.
inline void fold_segment(float* A, float& M, float& L, const float* a, float m, float l, int D) {
  if (l == 0.f) return;
  if (L == 0.f) {
    for (int c = 0; c < D; c += 16) VecF::load(a + c).store(A + c);
    M = m, L = l;
    return;
  }
  const float Mn = std::max(M, m), wa = std::exp(M - Mn), wb = std::exp(m - Mn);
  const VecF va = VecF::set1(wa), vb = VecF::set1(wb);
  for (int c = 0; c < D; c += 16) vec::fma(VecF::load(a + c), vb, VecF::load(A + c) * va).store(A + c);
  L = std::fma(l, wb, L * wa);
  M = Mn;
}

// Offset (elements) of query row r of a tile in a [T, Hq, D] tensor with the given strides.
inline int64_t row_offset(const Tile& t, int G, int r, int64_t stride_token, int64_t stride_head) {
  const int rows_h = t.num_q * G, rh = r % rows_h;
  return int64_t(t.q_begin + rh / G) * stride_token + int64_t((t.kv_head + r / rows_h) * G + rh % G) * stride_head;
}

inline int round_up16(int n) { return (n + 15) / 16 * 16; }

// Online-softmax update of one row with the scores of one block (n valid entries, padded to 16).
// Leaves the probabilities in S; rescales the running accumulator when the max grows.
// With probs_bf16, the probabilities are rounded to bf16 (stored there for the bf16 P.V) and the row sum
// adds the rounded values, so the output stays an exactly normalized mix of the values.
inline void softmax_update(float* S, int n_pad, float scale, float& m, float& l, float* acc_row, int D,
                           bf16_t* probs_bf16 = nullptr) {
  VecF mx = VecF::set1(kNegInf);
  const VecF sc = VecF::set1(scale);
  for (int j = 0; j < n_pad; j += 16) mx = vec::max(mx, VecF::load(S + j) * sc);
  const float block_max = vec::reduce_max(mx);
  if (block_max == kNegInf) {  // nothing visible to this row in this block
    for (int j = 0; j < n_pad; ++j) S[j] = 0.f;
    if (probs_bf16)
      for (int j = 0; j < n_pad; ++j) probs_bf16[j] = bf16_t{};
    return;
  }
  if (block_max > m) {
    if (l > 0.f) {
      VecF alpha = VecF::set1(std::exp(m - block_max));
      for (int c = 0; c < D; c += 16) (VecF::load(acc_row + c) * alpha).store(acc_row + c);
      l *= std::exp(m - block_max);
    }
    m = block_max;
  }
  VecF sum = VecF::zero(), mv = VecF::set1(m);
  for (int j = 0; j < n_pad; j += 16) {
    VecF p = vec::exp(vec::fma(VecF::load(S + j), sc, VecF::zero() - mv));
    if (probs_bf16) {
      p.store(probs_bf16 + j);
      p = VecF::load(probs_bf16 + j);
    } else {
      p.store(S + j);
    }
    sum = sum + p;
  }
  l += vec::reduce_add(sum);
}

template <typename T, int NC>
void run_tile(const PagedAttentionArgs& a, const Tile& t, Scratch& s, float* partials) {
  const int G = a.num_q_heads / a.num_kv_heads, D = a.head_size, bs = a.block_size;
  const int rows_h = t.num_q * G, rows = rows_h * t.num_heads;
  const int chunk = chunk_keys(bs);

  // bf16 caches with D % 32 == 0 keep q unscaled and scale the scores instead (no extra rounding of q). With the
  // native pair-dot q stays bf16; without it q is widened to fp32 once per row here and only the keys are widened
  // per key (FloatDot: the fallback pair-dot's products in its order, vec_math.h, so the same bits).
#ifdef LLMCHAT_NATIVE_BF16_DOT
  constexpr bool kPairDot = true;
#else
  constexpr bool kPairDot = false;
#endif
  constexpr bool kMayBf16Dot = std::is_same_v<T, bf16_t> && NC % 2 == 0;
  const bool bf16_dot = kMayBf16Dot && D % 32 == 0;
  // attention_bfmmla.h: on an ARM build with bf16, every bf16 row (any head size the engine takes, D % 16 == 0)
  // runs QK^T and P.V on BFMMLA tiles; q stays unscaled bf16 there too.
#if defined(LLMCHAT_HAS_BFMMLA)
  constexpr bool kOnMmla = std::is_same_v<T, bf16_t>;
#else
  constexpr bool kOnMmla = false;
#endif
  const bool q_unscaled = bf16_dot || kOnMmla;
  const float score_scale = q_unscaled ? a.scale : 1.f;
#if defined(LLMCHAT_HAS_AMX)
  const bool on_tiles = bf16_dot && s.amx;  // attention_amx.h: scores and P.V in whole 16-row tiles
#else
  constexpr bool on_tiles = false;
#endif
  // P rounded to bf16 for the pair-dot P.V (and the tiles)
  const bool bf16_pv = kOnMmla || (kPairDot ? std::is_same_v<T, bf16_t> && D % 32 == 0 : on_tiles);
  const bool q_in_bf16 = !kOnMmla && bf16_dot && (kPairDot || on_tiles);  // who reads s.q_bf16
  const int ldS = on_tiles ? std::max(round_up16(chunk + bs), (chunk + 31) / 32 * 32) : round_up16(chunk + bs);
  // BFMMLA pairs rows: an odd rows_h reads one more P row, kept zero (the softmax writes rows < rows_h only)
  const int score_rows = on_tiles ? round_up16(rows_h) : kOnMmla ? rows_h + rows_h % 2 : rows_h;
  s.reserve(rows, D, score_rows, ldS);
  if (kOnMmla && rows_h % 2) std::fill_n(s.probs_bf16.data() + size_t(rows_h) * ldS, ldS, bf16_t{});
  float *q = s.q.data(), *acc = s.acc.data(), *S = s.scores.data(), *m = s.m.data(), *l = s.l.data();
  const T* query = static_cast<const T*>(a.query);
  const VecF q_scale = VecF::set1(a.scale);
#if defined(LLMCHAT_HAS_BFMMLA)
  if constexpr (kOnMmla) mmla_attn::begin_queries(s.mmla, rows_h, t.num_heads, D);
#endif
  for (int r = 0; r < rows; ++r) {
    const T* qr = query + row_offset(t, G, r, a.q_stride_token, a.q_stride_head);
    if constexpr (kMayBf16Dot) {
      if (q_in_bf16) std::copy(qr, qr + D, s.q_bf16.data() + r * D);
    }
#if defined(LLMCHAT_HAS_BFMMLA)
    if constexpr (kOnMmla) mmla_attn::put_query(s.mmla, qr, r / rows_h, r % rows_h, D);
#endif
    if (!q_unscaled)
      for (int c = 0; c < D; c += 16) (VecF::load(qr + c) * q_scale).store(q + r * D + c);
    else if (!kPairDot && !kOnMmla)
      for (int c = 0; c < D; c += 16) VecF::load(qr + c).store(q + r * D + c);
    for (int c = 0; c < D; c += 16) VecF::zero().store(acc + r * D + c);
    m[r] = kNegInf;
    l[r] = 0.f;
  }

#if defined(LLMCHAT_HAS_AMX)
  if constexpr (kMayBf16Dot) {
    if (on_tiles) amx_attn::pack_queries(s.tiles, s.q_bf16.data(), rows_h, t.num_heads, D);
  }
  const size_t q_tiles_per_head = size_t(s.tiles.groups) * s.tiles.d_chunks * amx_attn::kT * amx_attn::kT;
#endif

  const int32_t* table = a.block_tables + int64_t(t.seq) * a.bt_stride;
  const T* kc = static_cast<const T*>(a.key_cache);
  const T* vc = static_cast<const T*>(a.value_cache);
  const int min_pos = t.first_pos, max_pos = t.first_pos + t.num_q - 1, win = a.sliding_window;
  bf16_t* probs = bf16_pv ? s.probs_bf16.data() : nullptr;
  const KvCacheLayout layout{a.num_kv_heads, bs, D, a.blocks_per_group};
  const ChunkRule chunks{bs, chunk, t.kv_end};
  // Reads go chunk by chunk and, inside a chunk, head by head: with a decode tile holding every kv head, one
  // chunk of a grouped cache is then one run per cache through all heads.
  KvStream k_stream(kc, sizeof(T), layout, table, t.kv_head, t.num_heads, t.kv_begin, chunks);
  KvStream v_stream(vc, sizeof(T), layout, table, t.kv_head, t.num_heads, t.kv_begin, chunks);
  Prefetch& pf = s.prefetch;
  // The chunk's keys of one head as runs of adjacent rows: consecutive blocks of a group merge into one.
  KeyRun<T> runs[kChunkKeys + 1];
  auto key_runs = [&](int head, int k0, int k1) {
    int count = 0;
    for (int kb = k0; kb < k1;) {
      const int n = std::min(bs - kb % bs, k1 - kb);
      const T* p = kc + layout.block_offset(table[kb / bs], head) + int64_t(kb % bs) * D;
      if (count > 0 && p == runs[count - 1].rows + int64_t(runs[count - 1].n) * D) runs[count - 1].n += n;
      else runs[count++] = {p, n};
      kb += n;
    }
    return count;
  };
  const int seg = segment_keys(bs);
  bool folded = false;   // some segment is in the totals already
  auto fold_rows = [&] {
    if (!folded) {
      s.reserve_totals(rows, D);
      std::fill(s.total.begin(), s.total.begin() + size_t(rows) * D, 0.f);   // a row that sees no key stays 0
      for (int r = 0; r < rows; ++r) s.total_l[r] = 0.f, s.total_m[r] = kNegInf;
      folded = true;
    }
    for (int r = 0; r < rows; ++r) {
      fold_segment(s.total.data() + r * D, s.total_m[r], s.total_l[r], acc + r * D, m[r], l[r], D);
      for (int c = 0; c < D; c += 16) VecF::zero().store(acc + r * D + c);
      m[r] = kNegInf;
      l[r] = 0.f;
    }
  };
  for (int k0 = t.kv_begin; k0 < t.kv_end;) {
    if (k0 > t.kv_begin && k0 % seg == 0) fold_rows();   // a new segment: fresh softmax state
    const int k1 = chunks.end(k0), nk = k1 - k0, n_pad = round_up16(nk);
    const bool need_mask = k1 - 1 > min_pos || (win > 0 && max_pos - k0 >= win);
    for (int hi = 0; hi < t.num_heads; ++hi) {
      const int head = t.kv_head + hi, r0 = hi * rows_h;
      float *acc_h = acc + r0 * D, *m_h = m + r0, *l_h = l + r0;
      const int num_runs = key_runs(head, k0, k1);
      float* Sc = S;
#if defined(LLMCHAT_HAS_BFMMLA)
      if constexpr (kOnMmla) {
        k_stream.plan(nk, pf);
        mmla_attn::qk(s.mmla, mmla_attn::head_queries(s.mmla, hi, D), rows_h, runs, num_runs, nk, D, S, ldS, pf);
        pf.finish();
      }
#endif
#if defined(LLMCHAT_HAS_AMX)
      if constexpr (std::is_same_v<T, bf16_t>) {
        if (on_tiles) {
          k_stream.plan(nk, pf);
          amx_attn::qk(s.tiles, s.tiles.q_t.data() + hi * q_tiles_per_head, rows_h, runs, num_runs, nk, D, S, ldS, pf);
          pf.finish();
        }
      }
#endif
      for (int i = 0; i < (on_tiles || kOnMmla ? 0 : num_runs); ++i) {
        k_stream.plan(runs[i].n, pf);
        if constexpr (kMayBf16Dot) {
          if (bf16_dot && kPairDot) qk_all<Bf16Dot, NC / 2>(s.q_bf16.data() + r0 * D, rows_h, D, runs[i].rows, runs[i].n, Sc, ldS, pf);
          else qk_all<FloatDot<T>, NC>(q + r0 * D, rows_h, D, runs[i].rows, runs[i].n, Sc, ldS, pf);
        } else {
          qk_all<FloatDot<T>, NC>(q + r0 * D, rows_h, D, runs[i].rows, runs[i].n, Sc, ldS, pf);
        }
        pf.finish();
        Sc += runs[i].n;
      }
      for (int r = 0; r < rows_h; ++r) {
        float* Sr = S + r * ldS;
        for (int j = nk; j < n_pad; ++j) Sr[j] = kNegInf;
        if (need_mask) {
          const int pos = t.first_pos + r / G;
          for (int j = 0; j < nk; ++j) {
            const int kpos = k0 + j;
            if (kpos > pos || (win > 0 && pos - kpos >= win)) Sr[j] = kNegInf;
          }
        }
        softmax_update(Sr, n_pad, score_scale, m_h[r], l_h[r], acc_h + r * D, D, probs ? probs + r * ldS : nullptr);
      }
      for (int i = 0; i < num_runs; ++i) runs[i].rows = vc + (runs[i].rows - kc);  // V: the same layout as K
      v_stream.plan(nk, pf);
#if defined(LLMCHAT_HAS_BFMMLA)
      if constexpr (kOnMmla) {  // P is zero past nk up to the padded scores, a whole 8 keys
        pf.step(nk);
        mmla_attn::pack_values(s.mmla, runs, num_runs, nk, D);
        pf.finish();
        mmla_attn::pv(s.mmla, probs, ldS, rows_h, nk, D, acc_h);
        continue;
      }
#endif
#if defined(LLMCHAT_HAS_AMX)
      if constexpr (std::is_same_v<T, bf16_t>) {
        if (on_tiles) {  // whole 32-key tiles: P is zero past the padded scores
          const int n_pad32 = (nk + 31) / 32 * 32;
          for (int r = 0; r < rows_h; ++r)
            for (int j = n_pad; j < n_pad32; ++j) probs[r * ldS + j] = bf16_t{};
          pf.step(nk);
          amx_attn::pack_values(s.tiles, runs, num_runs, nk, D);
          pf.finish();
          amx_attn::pv(s.tiles, probs, ldS, rows_h, nk, D, acc_h);
          continue;
        }
      }
#endif
#ifdef LLMCHAT_NATIVE_BF16_DOT
      if constexpr (std::is_same_v<T, bf16_t>) {
        if (bf16_pv) {
          pv_bf16_all(probs, ldS, rows_h, runs, num_runs, D, acc_h, pf);
          pf.finish();
          continue;
        }
      }
#endif
      pv_all<NC>(S, ldS, rows_h, runs, num_runs, D, acc_h, pf);
      pf.finish();
    }
    k0 = k1;
  }

  if (folded) {  // the last segment joins the others; the totals are the result
    fold_rows();
    acc = s.total.data(), m = s.total_m.data(), l = s.total_l.data();
  }
  if (t.partial >= 0) {  // flash-decoding split: keep unnormalized acc + (max, sum) for the merge
    float* p = partials + t.partial;
    for (int i = 0; i < rows * D; ++i) p[i] = acc[i];
    for (int r = 0; r < rows; ++r) p[rows * D + 2 * r] = m[r], p[rows * D + 2 * r + 1] = l[r];
    return;
  }
  T* out = static_cast<T*>(a.out);
  for (int r = 0; r < rows; ++r) {
    T* orow = out + row_offset(t, G, r, a.o_stride_token, a.o_stride_head);
    const VecF inv = VecF::set1(l[r] > 0.f ? 1.f / l[r] : 0.f);
    for (int c = 0; c < D; c += 16) (VecF::load(acc + r * D + c) * inv).store(orow + c);
  }
}

}  // namespace llmchat::attn
