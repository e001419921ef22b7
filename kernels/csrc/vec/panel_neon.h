// NEON+BF16 panel: four q registers per panel (rows 4i..4i+3 in register i), one BFDOT each per token and
// k-pair. The 64-byte panel pair is four bfloat16x8_t, each four rows of (even, odd), which is the pair
// layout BFDOT dots against the broadcast x pair. FEAT_BF16 has BFMMLA too: steps of two or more tokens run
// its tiles over the same panels (panel_bfmmla.h, LLMCHAT_PANEL_BFMMLA), decode runs BFDOT.
#pragma once
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "dtypes.h"
#include "panel_bfmmla.h"

#define LLMCHAT_PANEL_BFMMLA 1

namespace llmchat::panel {

inline constexpr const char* kIsa = "neon+bf16+bfmmla";
inline constexpr bool kNative = true;
// 32 q registers: 2 panels x 2 tokens x 4 accumulators + 8 weights + 1 broadcast. Two panels give a lone
// decode token eight independent BFDOT chains (one panel's four leave it latency-bound); llvm-mca put 2x2 at
// or near the best cycles per MAC of the shapes that fit on Neoverse V1/N2 and Apple M2 (tools/estimate).
inline constexpr int kPanels = 2, kTokens = 2;

struct PanelAcc { float32x4_t q[4]; };
struct PanelWeights { bfloat16x8_t q[4]; };
struct XPair { bfloat16x8_t v; };
struct RowMask { int valid; };

inline PanelAcc acc_zero() {
  const float32x4_t z = vdupq_n_f32(0.f);
  return {{z, z, z, z}};
}
inline PanelWeights load_weights(const bf16_t* p) {
  const uint16_t* u = reinterpret_cast<const uint16_t*>(p);
  return {{vreinterpretq_bf16_u16(vld1q_u16(u)), vreinterpretq_bf16_u16(vld1q_u16(u + 8)),
           vreinterpretq_bf16_u16(vld1q_u16(u + 16)), vreinterpretq_bf16_u16(vld1q_u16(u + 24))}};
}
inline XPair broadcast_pair(uint32_t pair) { return {vreinterpretq_bf16_u32(vdupq_n_u32(pair))}; }
inline PanelAcc pair_dot(PanelAcc acc, const PanelWeights& w, XPair x) {
  return {{vbfdotq_f32(acc.q[0], w.q[0], x.v), vbfdotq_f32(acc.q[1], w.q[1], x.v),
           vbfdotq_f32(acc.q[2], w.q[2], x.v), vbfdotq_f32(acc.q[3], w.q[3], x.v)}};
}

inline RowMask row_mask(int valid) { return {valid}; }
inline PanelAcc load_bias(const bf16_t* b, RowMask mask) {
  uint16_t u[16] = {};  // a ragged panel must not read past the bias
  std::memcpy(u, b, size_t(mask.valid >= 16 ? 16 : mask.valid) * 2);
  PanelAcc r;
  for (int i = 0; i < 4; ++i) r.q[i] = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(u + 4 * i), 16));
  return r;
}
inline PanelAcc add(PanelAcc a, PanelAcc b) {
  return {{vaddq_f32(a.q[0], b.q[0]), vaddq_f32(a.q[1], b.q[1]), vaddq_f32(a.q[2], b.q[2]), vaddq_f32(a.q[3], b.q[3])}};
}
inline void store_rounded(bf16_t* out, PanelAcc v, RowMask mask) {
  uint16_t u[16];
  uint16_t* dst = mask.valid >= 16 ? reinterpret_cast<uint16_t*>(out) : u;  // a ragged panel goes through u
  for (int i = 0; i < 4; ++i) vst1_u16(dst + 4 * i, vreinterpret_u16_bf16(vcvt_bf16_f32(v.q[i])));
  if (dst == u) std::memcpy(out, u, size_t(mask.valid) * 2);
}

}  // namespace llmchat::panel
