// Paged attention's QK^T and P.V on BFMMLA tiles (ARM with bf16: FEAT_BF16), for bf16 caches and every head size
// the engine takes (D % 16 == 0), for every query row, decode included: a row then meets the same operations
// whatever tile, chunk, step or prefix hit computes it (issue 16), as on the AMX tiles (attention_amx.h).
//   BFMMLA d += a b^T: a, b 2x4 bf16 (two rows of 4 elements), d 2x2 fp32, d[2i + j] += a row i . b row j, each
//   output BFDotAdd(BFDotAdd(d, pair 0), pair 1) (Arm ARM): it depends on its own a row and b row only.
// QK^T: a = two query rows x 4 d (packed in pairs once per tile), b = two keys x 4 d (two key rows of the cache as
// they lie, zipped by 64 bits); each score starts from +0 and adds its d in order, 4 at a time. P.V: a = two rows x
// 4 keys of P (rounded to bf16 by the softmax, as for the AMX tiles), b = two d columns x 4 keys of V (the chunk's
// value rows packed once per chunk and head); each chunk's sum starts from +0, adds its keys in order and is then
// added into the fp32 accumulator. Padding (the second row of an odd row count, keys past nk up to a whole block:
// zero rows, zero P) never reaches a real output; a +0 start stays +0 or nonzero, so a zero P x V term (masked keys,
// padding) never changes a sum: a row's bits do not depend on how many keys its tile's last chunk holds.
#pragma once
#include <algorithm>
#include <cstring>
#include <vector>

#include "attention_micro.h"

#if defined(LLMCHAT_NEON_BF16)
#define LLMCHAT_HAS_BFMMLA 1
#include <arm_neon.h>

#include "../vec/bfmmla_zip.h"

namespace llmchat::attn::mmla_attn {

// Register blocks, by llvm-mca cycles per MAC (tools/estimate, clang / gcc; Neoverse V1, N2, the M2 model). Each
// accumulator's chain is two dependent BFMMLAs a trip, so the loops are latency-bound until 16 chains are in flight:
//   QK 4 row pairs x 4 key pairs (16 accumulators + 8 key operands + 2 query operands): V1 0.020 / 0.027, N2 0.039 /
//   0.045; 2 x 4 0.039 / 0.055 on V1. Fewer row pairs (decode's groups): 3 x 4, 2 x 4, and 1 x 8 (half the cycles/MAC of 1 x 4).
//   P.V 2 row pairs x 8 column pairs: V1 0.020 / 0.027, N2 0.035 / 0.039 (3 x 8 and 4 x 4 no better); one row pair
//   takes 16 column pairs where D / 2 holds them (V1 0.022 against 0.039 for 1 x 8).
inline constexpr int kQkPairs = 4, kQkKeyPairs = 4, kQkLoneKeyPairs = 8;
inline constexpr int kPvPairs = 2, kPvColPairs = 8, kPvLoneColPairs = 16;
inline constexpr int kQkKeys = 2 * kQkLoneKeyPairs;  // the chunk's key list is padded to the widest QK block
inline constexpr int kPvKeys = 8;                    // keys a P.V step reads (two 4-key quads of each P row)

struct Scratch {
  std::vector<bf16_t> q_pairs;       // [head][row pair][D / 4 quads][row 2p d0..3, row 2p+1 d0..3]
  std::vector<bf16_t> values;        // [key quad][D / 2 column pairs][d keys 0..3, d + 1 keys 0..3]
  std::vector<const bf16_t*> rows;   // the chunk's key (value) rows in key order, zero rows past nk
  std::vector<bf16_t> zero;          // one zero row
  int pairs = 0;                     // row pairs per head
};

inline int round_up(int n, int m) { return (n + m - 1) / m * m; }

inline uint16x8_t load8(const bf16_t* p) { return vld1q_u16(reinterpret_cast<const uint16_t*>(p)); }
using bfmmla::first_rows, bfmmla::high_halves, bfmmla::low_halves, bfmmla::second_rows;

// Sizes the query pairs of a tile (rows_h rows per head, num_heads heads) with the padding rows zero.
inline void begin_queries(Scratch& s, int rows_h, int num_heads, int D) {
  s.pairs = (rows_h + 1) / 2;
  s.q_pairs.assign(size_t(num_heads) * s.pairs * 2 * D, bf16_t{});
  s.zero.assign(size_t(D), bf16_t{});
}
// Query row rh of head h (D bf16 at q) into its pair: row 2p fills the first 4 of each quad, row 2p + 1 the last 4.
inline void put_query(Scratch& s, const bf16_t* q, int h, int rh, int D) {
  bf16_t* dst = s.q_pairs.data() + (size_t(h) * s.pairs + rh / 2) * 2 * D + 4 * (rh % 2);
  for (int c = 0; c < D; c += 4) std::memcpy(dst + 2 * c, q + c, 4 * sizeof(bf16_t));
}
inline const bf16_t* head_queries(const Scratch& s, int h, int D) { return s.q_pairs.data() + size_t(h) * s.pairs * 2 * D; }

// s.rows = the rows of the runs' nk keys in order, then zero rows up to n.
inline void list_rows(Scratch& s, const KeyRun<bf16_t>* runs, int num_runs, int n, int D) {
  s.rows.clear();
  for (int i = 0; i < num_runs; ++i)
    for (int u = 0; u < runs[i].n; ++u) s.rows.push_back(runs[i].rows + int64_t(u) * D);
  s.rows.resize(size_t(std::max<int>(n, int(s.rows.size()))), s.zero.data());
}

// Scores of RP row pairs (q: their packed pairs, 2 D apart) against KP key pairs (keys: 2 KP rows), written to
// S[row][0, 2 KP) for the rows < valid_rows.
template <int RP, int KP>
inline void qk_block(const bf16_t* q, const bf16_t* const* keys, int D, float* S, int ldS, int valid_rows) {
  static_assert(KP % 2 == 0, "scores leave in 4-key groups");
  float32x4_t acc[RP * KP];
  LLMCHAT_UNROLL for (int i = 0; i < RP * KP; ++i) acc[i] = vdupq_n_f32(0.f);
  LLMCHAT_NO_UNROLL for (int c = 0; c < D; c += 8) {
    bfloat16x8_t lo[KP], hi[KP];  // key pair k, d [c, c + 4) and [c + 4, c + 8)
    LLMCHAT_UNROLL for (int k = 0; k < KP; ++k) {
      const uint16x8_t x = load8(keys[2 * k] + c), y = load8(keys[2 * k + 1] + c);
      lo[k] = low_halves(x, y), hi[k] = high_halves(x, y);
    }
    LLMCHAT_UNROLL for (int p = 0; p < RP; ++p) {
      const bfloat16x8_t a0 = vreinterpretq_bf16_u16(load8(q + int64_t(p) * 2 * D + 2 * c));
      const bfloat16x8_t a1 = vreinterpretq_bf16_u16(load8(q + int64_t(p) * 2 * D + 2 * c + 8));
      LLMCHAT_UNROLL for (int k = 0; k < KP; ++k) acc[p * KP + k] = vbfmmlaq_f32(vbfmmlaq_f32(acc[p * KP + k], a0, lo[k]), a1, hi[k]);
    }
  }
  LLMCHAT_UNROLL for (int p = 0; p < RP; ++p)
    LLMCHAT_UNROLL for (int k = 0; k < KP; k += 2) {
      vst1q_f32(S + int64_t(2 * p) * ldS + 2 * k, first_rows(acc[p * KP + k], acc[p * KP + k + 1]));
      if (2 * p + 1 < valid_rows) vst1q_f32(S + int64_t(2 * p + 1) * ldS + 2 * k, second_rows(acc[p * KP + k], acc[p * KP + k + 1]));
    }
}

// RP row pairs from row 2 p0 against the chunk's nk keys, KP key pairs at a time; the first block prefetches.
template <int RP, int KP>
inline void qk_rows(const Scratch& s, const bf16_t* q, int p0, int rows_h, int nk, int D, float* S, int ldS, Prefetch* pf) {
  for (int j = 0; j < nk; j += 2 * KP) {
    if (pf) pf->step(2 * KP);
    qk_block<RP, KP>(q + int64_t(p0) * 2 * D, s.rows.data() + j, D, S + int64_t(2 * p0) * ldS + j, ldS, rows_h - 2 * p0);
  }
}

// S[r][0, round_up(nk, 16)) for the rows_h rows of one head (q: its packed pairs) against the chunk's nk keys; the
// entries past nk are overwritten by the caller's mask. Each score is its own BFMMLA chain: blocks change nothing.
inline void qk(Scratch& s, const bf16_t* q, int rows_h, const KeyRun<bf16_t>* runs, int num_runs, int nk, int D,
               float* S, int ldS, Prefetch& pf) {
  list_rows(s, runs, num_runs, round_up(nk, kQkKeys), D);
  const int pairs = (rows_h + 1) / 2;
  int p = 0;
  for (; p + kQkPairs <= pairs; p += kQkPairs) qk_rows<kQkPairs, kQkKeyPairs>(s, q, p, rows_h, nk, D, S, ldS, p ? nullptr : &pf);
  Prefetch* first = p ? nullptr : &pf;
  static_assert(kQkPairs == 4, "the remainders below");
  switch (pairs - p) {
    case 3: return qk_rows<3, kQkKeyPairs>(s, q, p, rows_h, nk, D, S, ldS, first);
    case 2: return qk_rows<2, kQkKeyPairs>(s, q, p, rows_h, nk, D, S, ldS, first);
    case 1: return qk_rows<1, kQkLoneKeyPairs>(s, q, p, rows_h, nk, D, S, ldS, first);
    default: return;
  }
}

// The chunk's value rows as b operands: quad g, column pair e = [v(4g..4g+3)[2e], v(4g..4g+3)[2e + 1]], keys
// past nk zero, up to a whole kPvKeys.
inline void pack_values(Scratch& s, const KeyRun<bf16_t>* runs, int num_runs, int nk, int D) {
  const int n = round_up(nk, kPvKeys);
  list_rows(s, runs, num_runs, n, D);
  s.values.resize(size_t(n) * D);
  for (int g = 0; g < n / 4; ++g) {
    const bf16_t* const* v = s.rows.data() + 4 * g;
    uint16_t* dst = reinterpret_cast<uint16_t*>(s.values.data()) + size_t(g) * 4 * D;
    for (int c = 0; c < D; c += 8) {  // 4 keys x 8 d: four column pairs
      bfmmla::store_column_pairs(load8(v[0] + c), load8(v[1] + c), load8(v[2] + c), load8(v[3] + c),
                                 dst + 4 * c);  // column pair c / 2 on
    }
  }
}

// acc[r][2 e0, 2 e0 + 2 CP) += the chunk's P.V for RP row pairs (P: bf16, ldP apart) over n keys (a whole kPvKeys).
template <int RP, int CP>
inline void pv_block(const bf16_t* P, int ldP, const bf16_t* values, int n, int D, int e0, float* acc, int valid_rows) {
  static_assert(CP % 2 == 0, "outputs leave in 4-column groups");
  float32x4_t c[RP * CP];
  LLMCHAT_UNROLL for (int i = 0; i < RP * CP; ++i) c[i] = vdupq_n_f32(0.f);
  LLMCHAT_NO_UNROLL for (int j = 0; j < n; j += kPvKeys) {
    bfloat16x8_t a[2][RP];  // quads j / 4 and j / 4 + 1 of row pair p
    LLMCHAT_UNROLL for (int p = 0; p < RP; ++p) {
      const uint16x8_t x = load8(P + int64_t(2 * p) * ldP + j), y = load8(P + int64_t(2 * p + 1) * ldP + j);
      a[0][p] = low_halves(x, y), a[1][p] = high_halves(x, y);
    }
    LLMCHAT_UNROLL for (int h = 0; h < 2; ++h) {
      const bf16_t* b = values + (size_t(j / 4 + h) * (D / 2) + e0) * 8;
      LLMCHAT_UNROLL for (int e = 0; e < CP; ++e) {
        const bfloat16x8_t be = vreinterpretq_bf16_u16(load8(b + 8 * e));
        LLMCHAT_UNROLL for (int p = 0; p < RP; ++p) c[p * CP + e] = vbfmmlaq_f32(c[p * CP + e], a[h][p], be);
      }
    }
  }
  LLMCHAT_UNROLL for (int p = 0; p < RP; ++p)
    LLMCHAT_UNROLL for (int e = 0; e < CP; e += 2) {
      float* a0 = acc + int64_t(2 * p) * D + 2 * (e0 + e);
      vst1q_f32(a0, vaddq_f32(vld1q_f32(a0), first_rows(c[p * CP + e], c[p * CP + e + 1])));
      if (2 * p + 1 < valid_rows) {
        float* a1 = a0 + D;
        vst1q_f32(a1, vaddq_f32(vld1q_f32(a1), second_rows(c[p * CP + e], c[p * CP + e + 1])));
      }
    }
}

// acc[r] += sum over the chunk's nk keys of P[r][j] v_j for the rows_h rows of one head (values packed by
// pack_values): P bf16, ldP apart, zero from nk to a whole kPvKeys; with rows_h odd, row rows_h is read (zero).
inline void pv(const Scratch& s, const bf16_t* P, int ldP, int rows_h, int nk, int D, float* acc) {
  const int n = round_up(nk, kPvKeys), pairs = (rows_h + 1) / 2;
  static_assert(kPvPairs == 2, "one remainder pair");
  const bf16_t* v = s.values.data();
  int p = 0;
  for (; p + kPvPairs <= pairs; p += kPvPairs)
    for (int e0 = 0; e0 < D / 2; e0 += kPvColPairs)
      pv_block<kPvPairs, kPvColPairs>(P + int64_t(2 * p) * ldP, ldP, v, n, D, e0, acc + int64_t(2 * p) * D, rows_h - 2 * p);
  if (p == pairs) return;
  const bf16_t* Pp = P + int64_t(2 * p) * ldP;
  float* ap = acc + int64_t(2 * p) * D;
  int e0 = 0;
  for (; e0 + kPvLoneColPairs <= D / 2; e0 += kPvLoneColPairs) pv_block<1, kPvLoneColPairs>(Pp, ldP, v, n, D, e0, ap, rows_h - 2 * p);
  for (; e0 < D / 2; e0 += kPvColPairs) pv_block<1, kPvColPairs>(Pp, ldP, v, n, D, e0, ap, rows_h - 2 * p);
}

}  // namespace llmchat::attn::mmla_attn
#endif
