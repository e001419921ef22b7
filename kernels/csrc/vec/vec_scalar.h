// Portable scalar implementation of the 16-lane fp32 vector type: plain loops, any C++17 compiler.
#pragma once
#include <cmath>
#include "dtypes.h"

namespace llmchat::vec {

inline constexpr const char* kIsa = "scalar";

inline constexpr int kRegVecs = 8;

struct VecF {
  float v[16];
  static VecF zero() { return set1(0.f); }
  static VecF set1(float x) { VecF r; for (float& e : r.v) e = x; return r; }
  template <typename T> static VecF load(const T* p) {
    VecF r;
    for (int i = 0; i < 16; ++i) r.v[i] = to_float(p[i]);
    return r;
  }
  template <typename T> void store(T* p) const {
    for (int i = 0; i < 16; ++i) p[i] = from_float<T>(v[i]);
  }
};

template <typename F> inline VecF map2(VecF a, VecF b, F f) {
  VecF r;
  for (int i = 0; i < 16; ++i) r.v[i] = f(a.v[i], b.v[i]);
  return r;
}
inline VecF operator+(VecF a, VecF b) { return map2(a, b, [](float x, float y) { return x + y; }); }
inline VecF operator-(VecF a, VecF b) { return map2(a, b, [](float x, float y) { return x - y; }); }
inline VecF operator*(VecF a, VecF b) { return map2(a, b, [](float x, float y) { return x * y; }); }
inline VecF operator/(VecF a, VecF b) { return map2(a, b, [](float x, float y) { return x / y; }); }
inline VecF max(VecF a, VecF b) { return map2(a, b, [](float x, float y) { return x > y ? x : y; }); }
inline VecF min(VecF a, VecF b) { return map2(a, b, [](float x, float y) { return x < y ? x : y; }); }
inline VecF fma(VecF a, VecF b, VecF c) {
  VecF r;
  for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
  return r;
}
inline float reduce_add(VecF a) { float s = 0.f; for (float e : a.v) s += e; return s; }
inline float reduce_max(VecF a) { float m = a.v[0]; for (float e : a.v) m = e > m ? e : m; return m; }
struct Vec4 { float v[4]; };
inline void store4(float* p, Vec4 x) { for (int i = 0; i < 4; ++i) p[i] = x.v[i]; }
inline VecF concat4(Vec4 a, Vec4 b, Vec4 c, Vec4 d) {
  VecF r;
  for (int i = 0; i < 4; ++i) r.v[i] = a.v[i], r.v[4 + i] = b.v[i], r.v[8 + i] = c.v[i], r.v[12 + i] = d.v[i];
  return r;
}
inline Vec4 reduce_add4(VecF a, VecF b, VecF c, VecF d) { return {{reduce_add(a), reduce_add(b), reduce_add(c), reduce_add(d)}}; }
inline VecF round_nearest(VecF a) { VecF r; for (int i = 0; i < 16; ++i) r.v[i] = std::nearbyint(a.v[i]); return r; }
inline VecF pow2i(VecF n) {
  VecF r;
  for (int i = 0; i < 16; ++i) r.v[i] = bits_float(uint32_t(int32_t(n.v[i]) + 127) << 23);
  return r;
}

}  // namespace llmchat::vec
