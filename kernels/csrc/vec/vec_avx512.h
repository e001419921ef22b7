// AVX-512 (F + BW) implementation of the 16-lane fp32 vector type; bf16 stores use AVX512_BF16 when present.
#pragma once
#include <immintrin.h>
#include <cstring>
#include "dtypes.h"

namespace llmchat::vec {

#ifdef __AVX512BF16__
inline constexpr const char* kIsa = "avx512+bf16";
#else
inline constexpr const char* kIsa = "avx512";
#endif

inline constexpr int kRegVecs = 32;  // VecF values the register file holds

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
// Four horizontal sums at once (lane i = sum of the i-th vector): cheaper than four reduce_add.
using Vec4 = __m128;
inline void store4(float* p, Vec4 x) { _mm_storeu_ps(p, x); }
inline VecF concat4(Vec4 a, Vec4 b, Vec4 c, Vec4 d) {
  __m512 r = _mm512_insertf32x4(_mm512_castps128_ps512(a), b, 1);
  return {_mm512_insertf32x4(_mm512_insertf32x4(r, c, 2), d, 3)};
}
inline Vec4 reduce_add4(VecF a, VecF b, VecF c, VecF d) {
  __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a.v, b.v), _mm512_unpackhi_ps(a.v, b.v));
  __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c.v, d.v), _mm512_unpackhi_ps(c.v, d.v));
  __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));  // [a b c d] x4
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(abcd),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

#ifdef __AVX512BF16__
// 32 bf16 values; dot_bf16 is VDPBF16PS (pairs of bf16 products accumulated in fp32).
#define LLMCHAT_NATIVE_BF16_DOT 1
struct VecB {
  __m512bh v;
  static VecB load(const bf16_t* p) { return {(__m512bh)_mm512_loadu_si512(p)}; }
};
inline VecF dot_bf16(VecF acc, VecB a, VecB b) { return {_mm512_dpbf16_ps(acc.v, a.v, b.v)}; }
// Rows a and b (32 bf16 each) as pairs (a[i], b[i]): lo for i < 16, hi for i >= 16, so that
// dot_bf16(acc, lo, pair) adds a[i] * pair.first + b[i] * pair.second to lane i (a two-row axpy).
inline void zip_bf16(const bf16_t* a, const bf16_t* b, VecB& lo, VecB& hi) {
  const __m512i idx_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                          39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
  const __m512i x = _mm512_loadu_si512(a), y = _mm512_loadu_si512(b);
  lo.v = (__m512bh)_mm512_permutex2var_epi16(x, idx_lo, y);
  hi.v = (__m512bh)_mm512_permutex2var_epi16(x, idx_hi, y);
}
// The pair (p[0], p[1]) in every pair slot.
inline VecB broadcast_pair(const bf16_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  return {(__m512bh)_mm512_set1_epi32(int(bits))};
}
#endif

// 2^n for integral n in [-127, 128): built directly in the exponent field (n = -127 gives 0).
inline VecF pow2i(VecF n) {
  __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(e, 23))};
}

}  // namespace llmchat::vec
