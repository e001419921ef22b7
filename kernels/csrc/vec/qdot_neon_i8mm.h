// SMMLA (Armv8.6 i8mm) tiles for the NEON block dots, included by qdot_neon.h (see qdot.h, "pair tiles").
// One SMMLA multiplies 8 int8 of two weight rows by 8 int8 of two tokens into a 2x2 int32 tile: a block of 32
// is 4 instructions for 4 outputs, twice SDOT's work per instruction, and each output's block sum lands whole
// in one int32 lane. The float work after it is lane by lane, so an output's bits do not depend on its lane.
#pragma once
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

// Tells quant_linear.cpp to compute every output in 2 rows x 2 tokens tiles (a preprocessor switch: the tile
// code names functions only this header has).
#define LLMCHAT_QDOT_PAIR_TILES 1

namespace llmchat::qdot {

// Lanes in SMMLA's order: (row 0, token 0), (row 0, token 1), (row 1, token 0), (row 1, token 1).
struct QAcc4 { float32x4_t v; };
// Per lane: weight scale times activation scale, of the first block (or half) and of the second.
struct QScale4 { float32x4_t lo, hi; };
// One block of 32 of two rows (or two tokens) as SMMLA operands: op[i] = elements 8i..8i+7 of the first,
// then of the second.
struct QBlock2 { int8x16_t op[4]; };

inline QAcc4 qzero4() { return {vdupq_n_f32(0.f)}; }
inline void qstore4(float* lanes, QAcc4 a) { vst1q_f32(lanes, a.v); }

// Tile factors are built from the per-row and per-token ones without leaving the vector registers:
// rows [w0, w0, w1, w1], tokens [d0, d1, d0, d1], then one multiply: each lane the product a scalar gives.

// Two adjacent factors (blocks b and b + 1, or a block's two halves) of two rows, as 4 lanes [r0 f0, r0 f1,
// r1 f0, r1 f1]: lo = the first of each row, hi = the second.
inline QScale4 row_pair_factors(float32x4_t v) { return {vtrn1q_f32(v, v), vtrn2q_f32(v, v)}; }
inline QScale4 row_pair_factors(const float* r0, const float* r1) {
  return row_pair_factors(vcombine_f32(vld1_f32(r0), vld1_f32(r1)));
}
inline QScale4 row_pair_factors(const uint16_t* r0, const uint16_t* r1) {  // fp16
  uint32_t a, b;
  std::memcpy(&a, r0, 4), std::memcpy(&b, r1, 4);
  return row_pair_factors(vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(uint64_t(a) | uint64_t(b) << 32))));
}
// One factor of each row for a whole block: lo = hi = [s0, s0, s1, s1].
inline QScale4 row_block_factors(float32x2_t s01) {
  const float32x4_t v = vzip1q_f32(vcombine_f32(s01, s01), vcombine_f32(s01, s01));
  return {v, v};
}
inline QScale4 row_block_factors(const float* s0, const float* s1) { return row_block_factors(vset_lane_f32(*s1, vdup_n_f32(*s0), 1)); }
inline QScale4 row_block_factors(const uint16_t* s0, const uint16_t* s1) {  // fp16
  const uint64_t both = uint64_t(*s0) | uint64_t(*s1) << 16;
  return row_block_factors(vget_low_f32(vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(both)))));
}
inline float32x4_t token_lanes(float32x2_t d01) { return vcombine_f32(d01, d01); }
// Blocks b and b + 1 of two tokens: d0, d1 point at each token's factor of block b, b + 1 next to it.
inline QScale4 token_pair_factors(const float* d0, const float* d1) {
  const float32x2_t x = vld1_f32(d0), y = vld1_f32(d1);
  return {token_lanes(vzip1_f32(x, y)), token_lanes(vzip2_f32(x, y))};
}
// One block (both halves) of two tokens.
inline QScale4 token_factors(float d0, float d1) {
  const float32x4_t v = token_lanes(vset_lane_f32(d1, vdup_n_f32(d0), 1));
  return {v, v};
}
inline QScale4 qmul4(const QScale4& w, const QScale4& d) { return {vmulq_f32(w.lo, d.lo), vmulq_f32(w.hi, d.hi)}; }

inline void interleave16(int8x16_t a, int8x16_t b, int8x16_t* op) {
  const int64x2_t x = vreinterpretq_s64_s8(a), y = vreinterpretq_s64_s8(b);
  op[0] = vreinterpretq_s8_s64(vzip1q_s64(x, y));
  op[1] = vreinterpretq_s8_s64(vzip2q_s64(x, y));
}
// One block of two rows (weights) or two tokens (plain-order activations).
inline QBlock2 block2(const QVec& a, const QVec& b) {
  QBlock2 q;
  interleave16(a.lo, b.lo, q.op), interleave16(a.hi, b.hi, q.op + 2);
  return q;
}
// Block b (first = true) or b + 1 of two rows' weight pairs.
inline QBlock2 block2(const QPair& a, const QPair& b, bool first) { return first ? block2(a.x, b.x) : block2(a.y, b.y); }
// Block b (first = true) or b + 1 of two tokens' activation pairs (pair order, qdot_neon.h).
inline QBlock2 block2(const QActs& a, const QActs& b, bool first) {
  QBlock2 q;
  if (first) interleave16(a.a0, b.a0, q.op), interleave16(a.a2, b.a2, q.op + 2);
  else interleave16(a.a1, b.a1, q.op), interleave16(a.a3, b.a3, q.op + 2);
  return q;
}

// Exact int32 block sums of elements [8 from, 8 to) for the tile's 4 outputs.
inline int32x4_t mmla(const QBlock2& w, const QBlock2& a, int from, int to) {
  int32x4_t s = vdupq_n_s32(0);
  for (int i = from; i < to; ++i) s = vmmlaq_s32(s, w.op[i], a.op[i]);
  return s;
}
inline QAcc4 mma_s8(QAcc4 acc, const QBlock2& w, const QBlock2& a, const QScale4& sd) {
  return {vfmaq_f32(acc.v, vcvtq_f32_s32(mmla(w, a, 0, 4)), sd.lo)};
}
// Elements 0..15 scaled by sd.lo, 16..31 by sd.hi (Q6_K's 16-element sub-blocks).
inline QAcc4 mma_s8_halves(QAcc4 acc, const QBlock2& w, const QBlock2& a, const QScale4& sd) {
  const float32x4_t v = vfmaq_f32(acc.v, vcvtq_f32_s32(mmla(w, a, 0, 2)), sd.lo);
  return {vfmaq_f32(v, vcvtq_f32_s32(mmla(w, a, 2, 4)), sd.hi)};
}
// Blocks b (w0, a0, sd.lo) and b + 1 (w1, a1, sd.hi) of a 4/5-bit pair.
inline QAcc4 mma_pair(QAcc4 acc, const QBlock2& w0, const QBlock2& a0, const QBlock2& w1, const QBlock2& a1,
                      const QScale4& sd) {
  const float32x4_t v = vfmaq_f32(acc.v, vcvtq_f32_s32(mmla(w0, a0, 0, 4)), sd.lo);
  return {vfmaq_f32(v, vcvtq_f32_s32(mmla(w1, a1, 0, 4)), sd.hi)};
}

}  // namespace llmchat::qdot
