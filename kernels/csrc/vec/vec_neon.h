// AArch64 NEON implementation of the 16-lane fp32 vector type (four 4-lane registers).
// bf16 stores use the BF16 extension's conversion (BFCVTN) when the target has it; fp16 is native on AArch64.
#pragma once
#include <arm_neon.h>
#include <cstring>
#include "dtypes.h"

namespace llmchat::vec {

#if defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
#define LLMCHAT_NEON_BF16 1
inline constexpr const char* kIsa = "neon+bf16";
#else
inline constexpr const char* kIsa = "neon";
#endif

namespace neon {
// The low / high four of eight bf16 as fp32: each value zipped above a zero half. ZIP issues on both SIMD pipes
// of Cortex-A76 / Neoverse N1 where SHLL takes one, and a GEMV widens one weight register per FMA.
inline float32x4_t widen_bf16_lo(uint16x8_t x) { return vreinterpretq_f32_u16(vzip1q_u16(vdupq_n_u16(0), x)); }
inline float32x4_t widen_bf16_hi(uint16x8_t x) { return vreinterpretq_f32_u16(vzip2q_u16(vdupq_n_u16(0), x)); }
inline uint16x4_t narrow_bf16(float32x4_t v) {
#ifdef LLMCHAT_NEON_BF16
  return vreinterpret_u16_bf16(vcvt_bf16_f32(v));
#else
  uint32x4_t u = vreinterpretq_u32_f32(v);
  uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  uint32x4_t r = vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff)));
  uint32x4_t is_num = vceqq_f32(v, v);
  r = vbslq_u32(is_num, r, vdupq_n_u32(0x7fc00000u));
  return vshrn_n_u32(r, 16);
#endif
}
}  // namespace neon

inline constexpr int kRegVecs = 8;  // 32 q registers, four per VecF

struct VecF {
  float32x4_t v[4];
  static VecF zero() { float32x4_t z = vdupq_n_f32(0.f); return {{z, z, z, z}}; }
  static VecF set1(float x) { float32x4_t z = vdupq_n_f32(x); return {{z, z, z, z}}; }
  static VecF load(const float* p) { return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}}; }
  static VecF load(const bf16_t* p) {
    uint16x8_t a = vld1q_u16(&p[0].bits), b = vld1q_u16(&p[8].bits);
    return {{neon::widen_bf16_lo(a), neon::widen_bf16_hi(a), neon::widen_bf16_lo(b), neon::widen_bf16_hi(b)}};
  }
  static VecF load(const fp16_t* p) {
    const float16_t* h = reinterpret_cast<const float16_t*>(p);
    float16x8_t a = vld1q_f16(h), b = vld1q_f16(h + 8);
    return {{vcvt_f32_f16(vget_low_f16(a)), vcvt_high_f32_f16(a), vcvt_f32_f16(vget_low_f16(b)), vcvt_high_f32_f16(b)}};
  }
  void store(float* p) const { for (int i = 0; i < 4; ++i) vst1q_f32(p + 4 * i, v[i]); }
  void store(bf16_t* p) const {
    for (int i = 0; i < 4; ++i) vst1_u16(&p[4 * i].bits, neon::narrow_bf16(v[i]));
  }
  void store(fp16_t* p) const {
    float16_t* h = reinterpret_cast<float16_t*>(p);
    for (int i = 0; i < 4; ++i) vst1_f16(h + 4 * i, vcvt_f16_f32(v[i]));
  }
};

#define LLMCHAT_NEON_MAP2(name, intrin) \
  inline VecF name(VecF a, VecF b) {    \
    return {{intrin(a.v[0], b.v[0]), intrin(a.v[1], b.v[1]), intrin(a.v[2], b.v[2]), intrin(a.v[3], b.v[3])}}; \
  }
LLMCHAT_NEON_MAP2(operator+, vaddq_f32)
LLMCHAT_NEON_MAP2(operator-, vsubq_f32)
LLMCHAT_NEON_MAP2(operator*, vmulq_f32)
LLMCHAT_NEON_MAP2(operator/, vdivq_f32)
LLMCHAT_NEON_MAP2(max, vmaxq_f32)
LLMCHAT_NEON_MAP2(min, vminq_f32)
#undef LLMCHAT_NEON_MAP2

inline VecF fma(VecF a, VecF b, VecF c) {
  return {{vfmaq_f32(c.v[0], a.v[0], b.v[0]), vfmaq_f32(c.v[1], a.v[1], b.v[1]),
           vfmaq_f32(c.v[2], a.v[2], b.v[2]), vfmaq_f32(c.v[3], a.v[3], b.v[3])}};
}
inline float reduce_add(VecF a) {
  return vaddvq_f32(vaddq_f32(vaddq_f32(a.v[0], a.v[1]), vaddq_f32(a.v[2], a.v[3])));
}
inline float reduce_max(VecF a) {
  return vmaxvq_f32(vmaxq_f32(vmaxq_f32(a.v[0], a.v[1]), vmaxq_f32(a.v[2], a.v[3])));
}
inline VecF round_nearest(VecF a) {
  return {{vrndnq_f32(a.v[0]), vrndnq_f32(a.v[1]), vrndnq_f32(a.v[2]), vrndnq_f32(a.v[3])}};
}
using Vec4 = float32x4_t;
inline void store4(float* p, Vec4 x) { vst1q_f32(p, x); }
inline VecF concat4(Vec4 a, Vec4 b, Vec4 c, Vec4 d) { return {{a, b, c, d}}; }
inline Vec4 reduce_add4(VecF a, VecF b, VecF c, VecF d) {
  auto fold = [](const VecF& x) { return vaddq_f32(vaddq_f32(x.v[0], x.v[1]), vaddq_f32(x.v[2], x.v[3])); };
  return vpaddq_f32(vpaddq_f32(fold(a), fold(b)), vpaddq_f32(fold(c), fold(d)));
}

#ifdef LLMCHAT_NEON_BF16
// 32 bf16 values; dot_bf16 is BFDOT (pairs of bf16 products accumulated in fp32).
#define LLMCHAT_NATIVE_BF16_DOT 1
struct VecB {
  bfloat16x8_t v[4];
  static VecB load(const bf16_t* p) {
    const bfloat16_t* b = reinterpret_cast<const bfloat16_t*>(p);
    return {{vld1q_bf16(b), vld1q_bf16(b + 8), vld1q_bf16(b + 16), vld1q_bf16(b + 24)}};
  }
};
inline VecF dot_bf16(VecF acc, VecB a, VecB b) {
  for (int i = 0; i < 4; ++i) acc.v[i] = vbfdotq_f32(acc.v[i], a.v[i], b.v[i]);
  return acc;
}
// Rows a and b (32 bf16 each) as pairs (a[i], b[i]): lo for i < 16, hi for i >= 16 (see vec_avx512.h).
inline void zip_bf16(const bf16_t* a, const bf16_t* b, VecB& lo, VecB& hi) {
  VecB* out[2] = {&lo, &hi};
  for (int h = 0; h < 2; ++h)
    for (int q = 0; q < 2; ++q) {
      const uint16x8_t x = vld1q_u16(&a[16 * h + 8 * q].bits), y = vld1q_u16(&b[16 * h + 8 * q].bits);
      out[h]->v[2 * q] = vreinterpretq_bf16_u16(vzip1q_u16(x, y));
      out[h]->v[2 * q + 1] = vreinterpretq_bf16_u16(vzip2q_u16(x, y));
    }
}
inline VecB broadcast_pair(const bf16_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const bfloat16x8_t v = vreinterpretq_bf16_u32(vdupq_n_u32(bits));
  return {{v, v, v, v}};
}
#endif

inline VecF pow2i(VecF n) {
  VecF r;
  for (int i = 0; i < 4; ++i) {
    int32x4_t e = vaddq_s32(vcvtq_s32_f32(n.v[i]), vdupq_n_s32(127));
    r.v[i] = vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
  }
  return r;
}

}  // namespace llmchat::vec
