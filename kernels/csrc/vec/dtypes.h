// Storage types of the kernels (16-bit floats as raw bits) and their scalar conversions.
// Layout-compatible with at::BFloat16 / at::Half, so torch pointers can be reinterpreted.
#pragma once
#include <cstdint>
#include <cstring>

namespace llmchat {

struct bf16_t { uint16_t bits; };
struct fp16_t { uint16_t bits; };

enum class DType { F32 = 0, BF16 = 1, F16 = 2 };

inline int dtype_size(DType d) { return d == DType::F32 ? 4 : 2; }

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float to_float(float x) { return x; }
inline float to_float(bf16_t x) { return bits_float(uint32_t(x.bits) << 16); }

inline float to_float(fp16_t h) {
  uint32_t sign = uint32_t(h.bits & 0x8000) << 16, exp = (h.bits >> 10) & 0x1f, man = h.bits & 0x3ff;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    // Subnormal half: value = man * 2^-24, exact in fp32.
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

// Round-to-nearest-even, like torch's float -> bfloat16 cast.
inline bf16_t to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{uint16_t((u >> 16) | 0x40)};  // quiet nan
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{uint16_t(u >> 16)};
}

inline fp16_t to_fp16(float f) {
  uint32_t u = float_bits(f), sign = (u >> 16) & 0x8000, absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return fp16_t{uint16_t(sign | 0x7e00)};
  if (absu >= 0x477ff000u) return fp16_t{uint16_t(sign | 0x7c00)};  // rounds to >= 65520: inf
  if (absu < 0x38800000u) {  // below the smallest normal half: round to a subnormal
    float a = bits_float(absu) * 16777216.0f;  // in units of 2^-24; the fp32 add below rounds to even
    uint32_t m = uint32_t(a + 8388608.0f) - 0x4b000000u;  // 2^23 magic: integer rounding (nearest even)
    return fp16_t{uint16_t(sign | m)};
  }
  uint32_t r = absu + 0x0fffu + ((absu >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  return fp16_t{uint16_t(sign | (((r >> 13) - (112u << 10)) & 0x7fff))};
}

template <typename T> inline T from_float(float f);
template <> inline float from_float<float>(float f) { return f; }
template <> inline bf16_t from_float<bf16_t>(float f) { return to_bf16(f); }
template <> inline fp16_t from_float<fp16_t>(float f) { return to_fp16(f); }

}  // namespace llmchat
