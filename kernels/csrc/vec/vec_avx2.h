// AVX2 + FMA + F16C implementation of the 16-lane fp32 vector type (two 8-lane halves).
#pragma once
#include <immintrin.h>
#include "dtypes.h"

namespace llmchat::vec {

inline constexpr const char* kIsa = "avx2";

namespace avx2 {
inline __m256 widen_bf16(__m128i x) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
}
// fp32 -> bf16 bits (round to nearest even, NaN stays NaN), still one per 32-bit lane.
inline __m256i narrow_bf16(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
}
inline float hsum(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
inline float hmax(__m256 x) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps(s, s, 1)));
}
}  // namespace avx2

inline constexpr int kRegVecs = 8;  // 16 ymm registers, two per VecF

struct VecF {
  __m256 lo, hi;
  static VecF zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static VecF set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  static VecF load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static VecF load(const bf16_t* p) {
    const __m128i* q = reinterpret_cast<const __m128i*>(p);
    return {avx2::widen_bf16(_mm_loadu_si128(q)), avx2::widen_bf16(_mm_loadu_si128(q + 1))};
  }
  static VecF load(const fp16_t* p) {
    const __m128i* q = reinterpret_cast<const __m128i*>(p);
    return {_mm256_cvtph_ps(_mm_loadu_si128(q)), _mm256_cvtph_ps(_mm_loadu_si128(q + 1))};
  }
  void store(float* p) const { _mm256_storeu_ps(p, lo); _mm256_storeu_ps(p + 8, hi); }
  void store(bf16_t* p) const {
    // packus interleaves 128-bit lanes; the permute puts the 16 results back in order.
    __m256i packed = _mm256_packus_epi32(avx2::narrow_bf16(lo), avx2::narrow_bf16(hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xD8));
  }
  void store(fp16_t* p) const {
    __m128i* q = reinterpret_cast<__m128i*>(p);
    _mm_storeu_si128(q, _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(q + 1, _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
  }
};

inline VecF operator+(VecF a, VecF b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline VecF operator-(VecF a, VecF b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
inline VecF operator*(VecF a, VecF b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline VecF operator/(VecF a, VecF b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
inline VecF fma(VecF a, VecF b, VecF c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline VecF max(VecF a, VecF b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline VecF min(VecF a, VecF b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
inline float reduce_add(VecF a) { return avx2::hsum(_mm256_add_ps(a.lo, a.hi)); }
inline float reduce_max(VecF a) { return avx2::hmax(_mm256_max_ps(a.lo, a.hi)); }
inline VecF round_nearest(VecF a) {
  constexpr int mode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  return {_mm256_round_ps(a.lo, mode), _mm256_round_ps(a.hi, mode)};
}
using Vec4 = __m128;
inline void store4(float* p, Vec4 x) { _mm_storeu_ps(p, x); }
inline VecF concat4(Vec4 a, Vec4 b, Vec4 c, Vec4 d) { return {_mm256_set_m128(b, a), _mm256_set_m128(d, c)}; }
inline Vec4 reduce_add4(VecF a, VecF b, VecF c, VecF d) {
  __m256 a8 = _mm256_add_ps(a.lo, a.hi), b8 = _mm256_add_ps(b.lo, b.hi);
  __m256 c8 = _mm256_add_ps(c.lo, c.hi), d8 = _mm256_add_ps(d.lo, d.hi);
  __m256 ab = _mm256_add_ps(_mm256_unpacklo_ps(a8, b8), _mm256_unpackhi_ps(a8, b8));
  __m256 cd = _mm256_add_ps(_mm256_unpacklo_ps(c8, d8), _mm256_unpackhi_ps(c8, d8));
  __m256 abcd = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, 0x44), _mm256_shuffle_ps(ab, cd, 0xEE));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}
inline VecF pow2i(VecF n) {
  auto one = [](__m256 x) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(x), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  };
  return {one(n.lo), one(n.hi)};
}

}  // namespace llmchat::vec
