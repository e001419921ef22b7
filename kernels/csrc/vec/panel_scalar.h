// Portable panel: 16 floats, the pair-dot as two multiply-adds (even element, then odd: k order). Runs
// wherever the CPU has no bf16 pair-dot; packing does not pay off there (kNative false), but the blocking
// mirrors the AVX512-BF16 instance so tests on any machine walk the same panel groups and token tails.
#pragma once
#include <cstdint>
#include <cstring>

#include "dtypes.h"

namespace llmchat::panel {

inline constexpr const char* kIsa = "scalar";
inline constexpr bool kNative = false;
inline constexpr int kPanels = 4, kTokens = 6;

struct PanelAcc { float v[16]; };
struct PanelWeights { bf16_t w[32]; };
struct XPair { float lo, hi; };
struct RowMask { int valid; };

inline PanelAcc acc_zero() { return {}; }
inline PanelWeights load_weights(const bf16_t* p) {
  PanelWeights w;
  std::memcpy(w.w, p, sizeof w.w);
  return w;
}
inline XPair broadcast_pair(uint32_t pair) {
  return {to_float(bf16_t{uint16_t(pair & 0xffffu)}), to_float(bf16_t{uint16_t(pair >> 16)})};
}
inline PanelAcc pair_dot(PanelAcc acc, const PanelWeights& w, XPair x) {
  for (int r = 0; r < 16; ++r) {
    acc.v[r] = acc.v[r] + to_float(w.w[2 * r]) * x.lo;
    acc.v[r] = acc.v[r] + to_float(w.w[2 * r + 1]) * x.hi;
  }
  return acc;
}

inline RowMask row_mask(int valid) { return {valid}; }
inline PanelAcc load_bias(const bf16_t* b, RowMask mask) {
  PanelAcc r{};
  for (int i = 0; i < mask.valid && i < 16; ++i) r.v[i] = to_float(b[i]);
  return r;
}
inline PanelAcc add(PanelAcc a, PanelAcc b) {
  for (int r = 0; r < 16; ++r) a.v[r] = a.v[r] + b.v[r];
  return a;
}
inline void store_rounded(bf16_t* out, PanelAcc v, RowMask mask) {
  for (int r = 0; r < mask.valid && r < 16; ++r) out[r] = to_bf16(v.v[r]);
}

}  // namespace llmchat::panel
