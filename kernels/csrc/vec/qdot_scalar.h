// Scalar block dots: the reference every vector path is checked against (see qdot.h for the interface).
#pragma once
#include <cstdint>
#include <cstring>

#include "dtypes.h"

namespace llmchat::qdot {

inline constexpr const char* kIsa = "scalar";
inline constexpr int kRows = 4, kTokens = 1;  // tokens per register tile

struct QVec { int8_t v[32]; };
struct QAcc { float v; };
struct QScale { float lo, hi; };  // the factor of the first block (or half), and of the second
struct QActs { const int8_t* a; };  // a pair of activation blocks in pair order

inline QScale block_scale(float s) { return {s, s}; }
inline QScale halves_scale(float lo, float hi) { return {lo, hi}; }
inline QScale pair_scale(const float* s) { return {s[0], s[1]}; }
inline QScale qmul(QScale a, QScale b) { return {a.lo * b.lo, a.hi * b.hi}; }

inline QAcc qzero() { return {0.f}; }
inline float qsum(QAcc a) { return a.v; }
inline QVec load32(const void* p) { QVec q; std::memcpy(q.v, p, 32); return q; }
inline void store32(void* p, const QVec& q) { std::memcpy(p, q.v, 32); }

struct QPair { int8_t v[64]; };

// Block `half` (0 or 1) of a pair from 16 nibble bytes and its bit plane (0 for the 4-bit kinds).
inline void put_block(QPair& q, int half, const uint8_t* qs, uint32_t qh) {
  for (int j = 0; j < 16; ++j) {
    q.v[16 * half + j] = int8_t((qs[j] & 15) | (((qh >> j) & 1u) << 4));
    q.v[32 + 16 * half + j] = int8_t((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
}
inline QPair load_q5_pair(const uint8_t* qs, const uint32_t* qh) {
  QPair q;
  put_block(q, 0, qs, qh[0]), put_block(q, 1, qs + 16, qh[1]);
  return q;
}
inline QPair load_q5_single(const uint8_t* qs, const uint32_t* qh) {
  QPair q{};
  put_block(q, 0, qs, qh[0]);
  return q;
}
inline QPair load_q4_pair(const uint8_t* qs) {
  const uint32_t zero[2] = {0, 0};
  return load_q5_pair(qs, zero);
}
inline QPair load_q4_single(const uint8_t* qs) {
  const uint32_t zero[2] = {0, 0};
  return load_q5_single(qs, zero);
}
inline QPair load_pair(const int8_t* p) { QPair q; std::memcpy(q.v, p, 64); return q; }
inline void store_pair(int8_t* p, const QPair& q) { std::memcpy(p, q.v, 64); }

inline int32_t idot(const QVec& w, const QVec& a, int from, int to) {
  int32_t s = 0;
  for (int j = from; j < to; ++j) s += int32_t(w.v[j]) * int32_t(a.v[j]);
  return s;
}
inline QActs load_pair_acts(const int8_t* a) { return {a}; }
inline QAcc fma_pair_u8(QAcc acc, const QPair& w, const QActs& acts, QScale sd) {
  const int8_t* a = acts.a;
  int32_t i0 = 0, i1 = 0;
  for (int j = 0; j < 16; ++j) {
    i0 += int32_t(w.v[j]) * a[j] + int32_t(w.v[32 + j]) * a[32 + j];
    i1 += int32_t(w.v[16 + j]) * a[16 + j] + int32_t(w.v[48 + j]) * a[48 + j];
  }
  const float p0 = float(i0) * sd.lo, p1 = float(i1) * sd.hi;
  return {acc.v + p0 + p1};
}
inline QAcc fma_s8(QAcc acc, const QVec& w, const QVec& a, QScale sd) { return {acc.v + float(idot(w, a, 0, 32)) * sd.lo}; }
inline QAcc fma_s8_halves(QAcc acc, const QVec& w, const QVec& a, QScale sd) {
  const float l = float(idot(w, a, 0, 16)) * sd.lo, h = float(idot(w, a, 16, 32)) * sd.hi;
  return {acc.v + l + h};
}

// sum_i a[i] * b[i] in order.
inline float dot_f32(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s = s + a[i] * b[i];
  return s;
}

inline float half_to_float(uint16_t h) { return to_float(fp16_t{h}); }
inline QScale pair_scale_half(const uint16_t* s) { return {half_to_float(s[0]), half_to_float(s[1])}; }
inline float dot_half_f32(const uint16_t* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s = s + half_to_float(a[i]) * b[i];
  return s;
}

}  // namespace llmchat::qdot
