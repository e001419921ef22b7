// BFMMLA tiles over the packed bf16 panels (NEON with bf16, included by panel_neon.h): what core/packed_linear.cpp
// runs for steps of two or more tokens, from the same one weight copy as the BFDOT panel.
//   BFMMLA d += a b^T: a, b 2x4 bf16 (2 rows of 4 k each), d 2x2 fp32, d[2i + j] = d[2i + j] + a row i . b row j.
//   Weights: a panel holds k-pair j of rows 4g..4g+3 in its q register g; zip1 of pair j's and pair j+1's
//   register is [row 4g k0..3, row 4g+1 k0..3], zip2 the same for rows 4g+2, 4g+3: a 2x4 operand each.
//   Tokens: put into pairs once per call (TokenPairs), [token 2p k0..3, token 2p+1 k0..3] per k-quad.
//   GroupAcc: one 4-row group x one token pair, q[0] = (rows 4g, 4g+1) x (t0, t1), q[1] = rows 4g+2, 4g+3.
// Determinism: the Arm ARM defines each BFMMLA output as BFDotAdd(BFDotAdd(acc, k0, k1), k2, k3) and each BFDOT
// lane as one BFDotAdd, so a k-quad here is the BFDOT panel's two k-pairs in k order, bit for bit. A lone last
// k-pair (ceil(K/2) odd) takes a BFDOT on the tile's lanes instead of a BFMMLA against a zero pair: that extra
// BFDotAdd(acc, +0) would turn an acc of -0 into +0 (and BFDotAdd flushes denormals), a step the BFDOT chain has
// not. Outputs then go back to one token's 4 rows per register, and bias and rounding are panel_neon.h's.
#pragma once
#include <arm_neon.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dtypes.h"

namespace llmchat::panel::mmla {

// 4-row groups x token pairs a block computes: 8 rows x 10 tokens, 20 accumulators + 5 token pairs + one group's
// 2 operands of 32 q registers. llvm-mca (tools/estimate, clang and gcc): 0.019 cycles/MAC on Neoverse V1, 0.038
// on N2, 0.025 on the M2 model; 4 x 20 is 9% faster on V1/N2 (but reads a quarter of each panel line a pass, and
// 9% slower on the M2), 16 x 4 25% slower, 16 x 6 spills with clang.
inline constexpr int kGroups = 2, kPairs = 5;

struct GroupAcc { float32x4_t q[2]; };
struct GroupWeights { bfloat16x8_t lo, hi; };

// x [M, K] (row stride ld) as token pairs: pair p, slot s is 8 bf16 at data[p * stride + 8 s]; slot s < quads
// is k-quad s of both tokens, the last slot of an odd ceil(K/2) the lone k-pair as [t0, t1, t0, t1] (BFDOT's
// operand for the tile's lanes). Missing k and the missing token of an odd M are zero.
struct TokenPairs {
  std::vector<uint16_t> data;
  int64_t pairs = 0, quads = 0, stride = 0;
  bool lone = false;

  TokenPairs(const bf16_t* x, int64_t ld, int64_t m, int64_t k) {
    const int64_t kp = (k + 1) / 2;
    pairs = (m + 1) / 2, quads = kp / 2, lone = kp % 2, stride = 8 * (quads + lone);
    data.assign(size_t(pairs * stride), 0);
    for (int64_t t = 0; t < m; ++t) {
      const uint16_t* row = reinterpret_cast<const uint16_t*>(x + t * ld);
      uint16_t* dst = data.data() + (t / 2) * stride + 4 * (t % 2);
      // An odd K ends its last quad one element early: the element after it is not this row's (NaN bits past
      // the tensor's end would reach the zero weight pair as NaN * 0).
      for (int64_t s = 0; s < quads; ++s) std::memcpy(dst + 8 * s, row + 4 * s, size_t(std::min<int64_t>(4, k - 4 * s)) * 2);
      if (lone) {
        const int64_t k0 = 4 * quads;
        const uint16_t lo = row[k0], hi = k0 + 1 < k ? row[k0 + 1] : 0;
        uint16_t* tail = data.data() + (t / 2) * stride + 8 * quads + 2 * (t % 2);
        tail[0] = tail[4] = lo, tail[1] = tail[5] = hi;
      }
    }
  }
  const bf16_t* pair(int64_t p) const { return reinterpret_cast<const bf16_t*>(data.data() + p * stride); }
};

inline GroupAcc acc_zero() {
  const float32x4_t z = vdupq_n_f32(0.f);
  return {{z, z}};
}
inline bfloat16x8_t load8(const bf16_t* p) { return vreinterpretq_bf16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(p))); }

// Group g's registers of k-pairs j and j + 1 (w points at pair j's, the next pair 32 bf16 on) as 2x4 operands.
inline GroupWeights load_quad(const bf16_t* w) {
  const uint32x4_t a = vreinterpretq_u32_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(w)));
  const uint32x4_t b = vreinterpretq_u32_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(w + 32)));
  return {vreinterpretq_bf16_u32(vzip1q_u32(a, b)), vreinterpretq_bf16_u32(vzip2q_u32(a, b))};
}
// The lone k-pair j of group g as BFDOT operands on the tile's lanes: [row 4g, row 4g, row 4g+1, row 4g+1], ...
inline GroupWeights load_lone(const bf16_t* w) {
  const uint32x4_t a = vreinterpretq_u32_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(w)));
  return {vreinterpretq_bf16_u32(vzip1q_u32(a, a)), vreinterpretq_bf16_u32(vzip2q_u32(a, a))};
}
inline GroupAcc quad_mmla(GroupAcc acc, const GroupWeights& w, bfloat16x8_t x) {
  return {{vbfmmlaq_f32(acc.q[0], w.lo, x), vbfmmlaq_f32(acc.q[1], w.hi, x)}};
}
inline GroupAcc lone_dot(GroupAcc acc, const GroupWeights& w, bfloat16x8_t x) {
  return {{vbfdotq_f32(acc.q[0], w.lo, x), vbfdotq_f32(acc.q[1], w.hi, x)}};
}
// Rows 4g..4g+3 of token 2p (first) or 2p + 1 (second).
inline float32x4_t first_token(const GroupAcc& a) { return vuzp1q_f32(a.q[0], a.q[1]); }
inline float32x4_t second_token(const GroupAcc& a) { return vuzp2q_f32(a.q[0], a.q[1]); }
// v + bias rounded to bf16, rows [0, valid) of the 4 stored: panel_neon.h's add and store_rounded on one register.
inline void store_rows(bf16_t* out, float32x4_t v, float32x4_t bias, int valid) {
  const uint16x4_t r = vreinterpret_u16_bf16(vcvt_bf16_f32(vaddq_f32(v, bias)));
  if (valid >= 4) return vst1_u16(reinterpret_cast<uint16_t*>(out), r);
  uint16_t u[4];
  vst1_u16(u, r);
  std::memcpy(out, u, size_t(valid > 0 ? valid : 0) * 2);
}

}  // namespace llmchat::panel::mmla
