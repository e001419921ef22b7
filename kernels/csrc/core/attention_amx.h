// Paged attention's QK^T and P.V on AMX tiles (bf16 caches, head size a multiple of 32), for every query row
// of a machine that has them, decode included: a row then meets the same tile operations whatever tile, step
// or prefix hit computes it (issue 16), as on the vector path.
// QK^T runs as S^T = K Q^T: a 16-key block of the cache is an A tile as it lies (16 rows, D apart), Q^T is
// packed once per work tile into B tiles (one 64-byte row = one d-pair of 16 query rows), and each C tile
// (16 keys x 16 query rows) is transposed into the scores' rows for the softmax. P.V takes the rounded bf16
// probabilities as A tiles and two keys' value rows interleaved per B row. Each score and each P.V sum
// starts from zero and adds its d-pairs (key pairs) in order, one TDPBF16PS per 32 elements; a C entry
// depends only on its own key and query row, so padding rows and keys change nothing.
// Tiles: C 0-3, A 4-5, B 6-7, every one 16 rows x 64 bytes (the triples of vec/amx_tiles.h).
#pragma once
#include <cstring>
#include <vector>

#include "../vec/amx_tiles.h"
#include "attention_micro.h"

#if defined(LLMCHAT_HAS_AMX)
namespace llmchat::attn::amx_attn {

inline constexpr int kT = 16;  // rows of every tile: keys, query rows or key pairs

struct Scratch {
  std::vector<uint32_t> q_t;    // [row group][d chunk][16 d-pairs][16 rows]: Q^T B tiles of the work tile
  std::vector<bf16_t> keys;     // [2][16 keys][D]: key blocks gathered where the cache has them apart
  std::vector<bf16_t> values;   // [key pairs / 16][D / 16][16 key pairs][32]: V B tiles of one chunk
  alignas(64) float c[2][kT * kT];
  int groups = 0, d_chunks = 0;
};

// What this file handles: bf16 head sizes that are whole 32-element d chunks up to 256 (pack_values' zero row)
// and chunks of at most 256 keys (its row list).
inline bool fits(int head_size, int chunk_keys) { return head_size % 32 == 0 && head_size <= 256 && chunk_keys <= 256; }

// Q^T tiles for `rows` query rows (bf16, D apart) of every head of the tile, heads rows_h apart: row group g of
// head h is tile rows [16 g, 16 g + 16) of that head; rows past rows_h are zero.
inline void pack_queries(Scratch& s, const bf16_t* q, int rows_h, int num_heads, int D) {
  s.groups = (rows_h + kT - 1) / kT, s.d_chunks = D / 32;
  const size_t per_head = size_t(s.groups) * s.d_chunks * kT * kT;
  s.q_t.assign(per_head * num_heads, 0u);
  for (int h = 0; h < num_heads; ++h)
    for (int r = 0; r < rows_h; ++r) {
      const uint32_t* row = reinterpret_cast<const uint32_t*>(q + int64_t(h * rows_h + r) * D);
      uint32_t* dst = s.q_t.data() + h * per_head + size_t(r / kT) * s.d_chunks * kT * kT + r % kT;
      for (int dp = 0; dp < D / 2; ++dp) dst[size_t(dp / kT) * kT * kT + (dp % kT) * kT] = row[dp];
    }
}

// C tile (16 keys x 16 rows, fp32) into S[r][j0 + n] for rows r < rows.
inline void scores_from_tile(const float* c, int rows, float* S, int ldS, int j0) {
#if defined(__AVX512F__)
  alignas(64) float t[kT * kT];
  __m512 v[kT];
  for (int n = 0; n < kT; ++n) v[n] = _mm512_load_ps(c + n * kT);
  // 16 x 16 transpose: pairs, quads, then 128-bit lanes
  __m512 a[kT], b[kT];
  for (int i = 0; i < kT; i += 2) a[i] = _mm512_unpacklo_ps(v[i], v[i + 1]), a[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  for (int i = 0; i < kT; i += 4)
    for (int u = 0; u < 2; ++u) {
      b[i + u] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a[i + u]), _mm512_castps_pd(a[i + 2 + u])));
      b[i + 2 + u] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a[i + u]), _mm512_castps_pd(a[i + 2 + u])));
    }
  for (int i = 0; i < kT; i += 8)
    for (int u = 0; u < 4; ++u) {
      a[i + u] = _mm512_shuffle_f32x4(b[i + u], b[i + 4 + u], 0x88);
      a[i + 4 + u] = _mm512_shuffle_f32x4(b[i + u], b[i + 4 + u], 0xdd);
    }
  for (int u = 0; u < 8; ++u) {
    _mm512_store_ps(t + kT * u, _mm512_shuffle_f32x4(a[u], a[u + 8], 0x88));
    _mm512_store_ps(t + kT * (u + 8), _mm512_shuffle_f32x4(a[u], a[u + 8], 0xdd));
  }
  // row r of the transpose sits at t[perm(r)]: the shuffles leave rows in the order below
  static constexpr int kOrder[kT] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  for (int u = 0; u < kT; ++u)
    if (kOrder[u] < rows) std::memcpy(S + int64_t(kOrder[u]) * ldS + j0, t + kT * u, kT * sizeof(float));
#else
  for (int r = 0; r < rows; ++r)
    for (int n = 0; n < kT; ++n) S[int64_t(r) * ldS + j0 + n] = c[n * kT + r];
#endif
}

// S[r][0, n_pad) for the rows_h rows of one head against the chunk's nk keys (n_pad = nk rounded up to 16;
// the entries past nk are overwritten by the caller's mask). q_t: this head's Q^T tiles.
inline void qk(Scratch& s, const uint32_t* q_t, int rows_h, const KeyRun<bf16_t>* runs, int num_runs, int nk, int D,
               float* S, int ldS, Prefetch& pf) {
  const int64_t stride = int64_t(D) * sizeof(bf16_t);
  s.keys.resize(size_t(2) * kT * D);
  // Key group g (keys [16 g, 16 g + 16) of the chunk): straight from the cache when one run holds it whole.
  auto key_rows = [&](int g, int slot) -> const bf16_t* {
    const int j0 = kT * g;
    int at = 0;
    for (int i = 0; i < num_runs; at += runs[i].n, ++i)
      if (j0 >= at && j0 + kT <= at + runs[i].n) return runs[i].rows + int64_t(j0 - at) * D;
    bf16_t* dst = s.keys.data() + size_t(slot) * kT * D;
    std::memset(dst, 0, sizeof(bf16_t) * kT * D);
    at = 0;
    for (int i = 0; i < num_runs; at += runs[i].n, ++i)
      for (int j = std::max(j0, at); j < std::min(j0 + kT, at + runs[i].n); ++j)
        std::memcpy(dst + int64_t(j - j0) * D, runs[i].rows + int64_t(j - at) * D, stride);
    return dst;
  };
  const int groups = (nk + kT - 1) / kT;
  const size_t tile_words = size_t(kT) * kT;
  for (int g = 0; g < groups; g += 2) {
    const bool two = g + 1 < groups;
    const bf16_t* k0 = key_rows(g, 0);
    const bf16_t* k1 = two ? key_rows(g + 1, 1) : nullptr;
    pf.step(two ? 2 * kT : kT);
    for (int rg = 0; rg < s.groups; ++rg) {
      amx::zero<0>();
      if (two) amx::zero<2>();
      for (int dc = 0; dc < s.d_chunks; ++dc) {
        amx::load<6>(q_t + (size_t(rg) * s.d_chunks + dc) * tile_words, 64);
        amx::load<4>(k0 + 32 * dc, stride);
        amx::dp_bf16<0, 4, 6>();
        if (two) {
          amx::load<5>(k1 + 32 * dc, stride);
          amx::dp_bf16<2, 5, 6>();
        }
      }
      const int rows = std::min(kT, rows_h - kT * rg);
      amx::store<0>(s.c[0], 64);
      scores_from_tile(s.c[0], rows, S + int64_t(kT) * rg * ldS, ldS, kT * g);
      if (two) {
        amx::store<2>(s.c[1], 64);
        scores_from_tile(s.c[1], rows, S + int64_t(kT) * rg * ldS, ldS, kT * (g + 1));
      }
    }
  }
}

// The chunk's value rows as B tiles: row p of tile (h, dc) = keys 32 h + 2 p and + 1, elements [16 dc, 16 dc + 16)
// interleaved; keys past nk are zero.
inline void pack_values(Scratch& s, const KeyRun<bf16_t>* runs, int num_runs, int nk, int D) {
  const int halves = (nk + 2 * kT - 1) / (2 * kT), dcs = D / 16;
  s.values.resize(size_t(halves) * dcs * kT * 32);
  const bf16_t* rows[2 * kT * 8];  // the chunk's value rows in key order (chunks hold at most 8 x 32 keys here)
  int j = 0;
  for (int i = 0; i < num_runs; ++i)
    for (int u = 0; u < runs[i].n; ++u) rows[j++] = runs[i].rows + int64_t(u) * D;
  static const bf16_t zero[256] = {};  // head sizes up to 256
  for (; j < 2 * kT * halves; ++j) rows[j] = zero;
  for (int p = 0; p < kT * halves; ++p) {
    const bf16_t *v0 = rows[2 * p], *v1 = rows[2 * p + 1];
    bf16_t* dst = s.values.data() + size_t(p / kT) * dcs * kT * 32 + (p % kT) * 32;
#if defined(__AVX512BW__)
    // element e of each row to 2e and 2e + 1: the low 16 of a 32-element stretch make tile dc, the high 16 dc + 1
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int dc = 0; dc < dcs; dc += 2) {
      const __m512i a = _mm512_loadu_si512(v0 + 16 * dc), b = _mm512_loadu_si512(v1 + 16 * dc);
      _mm512_storeu_si512(dst + size_t(dc) * kT * 32, _mm512_permutex2var_epi16(a, lo, b));
      _mm512_storeu_si512(dst + size_t(dc + 1) * kT * 32, _mm512_permutex2var_epi16(a, hi, b));
    }
#else
    for (int dc = 0; dc < dcs; ++dc)
      for (int e = 0; e < 16; ++e) dst[size_t(dc) * kT * 32 + 2 * e] = v0[16 * dc + e], dst[size_t(dc) * kT * 32 + 2 * e + 1] = v1[16 * dc + e];
#endif
  }
}

// acc[r] += sum over the chunk's keys of P[r][j] v_j for the rows_h rows of one head: P bf16, ldP apart, zero
// from nk to a whole 32 keys; rows past rows_h are read (the scores' padding) but never written back.
inline void pv(Scratch& s, const bf16_t* P, int ldP, int rows_h, int nk, int D, float* acc) {
  const int halves = (nk + 2 * kT - 1) / (2 * kT), dcs = D / 16;
  const size_t tile = size_t(kT) * 32;
  for (int rg = 0; rg < (rows_h + kT - 1) / kT; ++rg) {
    const int rows = std::min(kT, rows_h - kT * rg);
    for (int dc = 0; dc < dcs; dc += 2) {
      amx::zero<0>();
      amx::zero<1>();
      for (int h = 0; h < halves; ++h) {
        amx::load<4>(P + int64_t(kT) * rg * ldP + 2 * kT * h, int64_t(ldP) * sizeof(bf16_t));
        amx::load<6>(s.values.data() + (size_t(h) * dcs + dc) * tile, 64);
        amx::load<7>(s.values.data() + (size_t(h) * dcs + dc + 1) * tile, 64);
        amx::dp_bf16<0, 4, 6>();
        amx::dp_bf16<1, 4, 7>();
      }
      amx::store<0>(s.c[0], 64);
      amx::store<1>(s.c[1], 64);
      for (int r = 0; r < rows; ++r) {
        float* a = acc + int64_t(kT * rg + r) * D + 16 * dc;
        (VecF::load(a) + VecF::load(s.c[0] + r * kT)).store(a);
        (VecF::load(a + 16) + VecF::load(s.c[1] + r * kT)).store(a + 16);
      }
    }
  }
}

}  // namespace llmchat::attn::amx_attn
#endif
