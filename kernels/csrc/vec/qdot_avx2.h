// AVX2 block dots (also what AVX-512 machines run): maddubs multiplies u8 weights by s8 activations into
// int16 pairs (no overflow: |w| <= 128, |a| <= 127), madd sums them into 8 int32 lanes of 4 elements each,
// so lanes 0-3 hold elements 0..15 and lanes 4-7 elements 16..31 (what fma_s8_halves scales).
// With VNNI (AVX512-VNNI + VL, or AVX-VNNI) one vpdpbusd does both steps: the same int32 lanes, exactly
// (the int16 sums never saturate), so the bits are the AVX2 path's.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace llmchat::qdot {

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
inline constexpr const char* kIsa = "avx2+vnni";
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
#define LLMCHAT_QDOT_VNNI 1
#elif defined(__AVXVNNI__)
inline constexpr const char* kIsa = "avx2+vnni";
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#define LLMCHAT_QDOT_VNNI 1
#else
inline constexpr const char* kIsa = "avx2";
#endif
// 2 rows x 4 tokens of accumulators: the fastest register tile measured on Zen 3 (16 registers; int8 GEMM
// 80-100 GFLOP/s on 2 threads, where 4 x 2 and 3 x 3 tiles gave 45-80)
inline constexpr int kRows = 2, kTokens = 4;

struct QVec { __m256i v; };
struct QAcc { __m256 v; };
struct QScale { __m256 v; };  // per-lane factors: lanes 0-3 the first block (or half), 4-7 the second
struct QActs { __m256i a0, a1; };  // a pair of activation blocks in pair order

inline QScale block_scale(float s) { return {_mm256_set1_ps(s)}; }
inline QScale halves_scale(float lo, float hi) { return {_mm256_set_m128(_mm_set1_ps(hi), _mm_set1_ps(lo))}; }
inline QScale pair_scale(const float* s) {  // s[0] for block b, s[1] for block b + 1
  // __m128i loads may alias any type (a double* load of floats would break strict aliasing)
  const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));
  return {_mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1))};
}
inline QScale qmul(QScale a, QScale b) { return {_mm256_mul_ps(a.v, b.v)}; }

inline QAcc qzero() { return {_mm256_setzero_ps()}; }
inline float qsum(QAcc a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
inline QVec load32(const void* p) { return {_mm256_loadu_si256(static_cast<const __m256i*>(p))}; }
inline void store32(void* p, const QVec& q) { _mm256_storeu_si256(static_cast<__m256i*>(p), q.v); }

// lo = the low nibbles of both blocks (positions 0..31 of the pair order), hi = the high nibbles (32..63).
struct QPair { __m256i lo, hi; };

inline QPair split_nibbles(__m256i b) {
  const __m256i m = _mm256_set1_epi8(0x0F);
  return {_mm256_and_si256(b, m), _mm256_and_si256(_mm256_srli_epi16(b, 4), m)};
}
inline QPair load_q4_pair(const uint8_t* qs) { return split_nibbles(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs))); }
inline QPair load_q4_single(const uint8_t* qs) {
  return split_nibbles(_mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs))));
}
// 0x10 in each byte whose bit is set: 128-bit lane i of the result holds bits of h_i, bytes of h_i picked by idx.
inline __m256i bit_bytes(__m256i h, __m256i idx) {
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(h, idx), bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}
inline QPair add_high_bits(QPair q, uint32_t h0, uint32_t h1) {
  const __m256i h = _mm256_set_m128i(_mm_set1_epi32(int(h1)), _mm_set1_epi32(int(h0)));
  const __m256i lo_idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                                          1, 1, 1, 1, 1, 1, 1);
  const __m256i hi_idx = _mm256_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
  return {_mm256_or_si256(q.lo, bit_bytes(h, lo_idx)), _mm256_or_si256(q.hi, bit_bytes(h, hi_idx))};
}
inline QPair load_q5_pair(const uint8_t* qs, const uint32_t* qh) { return add_high_bits(load_q4_pair(qs), qh[0], qh[1]); }
inline QPair load_q5_single(const uint8_t* qs, const uint32_t* qh) { return add_high_bits(load_q4_single(qs), qh[0], 0); }
inline QPair load_pair(const int8_t* p) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32))};
}
inline void store_pair(int8_t* p, const QPair& q) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), q.lo), _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 32), q.hi);
}

inline __m256i idot_u8(__m256i w, __m256i a) {  // 8 lanes of 4 elements each
#if defined(LLMCHAT_QDOT_VNNI)
  return dpbusd(_mm256_setzero_si256(), w, a);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
#endif
}
inline __m256i idot_s8(__m256i w, __m256i a) {  // |w| as u8, the sign moved onto a
  return idot_u8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}
// Weights <= 31: two int16 pair sums (<= 2 * 31 * 127 each) add without overflow before madd, whose lanes 0-3
// then hold block b and lanes 4-7 block b+1.
inline QActs load_pair_acts(const int8_t* a) { return {load32(a).v, load32(a + 32).v}; }
inline QAcc fma_pair_u8(QAcc acc, const QPair& w, const QActs& a, QScale sd) {
#if defined(LLMCHAT_QDOT_VNNI)
  const __m256i i = dpbusd(dpbusd(_mm256_setzero_si256(), w.lo, a.a0), w.hi, a.a1);
#else
  const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w.lo, a.a0), _mm256_maddubs_epi16(w.hi, a.a1));
  const __m256i i = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
  return {_mm256_fmadd_ps(_mm256_cvtepi32_ps(i), sd.v, acc.v)};
}
inline QAcc fma_s8(QAcc acc, const QVec& w, const QVec& a, QScale sd) {
  return {_mm256_fmadd_ps(_mm256_cvtepi32_ps(idot_s8(w.v, a.v)), sd.v, acc.v)};
}
inline QAcc fma_s8_halves(QAcc acc, const QVec& w, const QVec& a, QScale sd) { return fma_s8(acc, w, a, sd); }

// sum_i a[i] * b[i] in a fixed order: 8 lanes over i, then lane sum, then the tail.
inline float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = qsum({acc});
  for (; i < n; ++i) s = s + a[i] * b[i];
  return s;
}

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
inline QScale pair_scale_half(const uint16_t* s) {  // s[0] for block b, s[1] for block b + 1
  const __m128 two = _mm_cvtph_ps(_mm_cvtsi32_si128(int(uint32_t(s[0]) | (uint32_t(s[1]) << 16))));
  return {_mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1))};
}
// sum_i a[i] * b[i], a in fp16, in the same fixed order as dot_f32.
inline float dot_half_f32(const uint16_t* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i))), _mm256_loadu_ps(b + i), acc);
  float s = qsum({acc});
  for (; i < n; ++i) s = s + half_to_float(a[i]) * b[i];
  return s;
}

}  // namespace llmchat::qdot
