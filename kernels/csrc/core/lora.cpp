// Multi-adapter LoRA (see lora.h), per segment and targeted slice:
//   shrink: h[t, r] = x[t] . A[slot, r] in fp32, kRows rank rows at a time that every token of the
//           segment reuses from L1 (the same register blocking as the small-M linear);
//   expand: out[t, cols] += h[t, slice ranks] @ B_slice[slot], one 64-column panel at a time, reading only
//           the slice's own compact B (no block-diagonal zeros, so the hardware prefetchers fetch no zeros).
// Threads: one parallel call over (segment, slice) tasks when they split evenly (several adapters, the
// common serving case), else a shrink call and an expand call over finer tasks. Each h[t, r] and out
// element is computed the same way under every plan, so a token's result does not depend on its batch.
// h sits in a per-thread scratch buffer reused across calls (no allocation per projection).
// bf16 on a build and CPU with matrix tiles: the same plan, each shrink and expand on lora_tiles.h's kernels.
#include <algorithm>
#include <optional>
#include <type_traits>
#include <vector>

#include "../vec/vec.h"
#include "dispatch.h"
#include "dot_step.h"
#include "lora.h"
#include "lora_tiles.h"

namespace llmchat {
namespace {

using vec::VecF;

constexpr int kRows = 4;                            // shrink: rank rows per block (one reduce_add4)
constexpr int kTok = vec::kRegVecs >= 32 ? 4 : 1;   // tokens per register block (both passes)
// Below this cost (see cost_of: ~16k weight elements at decode) a call runs on the calling thread: waking
// the pool costs more than it saves.
constexpr int64_t kParallelCost = 1 << 17;

struct Segment {
  int64_t slot, start, end;
};
inline Segment segment_of(const LoraArgs& a, int64_t s) {
  const int32_t* p = a.segments + 3 * s;
  return {p[0], p[1], p[2]};
}
inline const int32_t* ranks_of(const LoraArgs& a, int64_t slot) { return a.rank_offsets + slot * (a.num_slices + 1); }

// ---- shrink ----
// h[t, r0 + r] for r < NR, tokens [t0, t0 + MT); A points at rank row r0 of the slot.
template <typename T, int NR, int MT>
void shrink_block(const LoraArgs& a, const T* A, int64_t r0, int64_t t0, int64_t first, float* h) {
  const int64_t K = a.in, kmain = K - K % dot_step_elems<T>();
  const T* X = static_cast<const T*>(a.x) + t0 * a.x_stride;
  VecF acc[NR][MT];
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < MT; ++t) acc[r][t] = VecF::zero();
  for (int64_t k = 0; k < kmain; k += dot_step_elems<T>()) {
    for (int r = 0; r < NR; ++r) {
      if (t0 == first) __builtin_prefetch(A + (NR + r) * K + k, 0, 1);  // the next rows: short streams
      for (int t = 0; t < MT; ++t) acc[r][t] = dot_step<T>(acc[r][t], A + r * K + k, X + t * a.x_stride + k);
    }
  }
  const VecF z = VecF::zero();
  for (int t = 0; t < MT; ++t) {
    float sums[4];
    vec::store4(sums, vec::reduce_add4(acc[0][t], NR > 1 ? acc[NR > 1 ? 1 : 0][t] : z,
                                       NR > 2 ? acc[NR > 2 ? 2 : 0][t] : z, NR > 3 ? acc[NR > 3 ? 3 : 0][t] : z));
    for (int r = 0; r < NR; ++r) {
      float s = sums[r];
      for (int64_t k = kmain; k < K; ++k) s += to_float(A[r * K + k]) * to_float(X[t * a.x_stride + k]);
      h[(t0 + t) * a.rank + r0 + r] = s;
    }
  }
}

template <typename T, int NR>
void shrink_rows(const LoraArgs& a, const Segment& sg, int64_t r0, float* h) {
  const T* A = static_cast<const T*>(a.a) + (sg.slot * a.rank + r0) * a.in;
  int64_t t = sg.start;
  for (; t + kTok <= sg.end; t += kTok) shrink_block<T, NR, kTok>(a, A, r0, t, sg.start, h);
  switch (sg.end - t) {  // the last few tokens in one block too: the rows are read once per block
    case 0: break;
    case 1: shrink_block<T, NR, 1>(a, A, r0, t, sg.start, h); break;
    case 2: shrink_block<T, NR, kTok >= 2 ? 2 : 1>(a, A, r0, t, sg.start, h); break;
    default: shrink_block<T, NR, kTok >= 3 ? 3 : 1>(a, A, r0, t, sg.start, h); break;
  }
}

template <typename T>
void shrink_task(const LoraArgs& a, const Segment& sg, int64_t r0, int64_t r1, float* h) {
  switch (std::min<int64_t>(kRows, r1 - r0)) {
    case 1: shrink_rows<T, 1>(a, sg, r0, h); break;
    case 2: shrink_rows<T, 2>(a, sg, r0, h); break;
    case 3: shrink_rows<T, 3>(a, sg, r0, h); break;
    default: shrink_rows<T, 4>(a, sg, r0, h); break;
  }
}

// ---- expand ----
// out[t, c0 + 16 v] for v < NV and tokens [t0, t0 + MT); B points at the panel's first rank row (r0), at
// column c0, rows kLoraPanel apart. The delta over rank rows [r0, r1) is summed in fp32, then added to out
// and rounded once.
template <typename T, int NV, int MT>
void expand_block(const LoraArgs& a, const T* B, int64_t r0, int64_t r1, int64_t c0, int64_t t0, const float* h) {
  T* out = static_cast<T*>(a.out) + t0 * a.out_stride + c0;
  VecF acc[MT][NV];
  for (int t = 0; t < MT; ++t)
    for (int v = 0; v < NV; ++v) acc[t][v] = VecF::zero();
  for (int64_t r = r0; r < r1; ++r) {
    VecF w[NV];
    for (int v = 0; v < NV; ++v) w[v] = VecF::load(B + (r - r0) * kLoraPanel + 16 * v);
    for (int t = 0; t < MT; ++t) {
      const VecF hv = VecF::set1(h[(t0 + t) * a.rank + r]);
      for (int v = 0; v < NV; ++v) acc[t][v] = vec::fma(hv, w[v], acc[t][v]);
    }
  }
  for (int t = 0; t < MT; ++t)
    for (int v = 0; v < NV; ++v) {
      T* o = out + t * a.out_stride + 16 * v;
      (acc[t][v] + VecF::load(o)).store(o);
    }
}

template <typename T, int NV>
void expand_cols(const LoraArgs& a, const Segment& sg, const T* B, int64_t r0, int64_t r1, int64_t c0, const float* h) {
  int64_t t = sg.start;
  for (; t + kTok <= sg.end; t += kTok) expand_block<T, NV, kTok>(a, B, r0, r1, c0, t, h);
  switch (sg.end - t) {
    case 0: break;
    case 1: expand_block<T, NV, 1>(a, B, r0, r1, c0, t, h); break;
    case 2: expand_block<T, NV, kTok >= 2 ? 2 : 1>(a, B, r0, r1, c0, t, h); break;
    default: expand_block<T, NV, kTok >= 3 ? 3 : 1>(a, B, r0, r1, c0, t, h); break;
  }
}

// One panel of a slice: columns [c0, c1), c1 - c0 <= 64; whole vectors, then a scalar tail. `next` is the
// distance to the slice's next panel, fetched now: it is the next task's read.
template <typename T>
void expand_task(const LoraArgs& a, const Segment& sg, const T* B, int64_t next, int64_t r0, int64_t r1, int64_t c0,
                 int64_t c1, const float* h) {
  vec::prefetch_range(B + next, (r1 - r0) * kLoraPanel * int64_t(sizeof(T)));
  const int64_t nv = (c1 - c0) / 16;
  switch (nv) {
    case 0: break;
    case 1: expand_cols<T, 1>(a, sg, B, r0, r1, c0, h); break;
    case 2: expand_cols<T, 2>(a, sg, B, r0, r1, c0, h); break;
    case 3: expand_cols<T, 3>(a, sg, B, r0, r1, c0, h); break;
    default: expand_cols<T, 4>(a, sg, B, r0, r1, c0, h); break;
  }
  for (int64_t t = sg.start; t < sg.end; ++t) {
    T* out = static_cast<T*>(a.out) + t * a.out_stride;
    for (int64_t c = c0 + 16 * nv; c < c1; ++c) {
      float sum = 0.f;
      for (int64_t r = r0; r < r1; ++r) sum += h[t * a.rank + r] * to_float(B[(r - r0) * kLoraPanel + c - c0]);
      out[c] = from_float<T>(to_float(out[c]) + sum);
    }
  }
}

// ---- planning ----
// A task is a run of one segment's work: rank rows [first, last) to shrink and/or panels [first, last) of
// one slice to expand. Costs model a weight element read from memory as ~8 token-MACs.
struct Task {
  int32_t seg, slice, first, last;
  int64_t cost;
};

inline int64_t cost_of(int64_t weight_elems, int64_t tokens) { return weight_elems * (8 + tokens); }

// Contiguous chunk boundaries over tasks, about total/parts cost each; returns the costliest chunk's cost.
int64_t balance(const std::vector<Task>& tasks, int64_t parts, std::vector<int64_t>& bounds) {
  int64_t total = 0, worst = 0, acc = 0;
  for (const Task& t : tasks) total += t.cost;
  bounds.assign(1, 0);
  for (size_t i = 0; i < tasks.size(); ++i) {
    acc += tasks[i].cost;
    const int64_t done = int64_t(bounds.size());  // chunks closed so far + 1
    if (i + 1 == tasks.size() || (done < parts && acc * parts >= total * done)) {
      bounds.push_back(int64_t(i) + 1);
      int64_t chunk = 0;
      for (int64_t j = bounds[bounds.size() - 2]; j < bounds.back(); ++j) chunk += tasks[size_t(j)].cost;
      worst = std::max(worst, chunk);
    }
  }
  return worst;
}

template <typename Fn>
void run_chunks(const Runtime& rt, const std::vector<Task>& tasks, const std::vector<int64_t>& bounds, Fn&& fn) {
  const int64_t parts = int64_t(bounds.size()) - 1;
  auto body = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t i = bounds[size_t(c)]; i < bounds[size_t(c) + 1]; ++i) fn(tasks[size_t(i)]);
  };
  if (parts <= 1) body(0, parts);
  else rt.parallel_for(parts, 1, body);
}

// Whether bf16 segments take the tiles (the build has a tile backend, and this CPU and OS grant it).
bool tiles_ready() {
#if defined(LLMCHAT_LORA_TILES)
  return lora_tiles::ready();
#else
  return false;
#endif
}

#if defined(LLMCHAT_LORA_TILES)
using TileTokens = lora_tiles::Tokens;
#else
struct TileTokens {  // no tile backend in this build
  explicit TileTokens(const LoraArgs&) {}
};
#endif

template <typename T>
void run(const LoraArgs& a, const Runtime& rt) {
  // The rule depends on the build, the CPU and the dtype only, never on the batch.
  const bool tiles = std::is_same_v<T, bf16_t> && tiles_ready();
  // One task per (segment, targeted slice): shrink its rank rows, then expand its columns. Needs no
  // barrier, so it is the plan whenever these tasks spread evenly over the threads (several adapters).
  std::vector<Task> slices;
  int64_t total = 0, last_end = 0;
  for (int64_t s = 0; s < a.num_segments; ++s) {
    const Segment sg = segment_of(a, s);
    const int32_t* ro = ranks_of(a, sg.slot);
    const int64_t tokens = sg.end - sg.start;
    if (tokens <= 0) continue;
    for (int i = 0; i < a.num_slices; ++i) {
      const int64_t rows = ro[i + 1] - ro[i], cols = a.slice_offsets[i + 1] - a.slice_offsets[i];
      if (rows <= 0 || cols <= 0) continue;  // slice not targeted by this slot
      slices.push_back({int32_t(s), i, 0, 0, cost_of(rows * (a.in + cols), tokens)});
      total += slices.back().cost;
      last_end = std::max(last_end, sg.end);
    }
  }
  if (slices.empty()) return;
  thread_local std::vector<float> scratch;  // h [T, rank]; only the rows of LoRA segments are written
  if (scratch.size() < size_t(last_end * a.rank)) scratch.resize(size_t(last_end * a.rank));
  float* h = scratch.data();

  std::optional<TileTokens> tile_x;  // x of every segment in the tiles' operand layout, once per call
  if (tiles) tile_x.emplace(a);
#if defined(LLMCHAT_LORA_TILES)
  const int64_t row_block = tiles ? lora_tiles::kRows : kRows;
#else
  const int64_t row_block = kRows;
#endif
  auto shrink = [&](int64_t s, const Segment& sg, int64_t r0, int64_t r1) {
#if defined(LLMCHAT_LORA_TILES)
    if constexpr (std::is_same_v<T, bf16_t>)
      if (tiles) {
        for (int64_t r = r0; r < r1; r += lora_tiles::kRows)
          lora_tiles::shrink(a, *tile_x, s, r, std::min<int64_t>(r + lora_tiles::kRows, r1), h);
        return;
      }
#endif
    (void)s;
    for (int64_t r = r0; r < r1; r += kRows) shrink_task<T>(a, sg, r, r1, h);
  };
  std::vector<int64_t> b_offset(size_t(a.num_slices) + 1);  // slice i's panels inside a slot's b
  for (int i = 0; i <= a.num_slices; ++i) b_offset[size_t(i)] = lora_b_offset(a.slice_offsets, a.slice_ranks, i);
  // Panels [p0, p1) of slice i (panel p: the slice's columns 64p .. 64p + 63).
  auto expand = [&](const Segment& sg, int i, int64_t p0, int64_t p1) {
    const int32_t* ro = ranks_of(a, sg.slot);
    const int64_t panel_elems = int64_t(a.slice_ranks[i]) * kLoraPanel;
    const T* slice_b = static_cast<const T*>(a.b) + sg.slot * b_offset.back() + b_offset[size_t(i)];
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c0 = a.slice_offsets[i] + p * kLoraPanel;
      const int64_t c1 = std::min<int64_t>(c0 + kLoraPanel, a.slice_offsets[i + 1]);
#if defined(LLMCHAT_LORA_TILES)
      if constexpr (std::is_same_v<T, bf16_t>)
        if (tiles) {
          lora_tiles::expand(a, sg.start, sg.end, slice_b + p * panel_elems, ro[i], ro[i + 1], c0, c1, h);
          continue;
        }
#endif
      expand_task<T>(a, sg, slice_b + p * panel_elems, panel_elems, ro[i], ro[i + 1], c0, c1, h);
    }
  };
  auto end_panel = [&](int i) { return lora_panels(a.slice_offsets[i + 1] - a.slice_offsets[i]); };

  const int64_t threads = total < kParallelCost ? 1 : std::max(1, rt.num_threads);
  std::vector<int64_t> bounds;
  if (balance(slices, threads, bounds) * 4 <= total * 5 / threads) {  // within 25% of an even split
    run_chunks(rt, slices, bounds, [&](const Task& t) {
      const Segment sg = segment_of(a, t.seg);
      const int32_t* ro = ranks_of(a, sg.slot);
      shrink(t.seg, sg, ro[t.slice], ro[t.slice + 1]);
      expand(sg, t.slice, 0, end_panel(t.slice));
    });
    return;
  }
  // Few, uneven tasks (one adapter, or one long prefill): shrink rank-row blocks on every thread, then
  // (after the barrier between the two calls) expand panels on every thread.
  std::vector<Task> rows, panels;
  for (const Task& t : slices) {
    const Segment sg = segment_of(a, t.seg);
    const int32_t* ro = ranks_of(a, sg.slot);
    const int64_t tokens = sg.end - sg.start, cols = a.slice_offsets[t.slice + 1] - a.slice_offsets[t.slice];
    for (int64_t r = ro[t.slice]; r < ro[t.slice + 1]; r += row_block) {
      const int64_t r1 = std::min<int64_t>(r + row_block, ro[t.slice + 1]);
      rows.push_back({t.seg, t.slice, int32_t(r), int32_t(r1), cost_of((r1 - r) * a.in, tokens)});
    }
    for (int64_t p = 0; p < end_panel(t.slice); ++p)
      panels.push_back({t.seg, t.slice, int32_t(p), int32_t(p + 1),
                        cost_of((ro[t.slice + 1] - ro[t.slice]) * std::min<int64_t>(kLoraPanel, cols), tokens)});
  }
  balance(rows, threads, bounds);
  run_chunks(rt, rows, bounds, [&](const Task& t) { shrink(t.seg, segment_of(a, t.seg), t.first, t.last); });
  balance(panels, threads, bounds);
  run_chunks(rt, panels, bounds, [&](const Task& t) { expand(segment_of(a, t.seg), t.slice, t.first, t.last); });
}

}  // namespace

const char* lora_path_name() {
#if defined(LLMCHAT_LORA_TILES)
  if (lora_tiles::ready()) return lora_tiles::name();
#endif
  return "vector";
}

void lora_apply(const LoraArgs& a, const Runtime& rt) {
  if (a.num_segments <= 0 || a.rank <= 0 || a.num_slices <= 0) return;
  dispatch_dtype(a.dtype, [&](auto tag) { run<decltype(tag)>(a, rt); });
}

}  // namespace llmchat
