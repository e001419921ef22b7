// Multi-adapter LoRA (see lora.h) in two passes over flat task lists, each pass split across threads:
//   shrink: h[t, r] = x[t] . A[slot, r] in fp32, kRows rank rows at a time that every token of the
//           segment reuses from L1 (the same register blocking as the small-M linear);
//   expand: out[t, cols] += h[t, slice ranks] @ B[slot, slice ranks, cols], one 64-column panel of B at a
//           time, only over each targeted slice's own rank rows.
// h sits in a per-thread scratch buffer reused across calls (no allocation per projection).
#include <algorithm>
#include <vector>

#include "../vec/vec.h"
#include "dispatch.h"
#include "lora.h"

namespace llmchat {
namespace {

using vec::VecF;

constexpr int kRows = 4;                            // shrink: rank rows per block (one reduce_add4)
constexpr int kTok = vec::kRegVecs >= 32 ? 4 : 1;   // tokens per register block (both passes)
// Below this much work (weight elements + MACs/16) a pass runs on the calling thread: waking the pool
// costs more than it saves.
constexpr int64_t kParallelWork = 16384;

template <typename T> constexpr int64_t step() { return std::is_same_v<T, bf16_t> ? 32 : 16; }

template <typename T>
inline VecF dot_step(VecF acc, const T* w, const T* x) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    return vec::dot_bf16(acc, vec::VecB::load(w), vec::VecB::load(x));
  } else {
    return vec::fma(VecF::load(w), VecF::load(x), acc);
  }
}

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
  const int64_t K = a.in, kmain = K - K % step<T>();
  const T* X = static_cast<const T*>(a.x) + t0 * a.x_stride;
  VecF acc[NR][MT];
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < MT; ++t) acc[r][t] = VecF::zero();
  for (int64_t k = 0; k < kmain; k += step<T>()) {
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
// Panel p of a slot holds columns [64p, 64p + 64) of every rank row, rows one after another, so a task
// (one panel x one slice's rank rows) reads one contiguous run of B.
template <typename T>
inline const T* panel_of(const LoraArgs& a, int64_t slot, int64_t p) {
  return static_cast<const T*>(a.b) + (slot * lora_panels(a.out_features) + p) * a.rank * kLoraPanel;
}

// out[t, c0 + 16 v] for v < NV and tokens [t0, t0 + MT); B points at column c0 of rank row 0 (row stride
// kLoraPanel). The delta over rank rows [r0, r1) is summed in fp32, then added to out and rounded once.
template <typename T, int NV, int MT>
void expand_block(const LoraArgs& a, const T* B, int64_t r0, int64_t r1, int64_t c0, int64_t t0, const float* h) {
  T* out = static_cast<T*>(a.out) + t0 * a.out_stride + c0;
  VecF acc[MT][NV];
  for (int t = 0; t < MT; ++t)
    for (int v = 0; v < NV; ++v) acc[t][v] = VecF::zero();
  for (int64_t r = r0; r < r1; ++r) {
    VecF w[NV];
    for (int v = 0; v < NV; ++v) w[v] = VecF::load(B + r * kLoraPanel + 16 * v);
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

// Columns [c0, c1) of one slice inside panel p: whole vectors, then a scalar tail.
template <typename T>
void expand_task(const LoraArgs& a, const Segment& sg, int64_t r0, int64_t r1, int64_t p, int64_t c0, int64_t c1,
                 const float* h) {
  const T* B = panel_of<T>(a, sg.slot, p) + (c0 - p * kLoraPanel);
  // The next panel's rows of this slice are the next task's read: start fetching them now.
  vec::prefetch_range(B + (a.rank + r0) * kLoraPanel, (r1 - r0) * kLoraPanel * int64_t(sizeof(T)));
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
      for (int64_t r = r0; r < r1; ++r) sum += h[t * a.rank + r] * to_float(B[r * kLoraPanel + c - c0]);
      out[c] = from_float<T>(to_float(out[c]) + sum);
    }
  }
}

// ---- planning ----
struct ShrinkTask {
  int32_t seg, row;
};
struct ExpandTask {
  int32_t seg, slice, panel;
};

// Runs fn over [0, n) on the pool only when the pass has enough work to pay for waking it.
void run_tasks(const Runtime& rt, int64_t n, int64_t work, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t threads = std::max(1, rt.num_threads);
  const int64_t grain = work < kParallelWork ? n : (n + threads - 1) / threads;  // one even chunk per thread
  rt.parallel_for(n, grain, fn);
}

template <typename T>
void run(const LoraArgs& a, const Runtime& rt) {
  std::vector<ShrinkTask> shrink;
  std::vector<ExpandTask> expand;
  int64_t shrink_work = 0, expand_work = 0, last_end = 0;
  for (int64_t s = 0; s < a.num_segments; ++s) {
    const Segment sg = segment_of(a, s);
    const int32_t* ro = ranks_of(a, sg.slot);
    const int64_t tokens = sg.end - sg.start, rows = ro[a.num_slices] - ro[0];
    if (tokens <= 0 || rows <= 0) continue;
    last_end = std::max(last_end, sg.end);
    for (int64_t r = ro[0]; r < ro[a.num_slices]; r += kRows) shrink.push_back({int32_t(s), int32_t(r)});
    shrink_work += rows * a.in * (1 + tokens / 16);
    for (int i = 0; i < a.num_slices; ++i) {
      if (ro[i + 1] <= ro[i]) continue;  // slice not targeted by this slot
      for (int64_t p = a.slice_offsets[i] / kLoraPanel; p * kLoraPanel < a.slice_offsets[i + 1]; ++p)
        expand.push_back({int32_t(s), i, int32_t(p)});
      expand_work += (ro[i + 1] - ro[i]) * (a.slice_offsets[i + 1] - a.slice_offsets[i]) * (1 + tokens / 16);
    }
  }
  if (shrink.empty()) return;
  thread_local std::vector<float> scratch;  // h [T, rank]; only the rows of LoRA segments are written
  if (scratch.size() < size_t(last_end * a.rank)) scratch.resize(size_t(last_end * a.rank));
  float* h = scratch.data();
  run_tasks(rt, int64_t(shrink.size()), shrink_work, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const Segment sg = segment_of(a, shrink[i].seg);
      shrink_task<T>(a, sg, shrink[i].row, ranks_of(a, sg.slot)[a.num_slices], h);
    }
  });
  run_tasks(rt, int64_t(expand.size()), expand_work, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const ExpandTask& e = expand[i];
      const Segment sg = segment_of(a, e.seg);
      const int32_t* ro = ranks_of(a, sg.slot);
      const int64_t c0 = std::max<int64_t>(e.panel * kLoraPanel, a.slice_offsets[e.slice]);
      const int64_t c1 = std::min<int64_t>((e.panel + 1) * kLoraPanel, a.slice_offsets[e.slice + 1]);
      expand_task<T>(a, sg, ro[e.slice], ro[e.slice + 1], e.panel, c0, c1, h);
    }
  });
}

}  // namespace

void lora_apply(const LoraArgs& a, const Runtime& rt) {
  if (a.num_segments <= 0 || a.rank <= 0 || a.num_slices <= 0) return;
  dispatch_dtype(a.dtype, [&](auto tag) { run<decltype(tag)>(a, rt); });
}

}  // namespace llmchat
