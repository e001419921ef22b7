// Small-M linear: each task owns a run of weight rows; kRows rows are read together and every token
// block of kTok tokens is dotted against them while they sit in L1. bf16 uses the pair-dot
// (VDPBF16PS / BFDOT / portable fallback), fp32 and fp16 widen to fp32 and use FMA.
#include <algorithm>
#include <cstring>

#include "../vec/vec.h"  // the intrinsics headers, before the pragma (their inline functions keep their options)

// No compiler-chosen fused multiply-adds (as in quant_linear.cpp): each output's float operations are the ones
// written, in every template instance, so a row's result does not depend on which tile shape computed it.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "dispatch.h"
#include "dot_step.h"
#include "gemv.h"

namespace llmchat {
namespace {

using vec::VecF;

constexpr int kRows = 4;                             // weight rows per block (one reduce_add4)
constexpr int kTok = vec::kRegVecs >= 32 ? 4 : 1;    // tokens per block: kRows*kTok accumulators in registers

// out[t, r] for rows [n0, n0 + R) and tokens [m0, m0 + MT); R <= kRows, MT <= kTok.
template <typename T, int R, int MT>
void block(const LinearArgs& a, int64_t n0, int64_t m0) {
  const int64_t K = a.k, kmain = K - K % dot_step_elems<T>();
  const T* W = static_cast<const T*>(a.weight) + n0 * K;
  const T* X = static_cast<const T*>(a.x) + m0 * a.x_stride;
  VecF acc[R][MT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < MT; ++t) acc[r][t] = VecF::zero();
  for (int64_t k = 0; k < kmain; k += dot_step_elems<T>()) {
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < MT; ++t) acc[r][t] = dot_step<T>(acc[r][t], W + r * K + k, X + t * a.x_stride + k);
  }
  const T* bias = static_cast<const T*>(a.bias);
  T* out = static_cast<T*>(a.out) + m0 * a.out_stride + n0;
  for (int t = 0; t < MT; ++t) {
    float sums[4];
    VecF z = VecF::zero();
    vec::store4(sums, vec::reduce_add4(acc[0][t], R > 1 ? acc[R > 1 ? 1 : 0][t] : z, R > 2 ? acc[R > 2 ? 2 : 0][t] : z,
                                       R > 3 ? acc[R > 3 ? 3 : 0][t] : z));
    for (int r = 0; r < R; ++r) {
      float s = sums[r];
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

// ---- packed bf16 panels ----
constexpr int kPanel = 16;

inline int64_t pairs_of(int64_t k) { return (k + 1) / 2; }

// Scalar reader of the packed layout: the reference and the path for ISAs without a native kernel.
void packed_panel_portable(const LinearArgs& a, int64_t p) {
  const int64_t kp = pairs_of(a.k);
  const bf16_t* P = static_cast<const bf16_t*>(a.weight) + p * kp * 2 * kPanel;
  const bf16_t* X = static_cast<const bf16_t*>(a.x);
  const bf16_t* bias = static_cast<const bf16_t*>(a.bias);
  bf16_t* out = static_cast<bf16_t*>(a.out);
  for (int64_t t = 0; t < a.m; ++t)
    for (int r = 0; r < kPanel && p * kPanel + r < a.n; ++r) {
      float s = 0.f;
      for (int64_t k = 0; k < a.k; ++k) s += to_float(P[(k / 2) * 2 * kPanel + r * 2 + k % 2]) * to_float(X[t * a.x_stride + k]);
      if (bias) s += to_float(bias[p * kPanel + r]);
      out[t * a.out_stride + p * kPanel + r] = to_bf16(s);
    }
}

#ifdef __AVX512BF16__
constexpr int kPanelsPerBlock = 4;  // 4 panels x 6 tokens = 24 accumulators + 4 weights + 1 broadcast
constexpr int kTokPacked = 6;

// The k-pair (x[2j], x[2j+1]) of one token as a 32-bit value; an odd K ends with (x[K-1], 0).
inline int32_t x_pair(const bf16_t* x, int64_t j, int64_t K) {
  uint16_t lo = x[2 * j].bits, hi = 2 * j + 1 < K ? x[2 * j + 1].bits : 0;
  return int32_t(uint32_t(lo) | (uint32_t(hi) << 16));
}

template <int NP, int MT>
void packed_block(const LinearArgs& a, int64_t p0, int64_t m0) {
  const int64_t K = a.k, kp = pairs_of(K), full_pairs = K / 2;
  const bf16_t* P = static_cast<const bf16_t*>(a.weight) + p0 * kp * 2 * kPanel;
  const bf16_t* X = static_cast<const bf16_t*>(a.x) + m0 * a.x_stride;
  __m512 acc[MT][NP];
  for (int t = 0; t < MT; ++t)
    for (int q = 0; q < NP; ++q) acc[t][q] = _mm512_setzero_ps();
  const int64_t panel_elems = kp * 2 * kPanel;
  // One k-pair: NP weight vectors (16 rows each), then per token a broadcast pair and NP pair-dots.
  auto pair_step = [&](int64_t j, auto&& x_of) {
    __m512bh w[NP];
    for (int q = 0; q < NP; ++q) w[q] = (__m512bh)_mm512_loadu_si512(P + q * panel_elems + j * 2 * kPanel);
    for (int t = 0; t < MT; ++t) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(x_of(t));
      for (int q = 0; q < NP; ++q) acc[t][q] = _mm512_dpbf16_ps(acc[t][q], w[q], xb);
    }
  };
  for (int64_t j = 0; j < full_pairs; ++j)
    pair_step(j, [&](int t) {
      int32_t xp;
      std::memcpy(&xp, X + t * a.x_stride + 2 * j, 4);
      return xp;
    });
  if (full_pairs < kp) pair_step(full_pairs, [&](int t) { return x_pair(X + t * a.x_stride, full_pairs, K); });
  const bf16_t* bias = static_cast<const bf16_t*>(a.bias);
  bf16_t* out = static_cast<bf16_t*>(a.out) + m0 * a.out_stride;
  for (int q = 0; q < NP; ++q) {
    const int64_t n0 = (p0 + q) * kPanel, valid = std::min<int64_t>(kPanel, a.n - n0);
    const __mmask16 mask = valid >= kPanel ? __mmask16(0xffff) : __mmask16((1u << valid) - 1);
    __m512 b = _mm512_setzero_ps();
    if (bias) {
      __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, bias + n0));
      b = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
    for (int t = 0; t < MT; ++t) {
      __m256i r = (__m256i)_mm512_cvtneps_pbh(_mm512_add_ps(acc[t][q], b));
      _mm256_mask_storeu_epi16(out + t * a.out_stride + n0, mask, r);
    }
  }
}

template <int NP>
void packed_panels(const LinearArgs& a, int64_t p0) {
  int64_t m = 0;
  for (; m + kTokPacked <= a.m; m += kTokPacked) packed_block<NP, kTokPacked>(a, p0, m);
  switch (a.m - m) {
    case 1: packed_block<NP, 1>(a, p0, m); break;
    case 2: packed_block<NP, 2>(a, p0, m); break;
    case 3: packed_block<NP, 3>(a, p0, m); break;
    case 4: packed_block<NP, 4>(a, p0, m); break;
    case 5: packed_block<NP, 5>(a, p0, m); break;
    default: break;
  }
}
#endif

void run_packed(const LinearArgs& a, const Runtime& rt) {
  const int64_t panels = (a.n + kPanel - 1) / kPanel;
#ifdef __AVX512BF16__
  const int64_t groups = (panels + kPanelsPerBlock - 1) / kPanelsPerBlock;
  const int64_t per_thread = (groups + rt.num_threads - 1) / std::max(1, rt.num_threads);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(per_thread, 16384 / std::max<int64_t>(1, a.k * kPanel)));
  rt.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t p0 = g * kPanelsPerBlock;
      switch (std::min<int64_t>(kPanelsPerBlock, panels - p0)) {
        case 1: packed_panels<1>(a, p0); break;
        case 2: packed_panels<2>(a, p0); break;
        case 3: packed_panels<3>(a, p0); break;
        default: packed_panels<4>(a, p0); break;
      }
    }
  });
#else
  rt.parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) packed_panel_portable(a, p);
  });
#endif
}

}  // namespace

bool linear_packed_native() {
#ifdef __AVX512BF16__
  return true;
#else
  return false;
#endif
}

void linear_small_m(const LinearArgs& a, const Runtime& rt) {
  if (a.m <= 0 || a.n <= 0) return;
  if (a.packed) {
    if (a.dtype == DType::BF16) run_packed(a, rt);
    return;
  }
  dispatch_dtype(a.dtype, [&](auto tag) { run<decltype(tag)>(a, rt); });
}

}  // namespace llmchat
