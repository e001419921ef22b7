// Paged attention over one work tile: a few query tokens x the query-head group of one kv head, against
// a range of key positions. Each K/V row is loaded once per tile and used by every query row of the group.
// Online softmax over one KV block at a time: the only scratch is rows x (D + block_size).
#pragma once
#include <cmath>
#include <limits>
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
  void reserve(int rows, int head_size, int score_stride) {
    q.resize(size_t(rows) * head_size);
    acc.resize(size_t(rows) * head_size);
    scores.resize(size_t(rows) * score_stride);
    m.resize(rows);
    l.resize(rows);
  }
};

inline int round_up16(int n) { return (n + 15) / 16 * 16; }

// S[r, j] = q_r . k_j for R rows; J independent accumulators per row hide the FMA latency.
template <int NC, int R, int J, typename T>
inline void qk_rows(const float* q, int ldq, const T* k, int n, int nc_rt, float* S, int ldS) {
  const int nc = NC ? NC : nc_rt, D = nc * 16;
  int j = 0;
  for (; j + J <= n; j += J) {
    VecF acc[J][R];
    for (int u = 0; u < J; ++u)
      for (int r = 0; r < R; ++r) acc[u][r] = VecF::zero();
    for (int c = 0; c < nc; ++c) {
      for (int u = 0; u < J; ++u) {
        VecF kv = VecF::load(k + int64_t(j + u) * D + c * 16);
        for (int r = 0; r < R; ++r) acc[u][r] = vec::fma(VecF::load(q + r * ldq + c * 16), kv, acc[u][r]);
      }
    }
    for (int u = 0; u < J; ++u)
      for (int r = 0; r < R; ++r) S[r * ldS + j + u] = vec::reduce_add(acc[u][r]);
  }
  if (j < n) qk_rows<NC, R, 1>(q, ldq, k + int64_t(j) * D, n - j, nc_rt, S + j, ldS);
}

// acc_r += sum_j P[r, j] * v_j for R rows, one 16-lane column chunk at a time (acc stays in registers).
template <int NC, int R, int J, typename T>
inline void pv_rows(const float* P, int ldP, const T* v, int n, int nc_rt, float* acc, int ldacc) {
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

template <int NC, typename T>
inline void qk_all(const float* q, int rows, int D, const T* k, int n, float* S, int ldS) {
  int r = 0;
  for (; r + kRowBlock <= rows; r += kRowBlock) qk_rows<NC, 4, 1>(q + r * D, D, k, n, D / 16, S + r * ldS, ldS);
  switch (rows - r) {
    case 1: qk_rows<NC, 1, 4>(q + r * D, D, k, n, D / 16, S + r * ldS, ldS); break;
    case 2: qk_rows<NC, 2, 2>(q + r * D, D, k, n, D / 16, S + r * ldS, ldS); break;
    case 3: qk_rows<NC, 3, 1>(q + r * D, D, k, n, D / 16, S + r * ldS, ldS); break;
  }
}

template <int NC, typename T>
inline void pv_all(const float* P, int ldP, int rows, const T* v, int n, int D, float* acc) {
  int r = 0;
  for (; r + kRowBlock <= rows; r += kRowBlock) pv_rows<NC, 4, 1>(P + r * ldP, ldP, v, n, D / 16, acc + r * D, D);
  switch (rows - r) {
    case 1: pv_rows<NC, 1, 4>(P + r * ldP, ldP, v, n, D / 16, acc + r * D, D); break;
    case 2: pv_rows<NC, 2, 2>(P + r * ldP, ldP, v, n, D / 16, acc + r * D, D); break;
    case 3: pv_rows<NC, 3, 1>(P + r * ldP, ldP, v, n, D / 16, acc + r * D, D); break;
  }
}

// Online-softmax update of one row with the scores of one block (n valid entries, padded to 16).
// Leaves the probabilities in S; rescales the running accumulator when the max grows.
inline void softmax_update(float* S, int n_pad, float& m, float& l, float* acc_row, int D) {
  VecF mx = VecF::set1(kNegInf);
  for (int j = 0; j < n_pad; j += 16) mx = vec::max(mx, VecF::load(S + j));
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
    VecF p = vec::exp(VecF::load(S + j) - mv);
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

  const T* query = static_cast<const T*>(a.query);
  const VecF scale = VecF::set1(a.scale);
  for (int r = 0; r < rows; ++r) {
    const T* qr = query + int64_t(t.q_begin + r / G) * a.q_stride_token + int64_t(t.kv_head * G + r % G) * a.q_stride_head;
    for (int c = 0; c < D; c += 16) (VecF::load(qr + c) * scale).store(q + r * D + c);
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
    qk_all<NC>(q, rows, D, kc + base, n, S, ldS);
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
      softmax_update(Sr, n_pad, m[r], l[r], acc + r * D, D);
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
