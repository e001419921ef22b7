// Paged attention over one work tile: a few query tokens x the query-head group of one kv head, against
// a range of key positions. Each K/V row is loaded once per tile and used by every query row of the group.
// Online softmax over one KV block at a time: the only scratch is rows x (D + block_size).
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../vec/vec.h"
#include "kernels.h"

namespace llmchat::attn {

using vec::VecF;
inline constexpr int kRowBlock = 4;  // query rows kept in registers at once
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Tile {
  int seq, kv_head;
  int q_begin, num_q;     // flat query tokens [q_begin, q_begin + num_q)
  int first_pos;          // position of query token q_begin
  int kv_begin, kv_end;   // key positions [kv_begin, kv_end) this tile reads
  int64_t partial;        // -1: write the normalized output; else offset (floats) of its partial result
};

struct Scratch {
  std::vector<float> q, acc, scores, m, l;
  std::vector<bf16_t> q_bf16;
  void reserve(int rows, int head_size, int score_stride) {
    q.resize(size_t(rows) * head_size);
    q_bf16.resize(size_t(rows) * head_size);
    acc.resize(size_t(rows) * head_size);
    scores.resize(size_t(rows) * score_stride);
    m.resize(rows);
    l.resize(rows);
  }
};

inline int round_up16(int n) { return (n + 15) / 16 * 16; }

// How a query row meets a key row in QK^T. FloatDot: q in fp32 (pre-scaled), keys of type T widened
// to fp32. Bf16Dot: q and keys stay bf16, pair products accumulate in fp32 (VDPBF16PS / BFDOT natively).
template <typename T>
struct FloatDot {
  using Q = float;
  static constexpr int kLanes = 16;
  static VecF load_k(const T* k) { return VecF::load(k); }
  static VecF madd(VecF acc, const float* q, VecF k) { return vec::fma(VecF::load(q), k, acc); }
};
struct Bf16Dot {
  using Q = bf16_t;
  static constexpr int kLanes = 32;
  static vec::VecB load_k(const bf16_t* k) { return vec::VecB::load(k); }
  static VecF madd(VecF acc, const bf16_t* q, vec::VecB k) { return vec::dot_bf16(acc, vec::VecB::load(q), k); }
};

// Query rows per QK group: 4 rows x 4 keys of accumulators need the 32-register files of AVX-512.
inline constexpr int kQkRows = vec::kRegVecs >= 32 ? 4 : 1;
// Independent accumulators per row in PV, so FMA latency is hidden without spilling registers.
constexpr int pv_split(int rows) {
  return vec::kRegVecs >= 32 ? (rows >= 3 ? 2 : 4) : (rows == 1 ? 2 : 1);
}

// Dot products of R query rows with keys j..j+3, as one 4-lane sum per row.
template <typename Dot, int NC, int R, typename T>
inline void qk_four(const typename Dot::Q* q, int ldq, const T* k, int j, int nc, vec::Vec4* out) {
  constexpr int L = Dot::kLanes;
  const int D = nc * L;
  VecF acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < 4; ++u) acc[r][u] = VecF::zero();
  for (int c = 0; c < (NC ? NC : nc); ++c) {
    for (int u = 0; u < 4; ++u) {
      const auto kv = Dot::load_k(k + int64_t(j + u) * D + c * L);
      for (int r = 0; r < R; ++r) acc[r][u] = Dot::madd(acc[r][u], q + r * ldq + c * L, kv);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = vec::reduce_add4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
}

// S[r, j] = q_r . k_j for R rows and n keys. Full groups of 16 keys are written as one vector store,
// so the softmax's vector loads are forwarded from the store buffer instead of stalling on it.
template <typename Dot, int NC, int R, typename T>
inline void qk_rows(const typename Dot::Q* q, int ldq, const T* k, int n, int nc_rt, float* S, int ldS) {
  constexpr int L = Dot::kLanes;
  const int nc = NC ? NC : nc_rt, D = nc * L;
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    vec::Vec4 part[4][R];
    for (int g = 0; g < 4; ++g) qk_four<Dot, NC, R>(q, ldq, k, j + 4 * g, nc, part[g]);
    for (int r = 0; r < R; ++r) vec::concat4(part[0][r], part[1][r], part[2][r], part[3][r]).store(S + r * ldS + j);
  }
  for (; j + 4 <= n; j += 4) {
    vec::Vec4 part[R];
    qk_four<Dot, NC, R>(q, ldq, k, j, nc, part);
    for (int r = 0; r < R; ++r) vec::store4(S + r * ldS + j, part[r]);
  }
  for (; j < n; ++j) {
    VecF acc[R];
    for (int r = 0; r < R; ++r) acc[r] = VecF::zero();
    for (int c = 0; c < nc; ++c) {
      const auto kv = Dot::load_k(k + int64_t(j) * D + c * L);
      for (int r = 0; r < R; ++r) acc[r] = Dot::madd(acc[r], q + r * ldq + c * L, kv);
    }
    for (int r = 0; r < R; ++r) S[r * ldS + j] = vec::reduce_add(acc[r]);
  }
}

// acc_r += sum_j P[r, j] * v_j for R rows, one 16-lane column chunk at a time (acc stays in registers).
template <int NC, int R, typename T>
inline void pv_rows(const float* P, int ldP, const T* v, int n, int nc_rt, float* acc, int ldacc) {
  constexpr int J = pv_split(R);
  const int nc = NC ? NC : nc_rt, D = nc * 16;
  for (int c = 0; c < nc; ++c) {
    VecF a[J][R];
    for (int r = 0; r < R; ++r) {
      a[0][r] = VecF::load(acc + r * ldacc + c * 16);
      for (int u = 1; u < J; ++u) a[u][r] = VecF::zero();
    }
    int j = 0;
    for (; j + J <= n; j += J) {
      for (int u = 0; u < J; ++u) {
        VecF vv = VecF::load(v + int64_t(j + u) * D + c * 16);
        for (int r = 0; r < R; ++r) a[u][r] = vec::fma(VecF::set1(P[r * ldP + j + u]), vv, a[u][r]);
      }
    }
    for (; j < n; ++j) {
      VecF vv = VecF::load(v + int64_t(j) * D + c * 16);
      for (int r = 0; r < R; ++r) a[0][r] = vec::fma(VecF::set1(P[r * ldP + j]), vv, a[0][r]);
    }
    for (int r = 0; r < R; ++r) {
      for (int u = 1; u < J; ++u) a[0][r] = a[0][r] + a[u][r];
      a[0][r].store(acc + r * ldacc + c * 16);
    }
  }
}

// All rows of a tile against n keys; q rows are D elements apart.
template <typename Dot, int NC, typename T>
inline void qk_all(const typename Dot::Q* q, int rows, int D, const T* k, int n, float* S, int ldS) {
  const int nc = D / Dot::kLanes;
  int r = 0;
  for (; r + kQkRows <= rows; r += kQkRows) qk_rows<Dot, NC, kQkRows>(q + r * D, D, k, n, nc, S + r * ldS, ldS);
  if constexpr (kQkRows == 4) {
    switch (rows - r) {
      case 1: qk_rows<Dot, NC, 1>(q + r * D, D, k, n, nc, S + r * ldS, ldS); break;
      case 2: qk_rows<Dot, NC, 2>(q + r * D, D, k, n, nc, S + r * ldS, ldS); break;
      case 3: qk_rows<Dot, NC, 3>(q + r * D, D, k, n, nc, S + r * ldS, ldS); break;
    }
  }
}

template <int NC, typename T>
inline void pv_all(const float* P, int ldP, int rows, const T* v, int n, int D, float* acc) {
  int r = 0;
  for (; r + kRowBlock <= rows; r += kRowBlock) pv_rows<NC, 4>(P + r * ldP, ldP, v, n, D / 16, acc + r * D, D);
  switch (rows - r) {
    case 1: pv_rows<NC, 1>(P + r * ldP, ldP, v, n, D / 16, acc + r * D, D); break;
    case 2: pv_rows<NC, 2>(P + r * ldP, ldP, v, n, D / 16, acc + r * D, D); break;
    case 3: pv_rows<NC, 3>(P + r * ldP, ldP, v, n, D / 16, acc + r * D, D); break;
  }
}

// Online-softmax update of one row with the scores of one block (n valid entries, padded to 16).
// Leaves the probabilities in S; rescales the running accumulator when the max grows.
inline void softmax_update(float* S, int n_pad, float scale, float& m, float& l, float* acc_row, int D) {
  VecF mx = VecF::set1(kNegInf);
  const VecF sc = VecF::set1(scale);
  for (int j = 0; j < n_pad; j += 16) mx = vec::max(mx, VecF::load(S + j) * sc);
  const float block_max = vec::reduce_max(mx);
  if (block_max == kNegInf) {  // nothing visible to this row in this block
    for (int j = 0; j < n_pad; ++j) S[j] = 0.f;
    return;
  }
  if (block_max > m) {
    if (l > 0.f) {
      VecF alpha = VecF::set1(std::exp(m - block_max));
      for (int c = 0; c < D; c += 16) (VecF::load(acc_row + c) * alpha).store(acc_row + c);
      l *= std::exp(m - block_max);
    }
    m = block_max;
  }
  VecF sum = VecF::zero(), mv = VecF::set1(m);
  for (int j = 0; j < n_pad; j += 16) {
    VecF p = vec::exp(vec::fma(VecF::load(S + j), sc, VecF::zero() - mv));
    p.store(S + j);
    sum = sum + p;
  }
  l += vec::reduce_add(sum);
}

template <typename T, int NC>
void run_tile(const PagedAttentionArgs& a, const Tile& t, Scratch& s, float* partials) {
  const int G = a.num_q_heads / a.num_kv_heads, D = a.head_size, bs = a.block_size;
  const int rows = t.num_q * G, ldS = round_up16(bs);
  s.reserve(rows, D, ldS);
  float *q = s.q.data(), *acc = s.acc.data(), *S = s.scores.data(), *m = s.m.data(), *l = s.l.data();

  // bf16 caches with D % 32 == 0 keep q in bf16 and scale the scores instead (no extra rounding of q).
  constexpr bool kMayBf16Dot = std::is_same_v<T, bf16_t> && NC % 2 == 0;
  const bool bf16_dot = kMayBf16Dot && D % 32 == 0;
  const float score_scale = bf16_dot ? a.scale : 1.f;
  const T* query = static_cast<const T*>(a.query);
  const VecF q_scale = VecF::set1(a.scale);
  for (int r = 0; r < rows; ++r) {
    const T* qr = query + int64_t(t.q_begin + r / G) * a.q_stride_token + int64_t(t.kv_head * G + r % G) * a.q_stride_head;
    if constexpr (kMayBf16Dot) {
      if (bf16_dot) std::copy(qr, qr + D, s.q_bf16.data() + r * D);
    }
    if (!bf16_dot)
      for (int c = 0; c < D; c += 16) (VecF::load(qr + c) * q_scale).store(q + r * D + c);
    for (int c = 0; c < D; c += 16) VecF::zero().store(acc + r * D + c);
    m[r] = kNegInf;
    l[r] = 0.f;
  }

  const int32_t* table = a.block_tables + int64_t(t.seq) * a.bt_stride;
  const T* kc = static_cast<const T*>(a.key_cache);
  const T* vc = static_cast<const T*>(a.value_cache);
  const int min_pos = t.first_pos, max_pos = t.first_pos + t.num_q - 1, win = a.sliding_window;
  for (int kb = t.kv_begin; kb < t.kv_end;) {
    const int off = kb % bs, n = std::min(bs - off, t.kv_end - kb), n_pad = round_up16(n);
    const int64_t base = ((int64_t(table[kb / bs]) * a.num_kv_heads + t.kv_head) * bs + off) * D;
    if (kb + n < t.kv_end) {  // the next block of this kv head, while this one is computed
      const int next_n = std::min(bs, t.kv_end - kb - n);
      const int64_t next = (int64_t(table[(kb + n) / bs]) * a.num_kv_heads + t.kv_head) * bs * D;
      vec::prefetch_range(kc + next, int64_t(next_n) * D * sizeof(T));
      vec::prefetch_range(vc + next, int64_t(next_n) * D * sizeof(T));
    }
    if constexpr (kMayBf16Dot) {
      if (bf16_dot) qk_all<Bf16Dot, NC / 2>(s.q_bf16.data(), rows, D, kc + base, n, S, ldS);
      else qk_all<FloatDot<T>, NC>(q, rows, D, kc + base, n, S, ldS);
    } else {
      qk_all<FloatDot<T>, NC>(q, rows, D, kc + base, n, S, ldS);
    }
    const bool need_mask = kb + n - 1 > min_pos || (win > 0 && max_pos - kb >= win);
    for (int r = 0; r < rows; ++r) {
      float* Sr = S + r * ldS;
      for (int j = n; j < n_pad; ++j) Sr[j] = kNegInf;
      if (need_mask) {
        const int pos = t.first_pos + r / G;
        for (int j = 0; j < n; ++j) {
          const int kpos = kb + j;
          if (kpos > pos || (win > 0 && pos - kpos >= win)) Sr[j] = kNegInf;
        }
      }
      softmax_update(Sr, n_pad, score_scale, m[r], l[r], acc + r * D, D);
    }
    pv_all<NC>(S, ldS, rows, vc + base, n, D, acc);
    kb += n;
  }

  if (t.partial >= 0) {  // flash-decoding split: keep unnormalized acc + (max, sum) for the merge
    float* p = partials + t.partial;
    for (int i = 0; i < rows * D; ++i) p[i] = acc[i];
    for (int r = 0; r < rows; ++r) p[rows * D + 2 * r] = m[r], p[rows * D + 2 * r + 1] = l[r];
    return;
  }
  T* out = static_cast<T*>(a.out);
  for (int r = 0; r < rows; ++r) {
    T* orow = out + int64_t(t.q_begin + r / G) * a.o_stride_token + int64_t(t.kv_head * G + r % G) * a.o_stride_head;
    const VecF inv = VecF::set1(l[r] > 0.f ? 1.f / l[r] : 0.f);
    for (int c = 0; c < D; c += 16) (VecF::load(acc + r * D + c) * inv).store(orow + c);
  }
}

}  // namespace llmchat::attn
