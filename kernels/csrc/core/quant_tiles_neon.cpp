// Quantized linear on the ARM tile layout (see quant_tiles_neon.h). A task owns whole groups of 16 weight rows
// and runs every token against them. With i8mm and two or more tokens: SMMLA tiles of 4 row pairs x 2 token
// pairs, both operands as they lie in memory. Otherwise (decode, or no i8mm): SDOT (or widening multiplies)
// of a row pair's operand against a token's 8 bytes twice, and one pairwise add puts 4 rows' block sums in one
// vector, so the scale work is shared by 4 rows. Every path gives each block's exact int32, then the same
// float steps lane by lane. The scalar loop is the reference, and the path of builds without NEON.
#include "quant_tiles_neon.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../vec/dtypes.h"
#include "dispatch.h"
#include "tile_factors.h"

#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(LLMCHAT_FORCE_SCALAR)
#define LLMCHAT_NEON_TILES 1
#include <arm_neon.h>
#endif

// Only the fused multiply-adds written below: an output's float operations must be the same in every path.
#include "exact_float.h"

namespace llmchat {
namespace {

constexpr int kPairs = kNeonTileRows / 2;  // row pairs a group
constexpr bool nibbles(QuantKind k) { return k == QuantKind::Q4 || k == QuantKind::Q5; }  // with mins or offsets
constexpr bool nibble_values(QuantKind k) { return nibbles(k) || k == QuantKind::Q6; }
constexpr bool halves(QuantKind k) { return k == QuantKind::Q8Halves || k == QuantKind::Q6; }  // scales per 16
constexpr int64_t block_bytes(QuantKind k) { return nibble_values(k) ? 256 : 512; }
// A block's high bits, read as bytes: Q5's 64 [p / 2][8h + j], bit 4 (p % 2) + c = bit 4 of element 8c + j of
// row 2p + h; Q6's 128 [p][8h + j], bits 2c, 2c + 1 = bits 4, 5 of element 8c + j of row 2p + h.
inline const uint16_t* high_bits(const QuantWeightView& w, int64_t g, int64_t nb, int64_t b) {
  const int64_t planes = w.kind == QuantKind::Q6 ? 2 : 1;
  return w.high ? reinterpret_cast<const uint16_t*>(w.high) + (g * nb + b) * 32 * planes : nullptr;
}

// The activations of one call: plain (q [M, K], d, dsum [M, nb], offsets [M, nb] = offset * sum(q) or null)
// for the scalar loop, and in token pairs (quant_tiles_neon.h) for the vector paths: qp [P][nb][4][2][8],
// d4 / dsum4 / off4 [P][nb][4] as the lanes of an SMMLA tile want them: tokens (0, 1, 0, 1); off4 negated,
// the value an SMMLA chain starts from (no zeroing, no subtraction).
struct Acts {
  const int8_t* q;
  const float *d, *dsum;
  const int32_t* offsets;
  const int8_t* qp;
  const float *d4, *dsum4;
  const int32_t* off4;
  int64_t m, k, nb;
};

// Element e (0..31) of row n (0..15) of a block, as stored (s8, or the 4/5-bit value 0..31), Q6 as its signed
// weight (u - 32, the value its 8-bit form Q8Halves stores).
int element(QuantKind kind, const uint8_t* blk, const uint16_t* high, int n, int e) {
  const int p = n / 2, h = n % 2;
  if (!nibble_values(kind)) return int8_t(blk[64 * p + 16 * (e / 8) + 8 * h + e % 8]);
  const int byte = e % 16, v = blk[32 * p + 16 * (byte / 8) + 8 * h + byte % 8];
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(high);
  const int bit4 = high && kind == QuantKind::Q5 ? bytes[16 * (p / 2) + 8 * h + e % 8] >> (4 * (p % 2) + e / 8) & 1 : 0;
  const int u = (e < 16 ? v & 15 : v >> 4) | bit4 << 4;
  if (kind != QuantKind::Q6) return u;
  const uint8_t crumbs = bytes[16 * p + 8 * h + e % 8];
  return (u | (crumbs >> (2 * (e / 8)) & 3) << 4) - 32;  // (bit4 is Q5's only: u is the nibble)
}

// acc[r][t] of group g's 16 rows for tokens [m0, m1): the reference loop of the layout's math.
[[maybe_unused]] void scalar_group(const QuantLinearArgs& a, const Acts& x, int64_t g, int64_t m0, int64_t m1, float* acc) {
  const QuantWeightView& w = a.w;
  const Factors store = factors_of(w);
  const int64_t supers = x.k / 256;
  for (int64_t m = m0; m < m1; ++m)
    for (int n = 0; n < kNeonTileRows; ++n) {
      float v = 0.f;
      for (int64_t b = 0; b < x.nb; ++b) {
        const uint8_t* blk = static_cast<const uint8_t*>(w.values) + (g * x.nb + b) * block_bytes(w.kind);
        const uint16_t* high = high_bits(w, g, x.nb, b);
        const int sub = halves(w.kind) ? 2 : 1, size = 32 / sub;
        for (int h = 0; h < sub; ++h) {  // Q8Halves: one sum and scale per 16 elements, in order
          int32_t isum = 0;
          for (int e = size * h; e < size * (h + 1); ++e) isum += element(w.kind, blk, high, n, e) * int32_t(x.q[m * x.k + 32 * b + e]);
          if (x.offsets) isum -= x.offsets[m * x.nb + b];
          const float scale = tile_factor(store, w.scales, g, sub * b + h, sub * x.nb, supers, n);
          v = std::fma(float(isum), scale * x.d[m * x.nb + b], v);
        }
        if (w.mins) v = std::fma(tile_factor(store, w.mins, g, b, x.nb, supers, n), x.dsum[m * x.nb + b], v);
      }
      acc[(m - m0) * kNeonTileRows + n] = v;
    }
}

#if defined(LLMCHAT_NEON_TILES)
// One sub-block's factors of a group's 16 rows, 4 rows at a time: fp32 and fp16 read where they lie, compact
// ones decoded once into fp32, the same numbers as tile_factor() (an exact product).
template <int F>
struct SubBlockFactors {
  static constexpr bool kCompact = F == kCompactU6 || F == kCompactI8;
  const void* p = nullptr;
  int64_t at = 0;
  float decoded[kCompact ? kNeonTileRows : 1];

  void load(const void* p_, int64_t g, int64_t s, int64_t subs, int64_t supers) {
    p = p_, at = (g * subs + s) * kNeonTileRows;
    if constexpr (kCompact) {
      const uint8_t* group = compact_group(Factors(F), p, g, subs, supers);
      float32x4_t ints[4];
      if constexpr (F == kCompactU6) {  // quant_tiles.h: nibbles of j and j + 4, then 2-bit parts of 4h + i
        const uint8_t* bytes = group + s / 8 * kCompact6Bytes;
        const int64_t j = s % 8;
        uint8x16_t low = vld1q_u8(bytes + kTileRows * (j % 4));
        low = j < 4 ? vandq_u8(low, vdupq_n_u8(15)) : vshrq_n_u8(low, 4);
        const uint8x16_t two = vld1q_u8(bytes + 4 * kTileRows + kTileRows * (j / 4));
        const uint8x16_t high = vandq_u8(vshlq_u8(two, vdupq_n_s8(int8_t(-2 * (j % 4)))), vdupq_n_u8(3));
        const uint8x16_t u = vorrq_u8(low, vshlq_n_u8(high, 4));
        const uint16x8_t lo16 = vmovl_u8(vget_low_u8(u)), hi16 = vmovl_high_u8(u);
        ints[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo16))), ints[1] = vcvtq_f32_u32(vmovl_high_u16(lo16));
        ints[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi16))), ints[3] = vcvtq_f32_u32(vmovl_high_u16(hi16));
      } else {
        const int8x16_t v = vld1q_s8(reinterpret_cast<const int8_t*>(group) + s * kTileRows);
        const int16x8_t lo16 = vmovl_s8(vget_low_s8(v)), hi16 = vmovl_high_s8(v);
        ints[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo16))), ints[1] = vcvtq_f32_s32(vmovl_high_s16(lo16));
        ints[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi16))), ints[3] = vcvtq_f32_s32(vmovl_high_s16(hi16));
      }
      const int64_t ints_bytes = F == kCompactU6 ? supers * kCompact6Bytes : subs * kTileRows;
      const uint16_t* halves = reinterpret_cast<const uint16_t*>(group + ints_bytes) + s / (subs / supers) * kTileRows;
      for (int q = 0; q < 4; ++q)
        vst1q_f32(decoded + 4 * q, vmulq_f32(ints[q], vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(halves + 4 * q)))));
    }
  }
  float32x4_t rows4(int r0) const {  // rows r0 .. r0 + 3
    if constexpr (kCompact) return vld1q_f32(decoded + r0);
    else if constexpr (F == kF16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(static_cast<const uint16_t*>(p) + at + r0)));
    else return vld1q_f32(static_cast<const float*>(p) + at + r0);
  }
};

// The 4 SMMLA operands (elements 8c..8c+7 of both rows) of row pair p of a block.
template <QuantKind KIND>
inline void pair_operands(const uint8_t* blk, const uint16_t* high, int p, int8x16_t op[4]) {
  if constexpr (KIND == QuantKind::Q5) {  // u = nibble | bit << 4: shift-and-insert, bit c at bit c of `bits`
    const uint8x16_t v0 = vld1q_u8(blk + 32 * p), v1 = vld1q_u8(blk + 32 * p + 16), five = vdupq_n_u8(0x1F);
    uint8x16_t bits = vld1q_u8(reinterpret_cast<const uint8_t*>(high) + 16 * (p / 2)), bit4 = vdupq_n_u8(0x10);
    if (p % 2) bits = vshrq_n_u8(bits, 4);
    op[0] = vreinterpretq_s8_u8(vandq_u8(vsliq_n_u8(v0, bits, 4), five));                   // v0's low nibble
    op[1] = vreinterpretq_s8_u8(vandq_u8(vsliq_n_u8(v1, vshrq_n_u8(bits, 1), 4), five));    // v1's low nibble
    op[2] = vreinterpretq_s8_u8(vsriq_n_u8(vandq_u8(vshlq_n_u8(bits, 2), bit4), v0, 4));    // v0's high nibble
    op[3] = vreinterpretq_s8_u8(vsriq_n_u8(vandq_u8(vshlq_n_u8(bits, 1), bit4), v1, 4));    // v1's high nibble
  } else if constexpr (KIND == QuantKind::Q6) {  // u = nibble | crumb << 4, then w = u - 32: Q8Halves' bytes
    // shift-and-insert puts a nibble and its crumb in one byte: crumb c sits at bits 2c, 2c + 1 of `crumbs`
    const uint8x16_t v0 = vld1q_u8(blk + 32 * p), v1 = vld1q_u8(blk + 32 * p + 16);
    const uint8x16_t crumbs = vld1q_u8(reinterpret_cast<const uint8_t*>(high) + 16 * p), six = vdupq_n_u8(0x3F);
    const uint8x16_t u[4] = {vandq_u8(vsliq_n_u8(v0, crumbs, 4), six),                    // c 0: v0's low nibble
                             vandq_u8(vsliq_n_u8(v1, vshrq_n_u8(crumbs, 2), 4), six),     // c 1: v1's low nibble
                             vsriq_n_u8(vandq_u8(crumbs, vdupq_n_u8(0x30)), v0, 4),       // c 2: v0's high nibble
                             vsriq_n_u8(vshrq_n_u8(crumbs, 2), v1, 4)};                    // c 3: v1's high nibble
    for (int c = 0; c < 4; ++c) op[c] = vsubq_s8(vreinterpretq_s8_u8(u[c]), vdupq_n_s8(32));
  } else if constexpr (!nibble_values(KIND)) {
    for (int c = 0; c < 4; ++c) op[c] = vld1q_s8(reinterpret_cast<const int8_t*>(blk) + 64 * p + 16 * c);
  } else {
    const uint8x16_t low = vdupq_n_u8(0x0F), v0 = vld1q_u8(blk + 32 * p), v1 = vld1q_u8(blk + 32 * p + 16);
    op[0] = vreinterpretq_s8_u8(vandq_u8(v0, low)), op[2] = vreinterpretq_s8_u8(vshrq_n_u8(v0, 4));
    op[1] = vreinterpretq_s8_u8(vandq_u8(v1, low)), op[3] = vreinterpretq_s8_u8(vshrq_n_u8(v1, 4));
  }
}

// Lanes whose pairs (0 + 1, 2 + 3) are the two rows' dots of one operand with a token's 8 bytes (twice in a).
inline int32x4_t pair_dot(int32x4_t acc, int8x16_t w, int8x16_t a) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, w, a);
#else
  const int16x8_t p0 = vmull_s8(vget_low_s8(w), vget_low_s8(a)), p1 = vmull_high_s8(w, a);
  return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1)));
#endif
}

// out lanes -> res[t][n] for the 16 rows of a group, T tokens from m0: SDOT (or widening) block sums.
template <QuantKind KIND, int F, bool MINS, bool OFF, int T>
void dot_tile(const QuantWeightView& w, const Acts& x, int64_t g, int64_t m0, float (*res)[kNeonTileRows]) {
  constexpr int kSub = halves(KIND) ? 2 : 1;
  float32x4_t acc[4][T];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_f32(0.f);
  for (int64_t b = 0; b < x.nb; ++b) {
    const uint8_t* blk = static_cast<const uint8_t*>(w.values) + (g * x.nb + b) * block_bytes(KIND);
    const uint16_t* high = high_bits(w, g, x.nb, b);
    int8x16_t act[T][4];
    float32x4_t d[T], ds[T];
    int32x4_t off[T];
    for (int t = 0; t < T; ++t) {
      const int64_t m = m0 + t, at = (m / 2 * x.nb + b) * 4 + m % 2;
      const int8_t* q = x.qp + (m / 2 * x.nb + b) * 64 + 8 * (m % 2);
      for (int c = 0; c < 4; ++c) act[t][c] = vreinterpretq_s8_s64(vld1q_dup_s64(reinterpret_cast<const int64_t*>(q + 16 * c)));
      d[t] = vdupq_n_f32(x.d4[at]);
      if constexpr (MINS) ds[t] = vdupq_n_f32(x.dsum4[at]);
      if constexpr (OFF) off[t] = vdupq_n_s32(x.off4[at]);
    }
    SubBlockFactors<F> scales[kSub], mins;
    for (int h = 0; h < kSub; ++h) scales[h].load(w.scales, g, kSub * b + h, kSub * x.nb, x.k / 256);
    if constexpr (MINS) mins.load(w.mins, g, b, x.nb, x.k / 256);
    for (int quad = 0; quad < 4; ++quad) {
      float32x4_t s[kSub], mn;
      for (int h = 0; h < kSub; ++h) s[h] = scales[h].rows4(4 * quad);
      if constexpr (MINS) mn = mins.rows4(4 * quad);
      int8x16_t w0[4], w1[4];
      pair_operands<KIND>(blk, high, 2 * quad, w0), pair_operands<KIND>(blk, high, 2 * quad + 1, w1);
      for (int t = 0; t < T; ++t) {
        for (int h = 0; h < kSub; ++h) {  // chunks of each sub-block (Q8Halves: 0-1 and 2-3)
          int32x4_t x0 = vdupq_n_s32(0), x1 = vdupq_n_s32(0);
          for (int c = h * 4 / kSub; c < (h + 1) * 4 / kSub; ++c) x0 = pair_dot(x0, w0[c], act[t][c]), x1 = pair_dot(x1, w1[c], act[t][c]);
          int32x4_t isum = vpaddq_s32(x0, x1);  // rows 4 quad .. 4 quad + 3
          if constexpr (OFF) isum = vaddq_s32(isum, off[t]);  // off4 holds -offset * sum(q)
          acc[quad][t] = vfmaq_f32(acc[quad][t], vcvtq_f32_s32(isum), vmulq_f32(s[h], d[t]));
        }
        if constexpr (MINS) acc[quad][t] = vfmaq_f32(acc[quad][t], mn, ds[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int quad = 0; quad < 4; ++quad) vst1q_f32(res[t] + 4 * quad, acc[quad][t]);
}

#if defined(__ARM_FEATURE_MATMUL_INT8)
constexpr int kMmaRowPairs = 4, kMmaTokenPairs = 2;

// SMMLA: RP row pairs from pair p0 of group g x TP token pairs from pair t0, lanes (r0 t0, r0 t1, r1 t0, r1 t1).
template <QuantKind KIND, int F, bool MINS, bool OFF, int RP, int TP>
void mma_tile(const QuantWeightView& w, const Acts& x, int64_t g, int p0, int64_t t0, float32x4_t (*out)[kMmaTokenPairs]) {
  static_assert(RP % 2 == 0, "row pairs by 4 rows' factors");
  constexpr int kSub = halves(KIND) ? 2 : 1;
  float32x4_t acc[RP][TP];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_f32(0.f);
  for (int64_t b = 0; b < x.nb; ++b) {
    const uint8_t* blk = static_cast<const uint8_t*>(w.values) + (g * x.nb + b) * block_bytes(KIND);
    const uint16_t* high = high_bits(w, g, x.nb, b);
    int8x16_t act[TP][4];
    float32x4_t d[TP], ds[TP];
    int32x4_t off[TP];
    for (int j = 0; j < TP; ++j) {
      const int64_t at = ((t0 + j) * x.nb + b) * 4;
      for (int c = 0; c < 4; ++c) act[j][c] = vld1q_s8(x.qp + at * 16 + 16 * c);
      d[j] = vld1q_f32(x.d4 + at);
      if constexpr (MINS) ds[j] = vld1q_f32(x.dsum4 + at);
      if constexpr (OFF) off[j] = vld1q_s32(x.off4 + at);
    }
    SubBlockFactors<F> scales[kSub], mins;
    for (int h = 0; h < kSub; ++h) scales[h].load(w.scales, g, kSub * b + h, kSub * x.nb, x.k / 256);
    if constexpr (MINS) mins.load(w.mins, g, b, x.nb, x.k / 256);
    float32x4_t s[kSub][RP], mn[RP];  // per row pair: (r0, r0, r1, r1)
    for (int i = 0; i < RP; i += 2) {
      for (int h = 0; h < kSub; ++h) {
        const float32x4_t v = scales[h].rows4(2 * (p0 + i));
        s[h][i] = vzip1q_f32(v, v), s[h][i + 1] = vzip2q_f32(v, v);
      }
      if constexpr (MINS) {
        const float32x4_t u = mins.rows4(2 * (p0 + i));
        mn[i] = vzip1q_f32(u, u), mn[i + 1] = vzip2q_f32(u, u);
      }
    }
    for (int i = 0; i < RP; ++i) {
      int8x16_t op[4];
      pair_operands<KIND>(blk, high, p0 + i, op);
      for (int j = 0; j < TP; ++j) {
        for (int h = 0; h < kSub; ++h) {  // chunks of each sub-block (Q8Halves: 0-1 and 2-3)
          int32x4_t isum = vdupq_n_s32(0);
          if constexpr (OFF) isum = off[j];  // -offset * sum(q): the chain starts there
          for (int c = h * 4 / kSub; c < (h + 1) * 4 / kSub; ++c) isum = vmmlaq_s32(isum, op[c], act[j][c]);
          acc[i][j] = vfmaq_f32(acc[i][j], vcvtq_f32_s32(isum), vmulq_f32(s[h][i], d[j]));
        }
        if constexpr (MINS) acc[i][j] = vfmaq_f32(acc[i][j], mn[i], ds[j]);
      }
    }
  }
  for (int i = 0; i < RP; ++i)
    for (int j = 0; j < TP; ++j) out[i][j] = acc[i][j];
}

// res[t][n] for tokens [m0, m1) of group g on SMMLA tiles (a lone last token is its pair's first lane).
template <QuantKind KIND, int F, bool MINS, bool OFF>
void mma_group(const QuantWeightView& w, const Acts& x, int64_t g, int64_t m0, int64_t m1, float (*res)[kNeonTileRows]) {
  for (int64_t t0 = m0 / 2; 2 * t0 < m1; t0 += kMmaTokenPairs) {
    const bool two = 2 * (t0 + 1) < m1;
    for (int p0 = 0; p0 < kPairs; p0 += kMmaRowPairs) {
      float32x4_t out[kMmaRowPairs][kMmaTokenPairs];
      if (two) mma_tile<KIND, F, MINS, OFF, kMmaRowPairs, 2>(w, x, g, p0, t0, out);
      else mma_tile<KIND, F, MINS, OFF, kMmaRowPairs, 1>(w, x, g, p0, t0, out);
      for (int i = 0; i < kMmaRowPairs; ++i)
        for (int j = 0; j < (two ? 2 : 1); ++j) {
          float lanes[4];
          vst1q_f32(lanes, out[i][j]);
          for (int h = 0; h < 2; ++h)
            for (int u = 0; u < 2; ++u) {
              const int64_t m = 2 * (t0 + j) + u;
              if (m < m1) res[m - m0][2 * (p0 + i) + h] = lanes[2 * h + u];
            }
        }
    }
  }
}
#endif

template <QuantKind KIND, int F, bool MINS, bool OFF>
void vector_group(const QuantWeightView& w, const Acts& x, int64_t g, int64_t m0, int64_t m1, float (*res)[kNeonTileRows]) {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  if (x.m > 1) return mma_group<KIND, F, MINS, OFF>(w, x, g, m0, m1, res);
#endif
  int64_t m = m0;
  for (; m + 4 <= m1; m += 4) dot_tile<KIND, F, MINS, OFF, 4>(w, x, g, m, res + (m - m0));
  for (; m < m1; ++m) dot_tile<KIND, F, MINS, OFF, 1>(w, x, g, m, res + (m - m0));
}

template <QuantKind KIND, int F>
void vector_group_any(const QuantWeightView& w, const Acts& x, int64_t g, int64_t m0, int64_t m1, float (*res)[kNeonTileRows]) {
  if (w.mins) return vector_group<KIND, F, true, false>(w, x, g, m0, m1, res);
  if (x.offsets) return vector_group<KIND, F, false, true>(w, x, g, m0, m1, res);
  vector_group<KIND, F, false, false>(w, x, g, m0, m1, res);
}
#endif

// Tokens of one group at a time, in chunks whose results fit a small buffer (token pairs stay whole).
constexpr int64_t kChunk = 64;

void run_group(const QuantLinearArgs& a, const Acts& x, int64_t g) {
  float res[kChunk][kNeonTileRows];
  for (int64_t m0 = 0; m0 < a.m; m0 += kChunk) {
    const int64_t m1 = std::min(a.m, m0 + kChunk);
#if defined(LLMCHAT_NEON_TILES)
    const Factors store = factors_of(a.w);
    switch (a.w.kind) {
      case QuantKind::Q8:
        store == kF16 ? vector_group_any<QuantKind::Q8, kF16>(a.w, x, g, m0, m1, res)
                      : vector_group_any<QuantKind::Q8, kF32>(a.w, x, g, m0, m1, res);
        break;
      case QuantKind::Q8Halves:  // Q6_K's compact factors: i8
        store == kCompactI8 ? vector_group_any<QuantKind::Q8Halves, kCompactI8>(a.w, x, g, m0, m1, res)
        : store == kF16     ? vector_group_any<QuantKind::Q8Halves, kF16>(a.w, x, g, m0, m1, res)
                            : vector_group_any<QuantKind::Q8Halves, kF32>(a.w, x, g, m0, m1, res);
        break;
      case QuantKind::Q5:  // Q5_K's compact factors: u6
        store == kCompactU6 ? vector_group_any<QuantKind::Q5, kCompactU6>(a.w, x, g, m0, m1, res)
        : store == kF16     ? vector_group_any<QuantKind::Q5, kF16>(a.w, x, g, m0, m1, res)
                            : vector_group_any<QuantKind::Q5, kF32>(a.w, x, g, m0, m1, res);
        break;
      case QuantKind::Q6:  // Q6_K in its own 6 bits, i8 sc
        store == kCompactI8 ? vector_group_any<QuantKind::Q6, kCompactI8>(a.w, x, g, m0, m1, res)
        : store == kF16     ? vector_group_any<QuantKind::Q6, kF16>(a.w, x, g, m0, m1, res)
                            : vector_group_any<QuantKind::Q6, kF32>(a.w, x, g, m0, m1, res);
        break;
      default:
        store == kCompactU6 ? vector_group_any<QuantKind::Q4, kCompactU6>(a.w, x, g, m0, m1, res)
        : store == kF16     ? vector_group_any<QuantKind::Q4, kF16>(a.w, x, g, m0, m1, res)
                            : vector_group_any<QuantKind::Q4, kF32>(a.w, x, g, m0, m1, res);
    }
#else
    scalar_group(a, x, g, m0, m1, &res[0][0]);
#endif
    dispatch_dtype(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* bias = static_cast<const T*>(a.bias);
      T* out = static_cast<T*>(a.out);
      for (int64_t m = m0; m < m1; ++m)
        for (int n = 0; n < kNeonTileRows; ++n) {
          const int64_t row = g * kNeonTileRows + n;
          float v = res[m - m0][n];
          if (bias) v = v + to_float(bias[row]);
          out[m * a.out_stride + row] = from_float<T>(v);
        }
    });
  }
}

// The plain quantized activations reordered into token pairs, with the lanes' factors and offsets.
[[maybe_unused]] void pair_layout(Acts& x, int32_t offset, std::vector<int8_t>& qp, std::vector<float>& d4, std::vector<float>& dsum4,
                 std::vector<int32_t>& off4, const Runtime& rt) {
  const int64_t pairs = (x.m + 1) / 2, nb = x.nb;
  qp.resize(size_t(pairs * nb * 64)), d4.resize(size_t(pairs * nb * 4)), dsum4.resize(d4.size());
  off4.resize(offset != 0 ? d4.size() : 0);
  int8_t* q = qp.data();  // (thread_local: the workers see their own vectors under these names)
  float *d = d4.data(), *ds = dsum4.data();
  int32_t* off = off4.data();
  const Acts& src = x;
  rt.parallel_for(pairs, grain_for(2 * x.k), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t at = (p * nb + b) * 4;
        for (int u = 0; u < 2; ++u) {
          const int64_t m = 2 * p + u;
          const bool real = m < src.m;
          for (int c = 0; c < 4; ++c)
            for (int j = 0; j < 8; ++j) q[at * 16 + 16 * c + 8 * u + j] = real ? src.q[m * src.k + 32 * b + 8 * c + j] : 0;
          const float dv = real ? src.d[m * nb + b] : 0.f, sv = real ? src.dsum[m * nb + b] : 0.f;
          d[at + u] = d[at + 2 + u] = dv, ds[at + u] = ds[at + 2 + u] = sv;
          if (offset != 0) off[at + u] = off[at + 2 + u] = real ? -src.offsets[m * nb + b] : 0;
        }
      }
  });
  x.qp = qp.data(), x.d4 = d4.data(), x.dsum4 = dsum4.data(), x.off4 = offset != 0 ? off4.data() : nullptr;
}

}  // namespace

bool neon_tiles_compiled() {
#if defined(__aarch64__)
  return true;
#else
  return false;
#endif
}

bool neon_tiles_take(QuantKind) { return true; }

const char* quant_tiles_neon_isa() {
#if !defined(LLMCHAT_NEON_TILES)
  return "scalar";
#elif defined(__ARM_FEATURE_MATMUL_INT8)
  return "neon+i8mm";
#elif defined(__ARM_FEATURE_DOTPROD)
  return "neon+dotprod";
#else
  return "neon";
#endif
}

void quant_tiles_neon_linear(const QuantLinearArgs& a, const Runtime& rt) {
  if (a.m <= 0 || a.w.n <= 0) return;
  const int64_t nb = a.w.k / 32, groups = a.w.n / kNeonTileRows;
  thread_local std::vector<int8_t> q, qp;
  thread_local std::vector<float> d, dsum, d4, dsum4;
  thread_local std::vector<int32_t> offsets, off4;
  q.resize(size_t(a.m * a.w.k)), d.resize(size_t(a.m * nb)), dsum.resize(size_t(a.m * nb));
  quantize_activations(a.dtype, a.x, a.x_stride, a.m, a.w.k, q.data(), d.data(), dsum.data(), rt);
  // Q4_0: u = w + 8, so sum u q - 8 sum q is the signed dot (min = -8 x scale, taken off in int32)
  const int32_t offset = nibbles(a.w.kind) && a.w.mins == nullptr ? -a.w.min_offset : 0;
  offsets.resize(offset != 0 ? size_t(a.m * nb) : 0);
  if (offset != 0) {
    const int8_t* qs = q.data();
    int32_t* sums = offsets.data();
    rt.parallel_for(a.m, grain_for(a.w.k), [&](int64_t m0, int64_t m1) {
      for (int64_t i = m0 * nb; i < m1 * nb; ++i) {
        int32_t sum = 0;
        for (int j = 0; j < 32; ++j) sum += qs[i * 32 + j];
        sums[i] = offset * sum;
      }
    });
  }
  Acts x{q.data(), d.data(), dsum.data(), offset != 0 ? offsets.data() : nullptr, nullptr, nullptr, nullptr, nullptr,
         a.m, a.w.k, nb};
#if defined(LLMCHAT_NEON_TILES)
  pair_layout(x, offset, qp, d4, dsum4, off4, rt);
#endif
  const int64_t work = std::max<int64_t>(1, a.w.k * kNeonTileRows * a.m);
  const int64_t per_thread = (groups + rt.num_threads - 1) / std::max(1, rt.num_threads);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(per_thread, kMinChunkMacs / work));
  rt.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) run_group(a, x, g);
  });
}

void quant_tiles_neon_rows(const QuantWeightView& w, const int64_t* ids, int64_t num_ids, DType dt, void* out,
                           int64_t out_stride, const Runtime& rt) {
  const int64_t K = w.k, nb = K / 32, supers = K / 256;
  const Factors store = factors_of(w);
  rt.parallel_for(num_ids, grain_for(K), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = ids[i] / kNeonTileRows;
      const int n = int(ids[i] % kNeonTileRows);
      dispatch_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        T* o = static_cast<T*>(out) + i * out_stride;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = static_cast<const uint8_t*>(w.values) + (g * nb + b) * block_bytes(w.kind);
          const uint16_t* high = high_bits(w, g, nb, b);
          for (int e = 0; e < 32; ++e) {
            const float s = halves(w.kind)
                                ? tile_factor(store, w.scales, g, 2 * b + e / 16, 2 * nb, supers, n)
                                : tile_factor(store, w.scales, g, b, nb, supers, n);
            float value = s * float(element(w.kind, blk, high, n, e));  // two roundings, as numpy does it
            if (w.mins != nullptr) value = value + tile_factor(store, w.mins, g, b, nb, supers, n);
            else if (w.min_offset != 0) value = value + float(w.min_offset) * s;
            o[32 * b + e] = from_float<T>(value);
          }
        }
      });
    }
  });
}

void neon_tile_values(QuantKind kind, int64_t n, int64_t k, const void* rows, void* tiled) {
  const int64_t nb = k / 32, row_block = nibble_values(kind) ? 16 : 32, chunks = row_block / 8;
  const uint8_t* src = static_cast<const uint8_t*>(rows);
  uint8_t* dst = static_cast<uint8_t*>(tiled);
  for (int64_t r = 0; r < n; ++r)  // [g, p, h, b, c, j] -> [g, b, p, c, h, j]
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t c = 0; c < chunks; ++c)
        for (int j = 0; j < 8; ++j) {
          const int64_t g = r / kNeonTileRows, p = r % kNeonTileRows / 2, h = r % 2;
          dst[(g * nb + b) * kNeonTileRows * row_block + p * 2 * row_block + c * 16 + h * 8 + j] =
              src[r * nb * row_block + b * row_block + c * 8 + j];
        }
}

void neon_tile_high(int64_t n, int64_t k, const uint32_t* rows, uint32_t* tiled, int planes) {
  const int64_t nb = k / 32;
  uint16_t* dst = reinterpret_cast<uint16_t*>(tiled);
  uint8_t* crumbs = reinterpret_cast<uint8_t*>(tiled);
  std::memset(dst, 0, size_t(n * nb * 4 * planes));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < nb; ++b)
      for (int plane = 0; plane < planes; ++plane)
        for (int e = 0; e < 32; ++e) {
          const int64_t g = r / kNeonTileRows, p = r % kNeonTileRows / 2, h = r % 2;
          if (!((rows[(r * nb + b) * planes + plane] >> e) & 1)) continue;
          if (planes == 1) crumbs[(g * nb + b) * 64 + 16 * (p / 2) + 8 * h + e % 8] |= uint8_t(1u << (4 * (p % 2) + e / 8));
          else crumbs[(g * nb + b) * 128 + 16 * p + 8 * h + e % 8] |= uint8_t(1u << (2 * (e / 8) + plane));
        }
}

void neon_tile_factors(int64_t n, int64_t per_row, int elem_bytes, const void* rows, void* tiled) {
  const uint8_t* src = static_cast<const uint8_t*>(rows);
  uint8_t* dst = static_cast<uint8_t*>(tiled);
  for (int64_t r = 0; r < n; ++r)  // [g, n, s] -> [g, s, n]
    for (int64_t s = 0; s < per_row; ++s) {
      const int64_t g = r / kNeonTileRows, at = (g * per_row + s) * kNeonTileRows + r % kNeonTileRows;
      std::memcpy(dst + at * elem_bytes, src + (r * per_row + s) * elem_bytes, size_t(elem_bytes));
    }
}

}  // namespace llmchat
