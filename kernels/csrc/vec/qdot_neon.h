// NEON block dots: SDOT (Armv8.4 dotprod) where the target has it, else widening multiplies (vmull/vmlal, no
// overflow: two products of |w| <= 128 and |a| <= 127 fit int16) and pairwise adds. With i8mm the quantized
// linear takes SMMLA tiles for every M instead (qdot_neon_i8mm.h, included at the end).
#pragma once
#include <arm_neon.h>

#include <cstdint>

namespace llmchat::qdot {

#if defined(__ARM_FEATURE_MATMUL_INT8) && defined(__ARM_FEATURE_DOTPROD)
inline constexpr const char* kIsa = "neon+dotprod+i8mm";
#elif defined(__ARM_FEATURE_MATMUL_INT8)
inline constexpr const char* kIsa = "neon+i8mm";
#elif defined(__ARM_FEATURE_DOTPROD)
inline constexpr const char* kIsa = "neon+dotprod";
#else
inline constexpr const char* kIsa = "neon";
#endif
inline constexpr int kRows = 4, kTokens = 4;  // 32 vector registers: 4 rows x 4 tokens of accumulators

struct QVec { int8x16_t lo, hi; };
struct QAcc { float32x4_t v; };
struct QScale { float32x4_t lo, hi; };  // the factor of the first block (or half), and of the second
struct QActs { int8x16_t a0, a1, a2, a3; };  // a pair of activation blocks in pair order

inline QScale block_scale(float s) { return {vdupq_n_f32(s), vdupq_n_f32(s)}; }
inline QScale halves_scale(float lo, float hi) { return {vdupq_n_f32(lo), vdupq_n_f32(hi)}; }
inline QScale pair_scale(const float* s) { return {vdupq_n_f32(s[0]), vdupq_n_f32(s[1])}; }
inline QScale qmul(QScale a, QScale b) { return {vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)}; }

inline QAcc qzero() { return {vdupq_n_f32(0.f)}; }
inline float qsum(QAcc a) {
  const float32x2_t s = vadd_f32(vget_low_f32(a.v), vget_high_f32(a.v));
  return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
}
inline QVec load32(const void* p) {
  const int8_t* b = static_cast<const int8_t*>(p);
  return {vld1q_s8(b), vld1q_s8(b + 16)};
}
inline void store32(void* p, const QVec& q) {
  int8_t* b = static_cast<int8_t*>(p);
  vst1q_s8(b, q.lo), vst1q_s8(b + 16, q.hi);
}
// One block's 32 weights as lo = elements 0..15, hi = 16..31; a pair is blocks b (x) and b+1 (y).
struct QPair { QVec x, y; };

inline QVec load_q4(const uint8_t* qs) {
  const uint8x16_t b = vld1q_u8(qs);
  return {vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8(b, 4))};
}
inline QVec load_q5(const uint8_t* qs, uint32_t qh) {
  // byte j takes byte j/8 of qh, then tests its bit j%8
  const uint8x16_t bytes = vreinterpretq_u8_u32(vdupq_n_u32(qh));
  static const uint8_t lo_idx[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static const uint8_t hi_idx[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bit = vld1q_u8(bits), top = vdupq_n_u8(0x10);
  const uint8x16_t lo = vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(lo_idx)), bit), top);
  const uint8x16_t hi = vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(hi_idx)), bit), top);
  QVec q = load_q4(qs);
  return {vorrq_s8(q.lo, vreinterpretq_s8_u8(lo)), vorrq_s8(q.hi, vreinterpretq_s8_u8(hi))};
}
inline QVec zero_block() { return {vdupq_n_s8(0), vdupq_n_s8(0)}; }
inline QPair load_q4_pair(const uint8_t* qs) { return {load_q4(qs), load_q4(qs + 16)}; }
inline QPair load_q4_single(const uint8_t* qs) { return {load_q4(qs), zero_block()}; }
inline QPair load_q5_pair(const uint8_t* qs, const uint32_t* qh) { return {load_q5(qs, qh[0]), load_q5(qs + 16, qh[1])}; }
inline QPair load_q5_single(const uint8_t* qs, const uint32_t* qh) { return {load_q5(qs, qh[0]), zero_block()}; }
inline QPair load_pair(const int8_t* p) {  // pair order: x.lo, y.lo, x.hi, y.hi
  return {{vld1q_s8(p), vld1q_s8(p + 32)}, {vld1q_s8(p + 16), vld1q_s8(p + 48)}};
}
inline void store_pair(int8_t* p, const QPair& q) {
  vst1q_s8(p, q.x.lo), vst1q_s8(p + 16, q.y.lo), vst1q_s8(p + 32, q.x.hi), vst1q_s8(p + 48, q.y.hi);
}

inline int32x4_t idot16(int8x16_t w, int8x16_t a) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(vdupq_n_s32(0), w, a);
#else
  int16x8_t p = vmull_s8(vget_low_s8(w), vget_low_s8(a));
  p = vmlal_s8(p, vget_high_s8(w), vget_high_s8(a));
  return vpaddlq_s16(p);
#endif
}
inline QAcc fma_s8(QAcc acc, const QVec& w, const QVec& a, QScale sd) {
  const int32x4_t i = vaddq_s32(idot16(w.lo, a.lo), idot16(w.hi, a.hi));
  return {vfmaq_f32(acc.v, vcvtq_f32_s32(i), sd.lo)};
}
inline QActs load_pair_acts(const int8_t* a) { return {vld1q_s8(a), vld1q_s8(a + 16), vld1q_s8(a + 32), vld1q_s8(a + 48)}; }
inline QAcc fma_pair_u8(QAcc acc, const QPair& w, const QActs& a, QScale sd) {
  const int32x4_t i0 = vaddq_s32(idot16(w.x.lo, a.a0), idot16(w.x.hi, a.a2));
  const int32x4_t i1 = vaddq_s32(idot16(w.y.lo, a.a1), idot16(w.y.hi, a.a3));
  const float32x4_t v = vfmaq_f32(acc.v, vcvtq_f32_s32(i0), sd.lo);
  return {vfmaq_f32(v, vcvtq_f32_s32(i1), sd.hi)};
}
inline QAcc fma_s8_halves(QAcc acc, const QVec& w, const QVec& a, QScale sd) {
  const float32x4_t v = vfmaq_f32(acc.v, vcvtq_f32_s32(idot16(w.lo, a.lo)), sd.lo);
  return {vfmaq_f32(v, vcvtq_f32_s32(idot16(w.hi, a.hi)), sd.hi)};
}

// sum_i a[i] * b[i] in a fixed order: 4 lanes over i, then lane sum, then the tail.
inline float dot_f32(const float* a, const float* b, int64_t n) {
  float32x4_t acc = vdupq_n_f32(0.f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) acc = vfmaq_f32(acc, vld1q_f32(a + i), vld1q_f32(b + i));
  float s = qsum({acc});
  for (; i < n; ++i) s = s + a[i] * b[i];
  return s;
}

inline float half_to_float(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }
inline QScale pair_scale_half(const uint16_t* s) { return {vdupq_n_f32(half_to_float(s[0])), vdupq_n_f32(half_to_float(s[1]))}; }
// sum_i a[i] * b[i], a in fp16, in the same fixed order as dot_f32.
inline float dot_half_f32(const uint16_t* a, const float* b, int64_t n) {
  float32x4_t acc = vdupq_n_f32(0.f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) acc = vfmaq_f32(acc, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(a + i))), vld1q_f32(b + i));
  float s = qsum({acc});
  for (; i < n; ++i) s = s + half_to_float(a[i]) * b[i];
  return s;
}

}  // namespace llmchat::qdot

#if defined(__ARM_FEATURE_MATMUL_INT8)
#include "qdot_neon_i8mm.h"
#endif
