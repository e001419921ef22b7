// AVX-512 (F + BW) implementation of the 16-lane fp32 vector type; bf16 stores use AVX512_BF16 when present.
#pragma once
#include <immintrin.h>
#include "dtypes.h"

namespace llmchat::vec {

#ifdef __AVX512BF16__
inline constexpr const char* kIsa = "avx512+bf16";
#else
inline constexpr const char* kIsa = "avx512";
#endif

struct VecF {
  __m512 v;
  static VecF zero() { return {_mm512_setzero_ps()}; }
  static VecF set1(float x) { return {_mm512_set1_ps(x)}; }
  static VecF load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static VecF load(const bf16_t* p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16))};
  }
  static VecF load(const fp16_t* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  void store(bf16_t* p) const {
#ifdef __AVX512BF16__
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
#else
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
#endif
  }
  void store(fp16_t* p) const {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
};

inline VecF operator+(VecF a, VecF b) { return {_mm512_add_ps(a.v, b.v)}; }
inline VecF operator-(VecF a, VecF b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline VecF operator*(VecF a, VecF b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline VecF operator/(VecF a, VecF b) { return {_mm512_div_ps(a.v, b.v)}; }
inline VecF fma(VecF a, VecF b, VecF c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }  // a*b+c
inline VecF max(VecF a, VecF b) { return {_mm512_max_ps(a.v, b.v)}; }
inline VecF min(VecF a, VecF b) { return {_mm512_min_ps(a.v, b.v)}; }
inline float reduce_add(VecF a) { return _mm512_reduce_add_ps(a.v); }
inline float reduce_max(VecF a) { return _mm512_reduce_max_ps(a.v); }
inline VecF round_nearest(VecF a) {
  return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
// 2^n for integral n in [-127, 128): built directly in the exponent field (n = -127 gives 0).
inline VecF pow2i(VecF n) {
  __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(e, 23))};
}

}  // namespace llmchat::vec
