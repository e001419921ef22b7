// AVX512-BF16 panel: one zmm per panel, one VDPBF16PS per panel, token and k-pair.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "dtypes.h"

namespace llmchat::panel {

inline constexpr const char* kIsa = "avx512+bf16";
inline constexpr bool kNative = true;
inline constexpr int kPanels = 4, kTokens = 6;  // 24 accumulators + 4 weights + 1 broadcast of 32 zmm

struct PanelAcc { __m512 v; };
struct PanelWeights { __m512bh v; };
struct XPair { __m512bh v; };
struct RowMask { __mmask16 m; };

inline PanelAcc acc_zero() { return {_mm512_setzero_ps()}; }
inline PanelWeights load_weights(const bf16_t* p) { return {(__m512bh)_mm512_loadu_si512(p)}; }
inline XPair broadcast_pair(uint32_t pair) { return {(__m512bh)_mm512_set1_epi32(int32_t(pair))}; }
inline PanelAcc pair_dot(PanelAcc acc, const PanelWeights& w, XPair x) { return {_mm512_dpbf16_ps(acc.v, w.v, x.v)}; }

inline RowMask row_mask(int valid) { return {valid >= 16 ? __mmask16(0xffff) : __mmask16((1u << valid) - 1)}; }
inline PanelAcc load_bias(const bf16_t* b, RowMask mask) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask.m, b));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16))};
}
inline PanelAcc add(PanelAcc a, PanelAcc b) { return {_mm512_add_ps(a.v, b.v)}; }
inline void store_rounded(bf16_t* out, PanelAcc v, RowMask mask) {
  _mm256_mask_storeu_epi16(out, mask.m, (__m256i)_mm512_cvtneps_pbh(v.v));
}

}  // namespace llmchat::panel
