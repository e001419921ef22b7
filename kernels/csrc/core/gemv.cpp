// Small-M linear: each task owns a run of weight rows; kRows rows are read together and every token
// block of kTok tokens is dotted against them while they sit in L1. bf16 uses the pair-dot
// (VDPBF16PS / BFDOT / portable fallback), fp32 and fp16 widen to fp32 and use FMA. Packed bf16 panels:
// packed_linear.cpp.
#include <algorithm>
#include <cstring>

#include "../vec/vec.h"  // the intrinsics headers, before exact_float.h (their inline functions keep their options)

// No compiler-chosen fused multiply-adds (exact_float.h): each output's float operations are the ones written, in
// every template instance, so a row's result does not depend on which tile shape computed it.
#include "exact_float.h"
// gcc: no scheduling before register allocation either, which hoists every row's loads ahead of the FMAs and
// spills accumulators of the bf16 block on NEON.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-schedule-insns")
#endif

#include "dispatch.h"
#include "dot_step.h"
#include "gemv.h"
#include "packed_linear.h"

namespace llmchat {
namespace {

using vec::VecF;

constexpr int kRows = 4;                             // weight rows per block (one reduce_add4)
constexpr int kTok = vec::kRegVecs >= 32 ? 4 : 1;    // tokens per block: kRows*kTok accumulators in registers

// out[t, r] for rows [n0, n0 + R) and tokens [m0, m0 + MT); R <= kRows, MT <= kTok.
template <typename T, int R, int MT>
void block(const LinearArgs& a, int64_t n0, int64_t m0) {
  const int64_t K = a.k, kmain = K - K % DotStep<T>::kElems;
  const T* W = static_cast<const T*>(a.weight) + n0 * K;
  const T* X = static_cast<const T*>(a.x) + m0 * a.x_stride;
  using Step = DotStep<T>;
  VecF acc[R * MT];  // acc[r * MT + t]: flat, indexed by constants once the loops below are unrolled
  LLMCHAT_UNROLL for (int i = 0; i < R * MT; ++i) acc[i] = VecF::zero();
  for (int64_t k = 0; k < kmain; k += Step::kElems) {
    LLMCHAT_UNROLL for (int part = 0; part < Step::kElems / Step::kPart; ++part) {
      const int64_t p = k + part * Step::kPart;
      typename Step::X xs[MT];  // each token's part once, for every row
      LLMCHAT_UNROLL for (int t = 0; t < MT; ++t) xs[t] = Step::load_x(X + t * a.x_stride + p);
      LLMCHAT_UNROLL for (int r = 0; r < R; ++r)
        LLMCHAT_UNROLL for (int t = 0; t < MT; ++t) acc[r * MT + t] = Step::madd(acc[r * MT + t], W + r * K + p, xs[t]);
    }
  }
  // Each token's row sums, four rows in one reduce_add4 (absent rows add zeros), in an unrolled loop too: an
  // accumulator indexed at run time would keep the whole array in memory.
  float sums[MT][4];
  const VecF z = VecF::zero();
  LLMCHAT_UNROLL for (int t = 0; t < MT; ++t) {
    auto row = [&](int r) { return r < R ? acc[std::min(r, R - 1) * MT + t] : z; };
    vec::store4(sums[t], vec::reduce_add4(row(0), row(1), row(2), row(3)));
  }
  const T* bias = static_cast<const T*>(a.bias);
  T* out = static_cast<T*>(a.out) + m0 * a.out_stride + n0;
  for (int t = 0; t < MT; ++t) {
    for (int r = 0; r < R; ++r) {
      float s = sums[t][r];
      for (int64_t k = kmain; k < K; ++k) s += to_float(W[r * K + k]) * to_float(X[t * a.x_stride + k]);
      if (bias) s += to_float(bias[n0 + r]);
      out[t * a.out_stride + r] = from_float<T>(s);
    }
  }
}

template <typename T, int R>
void rows(const LinearArgs& a, int64_t n0) {
  int64_t m = 0;
  for (; m + kTok <= a.m; m += kTok) block<T, R, kTok>(a, n0, m);
  for (; m < a.m; ++m) block<T, R, 1>(a, n0, m);
}

template <typename T>
void run(const LinearArgs& a, const Runtime& rt) {
  const int64_t full = a.n / kRows, blocks = full + (a.n % kRows ? 1 : 0);
  // Enough blocks per task to amortise scheduling, but every thread gets weight rows to stream.
  const int64_t per_thread = (blocks + rt.num_threads - 1) / std::max(1, rt.num_threads);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(per_thread, 65536 / std::max<int64_t>(1, a.k * kRows)));
  rt.parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * kRows;
      if (b < full) {
        rows<T, kRows>(a, n0);
      } else {
        switch (a.n - n0) {
          case 1: rows<T, 1>(a, n0); break;
          case 2: rows<T, 2>(a, n0); break;
          default: rows<T, 3>(a, n0); break;
        }
      }
    }
  });
}

}  // namespace

void linear_small_m(const LinearArgs& a, const Runtime& rt) {
  if (a.m <= 0 || a.n <= 0) return;
  if (a.packed) {
    if (a.dtype == DType::BF16) run_packed(a, rt);  // packed_linear.cpp
    return;
  }
  dispatch_dtype(a.dtype, [&](auto tag) { run<decltype(tag)>(a, rt); });
}

}  // namespace llmchat
