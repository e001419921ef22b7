// Register-blocked micro-kernels of paged attention, written once against the vector interface:
// QK^T scores for a group of query rows against a few keys, and the P·V accumulation.
#pragma once
#include <cstdint>

#include "../vec/vec.h"
#include "attention_stream.h"

namespace llmchat::attn {

using vec::VecF;

// Consecutive keys of one kv head: rows [0, n) at `rows`, D elements apart (a block, or a run of blocks
// that lie side by side in a grouped cache).
template <typename T>
struct KeyRun {
  const T* rows;
  int n;
};

inline constexpr int kRowBlock = 4;  // query rows kept in registers at once in P·V

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
// Independent accumulators per row in PV, so FMA latency is hidden without spilling registers. Key j of a
// chunk always goes to accumulator j % kPvSplit (chunks and blocks start at even positions), the same for every
// row count and run layout, so a row's sum is the same in any tile.
inline constexpr int kPvSplit = vec::kRegVecs >= 32 ? 2 : 1;

// Dot products of R query rows with keys j..j+3, as one 4-lane sum per row.
template <typename Dot, int NC, int R, typename T>
inline void qk_four(const typename Dot::Q* q, int ldq, const T* k, int j, int nc, vec::Vec4* out) {
  constexpr int L = Dot::kLanes;
  const int D = nc * L;
  VecF acc[R * 4];  // acc[r * 4 + u], flat and unrolled (vec_math.h: LLMCHAT_UNROLL) so it stays in registers
  LLMCHAT_UNROLL for (int i = 0; i < R * 4; ++i) acc[i] = VecF::zero();
  LLMCHAT_NO_UNROLL for (int c = 0; c < (NC ? NC : nc); ++c) {
    LLMCHAT_UNROLL for (int u = 0; u < 4; ++u) {
      const auto kv = Dot::load_k(k + int64_t(j + u) * D + c * L);
      LLMCHAT_UNROLL for (int r = 0; r < R; ++r) acc[r * 4 + u] = Dot::madd(acc[r * 4 + u], q + r * ldq + c * L, kv);
    }
  }
  LLMCHAT_UNROLL for (int r = 0; r < R; ++r)
    out[r] = vec::reduce_add4(acc[r * 4], acc[r * 4 + 1], acc[r * 4 + 2], acc[r * 4 + 3]);
}

// S[r, j] = q_r . k_j for R rows and n keys. Full groups of 16 keys are written as one vector store,
// so the softmax's vector loads are forwarded from the store buffer instead of stalling on it.
template <typename Dot, int NC, int R, typename T>
inline void qk_rows(const typename Dot::Q* q, int ldq, const T* k, int n, int nc_rt, float* S, int ldS, Prefetch& pf) {
  constexpr int L = Dot::kLanes;
  const int nc = NC ? NC : nc_rt, D = nc * L;
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    vec::Vec4 part[4][R];
    for (int g = 0; g < 4; ++g) {
      qk_four<Dot, NC, R>(q, ldq, k, j + 4 * g, nc, part[g]);
      pf.step(4);
    }
    for (int r = 0; r < R; ++r) vec::concat4(part[0][r], part[1][r], part[2][r], part[3][r]).store(S + r * ldS + j);
  }
  for (; j + 4 <= n; j += 4) {
    vec::Vec4 part[R];
    qk_four<Dot, NC, R>(q, ldq, k, j, nc, part);
    pf.step(4);
    for (int r = 0; r < R; ++r) vec::store4(S + r * ldS + j, part[r]);
  }
  for (; j < n; ++j) {
    VecF acc[R];
    for (int r = 0; r < R; ++r) acc[r] = VecF::zero();
    LLMCHAT_NO_UNROLL for (int c = 0; c < nc; ++c) {  // the last keys of a run: not worth the code
      const auto kv = Dot::load_k(k + int64_t(j) * D + c * L);
      for (int r = 0; r < R; ++r) acc[r] = Dot::madd(acc[r], q + r * ldq + c * L, kv);
    }
    // the same reduction tree as a key inside a group of four (reduce_add4), so a key's score does not
    // depend on where the run it sits in ends
    const VecF z = VecF::zero();
    for (int r = 0; r < R; ++r) {
      float sums[4];
      vec::store4(sums, vec::reduce_add4(acc[r], z, z, z));
      S[r * ldS + j] = sums[0];
    }
  }
}

// acc_r += sum_j P[r, j] * v_j for R rows over the runs of one chunk (P's columns in the same order), one 16-lane
// column chunk at a time (acc stays in registers across the runs).
template <int NC, int R, typename T>
inline void pv_rows(const float* P, int ldP, const KeyRun<T>* runs, int num_runs, int nc_rt, float* acc, int ldacc,
                    Prefetch& pf) {
  constexpr int J = kPvSplit;
  const int nc = NC ? NC : nc_rt, D = nc * 16;
  for (int c = 0; c < nc; ++c) {
    VecF a[J][R];
    for (int r = 0; r < R; ++r) {
      a[0][r] = VecF::load(acc + r * ldacc + c * 16);
      for (int u = 1; u < J; ++u) a[u][r] = VecF::zero();
    }
    const float* Pc = P;
    for (int i = 0; i < num_runs; ++i) {
      const T* v = runs[i].rows;
      const int n = runs[i].n;
      int j = 0;
      for (; j + J <= n; j += J) {
        pf.step(1);
        for (int u = 0; u < J; ++u) {
          VecF vv = VecF::load(v + int64_t(j + u) * D + c * 16);
          for (int r = 0; r < R; ++r) a[u][r] = vec::fma(VecF::set1(Pc[r * ldP + j + u]), vv, a[u][r]);
        }
      }
      for (; j < n; ++j) {
        VecF vv = VecF::load(v + int64_t(j) * D + c * 16);
        for (int r = 0; r < R; ++r) a[j % J][r] = vec::fma(VecF::set1(Pc[r * ldP + j]), vv, a[j % J][r]);
      }
      Pc += n;
    }
    for (int r = 0; r < R; ++r) {
      for (int u = 1; u < J; ++u) a[0][r] = a[0][r] + a[u][r];
      a[0][r].store(acc + r * ldacc + c * 16);
    }
  }
}

#ifdef LLMCHAT_NATIVE_BF16_DOT
// acc_r += sum_j P[r, j] * v_j with bf16 P and V: keys go in pairs through the bf16 pair-dot (VDPBF16PS /
// BFDOT), half the instructions of widening V to fp32. An odd last key is paired with a zero row.
// Rows x (CP 32-wide column chunks) x 2 accumulators stay in registers.
// AVX-512 takes 2 rows x all of a 128-wide head at once: each pass then reads whole V rows in order, which the
// memory keeps up with better than 4 rows x half rows (one thread, cold cache: +15%, though the loop is 10%
// slower on cached data).
inline constexpr int kPvBf16Rows = 2;
inline constexpr int kPvBf16Chunks = vec::kRegVecs >= 32 ? 4 : 1;
inline const bf16_t kZeroRow[32] = {};

template <int R, int CP>
inline void pv_bf16_chunks(const bf16_t* P, int ldP, const KeyRun<bf16_t>* runs, int num_runs, int D, int c0, float* acc,
                           int ldacc, Prefetch& pf) {
  VecF a[R][CP][2];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CP; ++c)
      for (int h = 0; h < 2; ++h) a[r][c][h] = VecF::load(acc + r * ldacc + (c0 + c) * 32 + h * 16);
  auto two_keys = [&](const bf16_t* v0, const bf16_t* v1, auto pair_of_row) {
    vec::VecB lo[CP], hi[CP];
    for (int c = 0; c < CP; ++c) vec::zip_bf16(v0 + c * 32, v1 + c * 32, lo[c], hi[c]);
    for (int r = 0; r < R; ++r) {
      const vec::VecB p = pair_of_row(r);
      for (int c = 0; c < CP; ++c) {
        a[r][c][0] = vec::dot_bf16(a[r][c][0], lo[c], p);
        a[r][c][1] = vec::dot_bf16(a[r][c][1], hi[c], p);
      }
    }
  };
  // The accumulators stay in registers across every run of the chunk.
  for (int i = 0; i < num_runs; ++i) {
    const bf16_t* v = runs[i].rows + c0 * 32;
    const int n = runs[i].n;
    int j = 0;
    for (; j + 2 <= n; j += 2) {
      pf.step(1);
      two_keys(v + int64_t(j) * D, v + int64_t(j + 1) * D, [&](int r) { return vec::broadcast_pair(P + r * ldP + j); });
    }
    if (j < n) {  // odd last key: paired with a zero row and a zero weight
      two_keys(v + int64_t(j) * D, kZeroRow, [&](int r) {
        const bf16_t pair[2] = {P[r * ldP + j], bf16_t{}};
        return vec::broadcast_pair(pair);
      });
    }
    P += n;
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CP; ++c)
      for (int h = 0; h < 2; ++h) a[r][c][h].store(acc + r * ldacc + (c0 + c) * 32 + h * 16);
}

template <int R>
inline void pv_bf16_rows(const bf16_t* P, int ldP, const KeyRun<bf16_t>* runs, int num_runs, int D, float* acc,
                         int ldacc, Prefetch& pf) {
  constexpr int CP = kPvBf16Chunks;
  int c = 0;
  for (; c + CP <= D / 32; c += CP) pv_bf16_chunks<R, CP>(P, ldP, runs, num_runs, D, c, acc, ldacc, pf);
  if constexpr (CP > 2) {
    for (; c + 2 <= D / 32; c += 2) pv_bf16_chunks<R, 2>(P, ldP, runs, num_runs, D, c, acc, ldacc, pf);
  }
  for (; c < D / 32; ++c) pv_bf16_chunks<R, 1>(P, ldP, runs, num_runs, D, c, acc, ldacc, pf);
}

// All rows against the keys of `runs` (P's columns in the same order); D % 32 == 0.
inline void pv_bf16_all(const bf16_t* P, int ldP, int rows, const KeyRun<bf16_t>* runs, int num_runs, int D, float* acc,
                        Prefetch& pf) {
  int r = 0;
  if (vec::kRegVecs >= 32 && D <= 64) {  // 4 rows x a whole small head fit the registers: V is zipped once
    for (; r + 4 <= rows; r += 4) pv_bf16_rows<4>(P + r * ldP, ldP, runs, num_runs, D, acc + r * D, D, pf);
    switch (rows - r) {
      case 3: return pv_bf16_rows<3>(P + r * ldP, ldP, runs, num_runs, D, acc + r * D, D, pf);
      case 2: return pv_bf16_rows<2>(P + r * ldP, ldP, runs, num_runs, D, acc + r * D, D, pf);
      case 1: return pv_bf16_rows<1>(P + r * ldP, ldP, runs, num_runs, D, acc + r * D, D, pf);
      default: return;
    }
  }
  constexpr int R = kPvBf16Rows;
  for (; r + R <= rows; r += R) pv_bf16_rows<R>(P + r * ldP, ldP, runs, num_runs, D, acc + r * D, D, pf);
  for (; r < rows; ++r) pv_bf16_rows<1>(P + r * ldP, ldP, runs, num_runs, D, acc + r * D, D, pf);
}
#endif

// All rows of a tile against n keys; q rows are D elements apart.
template <typename Dot, int NC, typename T>
inline void qk_all(const typename Dot::Q* q, int rows, int D, const T* k, int n, float* S, int ldS, Prefetch& pf) {
  const int nc = D / Dot::kLanes;
  int r = 0;
  for (; r + kQkRows <= rows; r += kQkRows) qk_rows<Dot, NC, kQkRows>(q + r * D, D, k, n, nc, S + r * ldS, ldS, pf);
  if constexpr (kQkRows == 4) {
    switch (rows - r) {
      case 1: qk_rows<Dot, NC, 1>(q + r * D, D, k, n, nc, S + r * ldS, ldS, pf); break;
      case 2: qk_rows<Dot, NC, 2>(q + r * D, D, k, n, nc, S + r * ldS, ldS, pf); break;
      case 3: qk_rows<Dot, NC, 3>(q + r * D, D, k, n, nc, S + r * ldS, ldS, pf); break;
    }
  }
}

template <int NC, typename T>
inline void pv_all(const float* P, int ldP, int rows, const KeyRun<T>* runs, int num_runs, int D, float* acc,
                   Prefetch& pf) {
  int r = 0;
  for (; r + kRowBlock <= rows; r += kRowBlock) pv_rows<NC, 4>(P + r * ldP, ldP, runs, num_runs, D / 16, acc + r * D, D, pf);
  switch (rows - r) {
    case 1: pv_rows<NC, 1>(P + r * ldP, ldP, runs, num_runs, D / 16, acc + r * D, D, pf); break;
    case 2: pv_rows<NC, 2>(P + r * ldP, ldP, runs, num_runs, D / 16, acc + r * D, D, pf); break;
    case 3: pv_rows<NC, 3>(P + r * ldP, ldP, runs, num_runs, D / 16, acc + r * D, D, pf); break;
  }
}

}  // namespace llmchat::attn
