// AVX2 block dots (also what AVX-512 machines run): maddubs multiplies u8 weights by s8 activations into
// int16 pairs (no overflow: |w| <= 128, |a| <= 127), madd sums them into 8 int32 lanes of 4 elements each,
// so lanes 0-3 hold elements 0..15 and lanes 4-7 elements 16..31 (what fma_s8_halves scales).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace llmchat::qdot {

inline constexpr const char* kIsa = "avx2";
inline constexpr int kTokens = 2;  // 4 rows x 2 tokens of accumulators fit the 16 ymm registers

struct QVec { __m256i v; };
struct QAcc { __m256 v; };

inline QAcc qzero() { return {_mm256_setzero_ps()}; }
inline float qsum(QAcc a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
inline QVec load32(const void* p) { return {_mm256_loadu_si256(static_cast<const __m256i*>(p))}; }
inline void store32(void* p, const QVec& q) { _mm256_storeu_si256(static_cast<__m256i*>(p), q.v); }

inline QVec load_q4(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), m = _mm_set1_epi8(0x0F);
  return {_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m))};
}
inline QVec load_q5(const uint8_t* qs, uint32_t qh) {
  // byte j takes byte j/8 of qh, then tests its bit j%8
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(qh)), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                                                   2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return {_mm256_or_si256(load_q4(qs).v, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))};
}

inline __m256i idot_u8(__m256i w, __m256i a) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
}
inline __m256i idot_s8(__m256i w, __m256i a) {  // |w| as u8, the sign moved onto a
  return idot_u8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}
inline QAcc fma_u8(QAcc acc, const QVec& w, const QVec& a, float s) {
  return {_mm256_fmadd_ps(_mm256_cvtepi32_ps(idot_u8(w.v, a.v)), _mm256_set1_ps(s), acc.v)};
}
inline QAcc fma_s8(QAcc acc, const QVec& w, const QVec& a, float s) {
  return {_mm256_fmadd_ps(_mm256_cvtepi32_ps(idot_s8(w.v, a.v)), _mm256_set1_ps(s), acc.v)};
}
inline QAcc fma_s8_halves(QAcc acc, const QVec& w, const QVec& a, float lo, float hi) {
  const __m256 s = _mm256_set_m128(_mm_set1_ps(hi), _mm_set1_ps(lo));
  return {_mm256_fmadd_ps(_mm256_cvtepi32_ps(idot_s8(w.v, a.v)), s, acc.v)};
}

}  // namespace llmchat::qdot
