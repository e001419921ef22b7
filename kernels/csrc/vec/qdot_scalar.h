// Scalar block dots: the reference every vector path is checked against (see qdot.h for the interface).
#pragma once
#include <cstdint>
#include <cstring>

namespace llmchat::qdot {

inline constexpr const char* kIsa = "scalar";
inline constexpr int kTokens = 1;  // tokens per register tile

struct QVec { int8_t v[32]; };
struct QAcc { float v; };

inline QAcc qzero() { return {0.f}; }
inline float qsum(QAcc a) { return a.v; }
inline QVec load32(const void* p) { QVec q; std::memcpy(q.v, p, 32); return q; }
inline void store32(void* p, const QVec& q) { std::memcpy(p, q.v, 32); }

inline QVec load_q4(const uint8_t* qs) {
  QVec q;
  for (int j = 0; j < 16; ++j) q.v[j] = int8_t(qs[j] & 15), q.v[j + 16] = int8_t(qs[j] >> 4);
  return q;
}
inline QVec load_q5(const uint8_t* qs, uint32_t qh) {
  QVec q = load_q4(qs);
  for (int j = 0; j < 32; ++j) q.v[j] = int8_t(q.v[j] | (((qh >> j) & 1u) << 4));
  return q;
}

inline int32_t idot(const QVec& w, const QVec& a, int from, int to) {
  int32_t s = 0;
  for (int j = from; j < to; ++j) s += int32_t(w.v[j]) * int32_t(a.v[j]);
  return s;
}
inline QAcc fma_u8(QAcc acc, const QVec& w, const QVec& a, float s) { return {acc.v + float(idot(w, a, 0, 32)) * s}; }
inline QAcc fma_s8(QAcc acc, const QVec& w, const QVec& a, float s) { return {acc.v + float(idot(w, a, 0, 32)) * s}; }
inline QAcc fma_s8_halves(QAcc acc, const QVec& w, const QVec& a, float lo, float hi) {
  const float l = float(idot(w, a, 0, 16)) * lo, h = float(idot(w, a, 16, 32)) * hi;
  return {acc.v + l + h};
}

}  // namespace llmchat::qdot
