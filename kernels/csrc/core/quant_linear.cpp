// Quantized linear (see quant_linear.h). A task owns groups of kGroup weight rows; with more tokens than one
// register tile holds, a group's 4/5-bit blocks are unpacked once into int8 scratch and every token tile reads
// them from L1, otherwise (decode) blocks are unpacked in registers as they stream by. Both give the same
// integers, and each output always runs the same sequence of block dots, so results do not depend on M.
// With i8mm (LLMCHAT_QDOT_PAIR_TILES) every output goes through 2 rows x 2 tokens SMMLA tiles instead, at
// every M: see pair_tile.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../vec/vec.h"  // the intrinsics headers, before exact_float.h (their inline functions keep their options)
#include "dispatch.h"
#include "quant_linear.h"
#include "quant_tiles.h"
#include "quant_tiles_neon.h"

// No compiler-chosen fused multiply-adds, here and in the block-dot header below: row dequantization must
// round twice, as numpy does, and every output's float operations must be the ones written, whatever a
// template instance inlines (a contracted scalar tail in one tile shape and not another changes bits).
#include "exact_float.h"

#include "../vec/qdot.h"

namespace llmchat {
namespace {

using qdot::QAcc;
using qdot::QPair;
using qdot::QVec;

constexpr int kRows = qdot::kRows;   // weight rows per register tile
// A step of one token (a single decode) has no tokens to share a weight block with, so its tile takes more
// rows to share each activation block instead. Tiles only group outputs: each output's operations stay the same.
constexpr int kRowsAlone = 4;
constexpr int kMaxRows = kRows > kRowsAlone ? kRows : kRowsAlone;
constexpr int kGroup = 16;   // weight rows per task step (unpacked together for large M)
constexpr int kTok = qdot::kTokens;

constexpr bool paired(QuantKind k) { return k == QuantKind::Q4 || k == QuantKind::Q5; }
constexpr bool halves(QuantKind k) { return k == QuantKind::Q8Halves || k == QuantKind::Q6; }  // scales per 16

// Block b of a row as 32 signed weights: the 8-bit kinds as stored; Q6 unpacked (w = u - 32) into `scratch`.
// Q6 runs on x86's tile layout (quant_tiles.cpp); this row path is its exact fallback (a row count % 16 != 0).
template <QuantKind KIND>
inline const int8_t* signed_block(const QuantWeightView& w, int64_t row, int64_t b, int8_t* scratch) {
  if constexpr (KIND == QuantKind::Q6) {
    const int64_t at = row * (w.k / 32) + b;
    const uint8_t* qs = static_cast<const uint8_t*>(w.values) + at * 16;
    const uint32_t bit4 = w.high[2 * at], bit5 = w.high[2 * at + 1];
    for (int j = 0; j < 32; ++j) {
      const int low = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
      scratch[j] = int8_t((low | int((bit4 >> j) & 1) << 4 | int((bit5 >> j) & 1) << 5) - 32);
    }
    return scratch;
  } else {
    return static_cast<const int8_t*>(w.values) + row * w.k + 32 * b;
  }
}

// Asks for a row's values (and Q5/Q6's high bits) kPrefetchBytes of values past block `at` (row * nb + b) into L1
// and kPrefetchFarBytes past it into L2. The rows a tile reads are separate streams the hardware prefetcher follows
// late: on a Xeon the 1.5B Q4_K_M's decode on this layout went from 12.1 to 12.9 tok/s with the first and to
// 13.7 with the second (measured with LLMCHAT_QUANT_TILES=0).
constexpr int64_t kPrefetchBytes = 1024, kPrefetchFarBytes = 4096;
template <QuantKind KIND>
constexpr int64_t row_block_bytes() { return paired(KIND) || KIND == QuantKind::Q6 ? 16 : 32; }
template <QuantKind KIND, int LOCALITY>  // 3: into L1, 2: into L2
inline void prefetch_row_block(const QuantWeightView& w, int64_t at) {
  __builtin_prefetch(static_cast<const char*>(w.values) + at * row_block_bytes<KIND>(), 0, LOCALITY);
  if constexpr (KIND == QuantKind::Q5) __builtin_prefetch(w.high + at, 0, LOCALITY);
  if constexpr (KIND == QuantKind::Q6) __builtin_prefetch(w.high + 2 * at, 0, LOCALITY);
}
template <QuantKind KIND>
inline void prefetch_row_ahead(const QuantWeightView& w, int64_t at) {
  prefetch_row_block<KIND, 3>(w, at + kPrefetchBytes / row_block_bytes<KIND>());
  prefetch_row_block<KIND, 2>(w, at + kPrefetchFarBytes / row_block_bytes<KIND>());
}

// Quantized activations. The 4/5-bit kinds read them in pair order (qdot.h), rows padded to whole pairs
// (zeros, d = 0); the 8-bit kinds in plain order.
struct Acts {
  const int8_t* q;
  const float *d, *dsum;
  int64_t row, blocks;  // q elements and d entries per token
};

// Per-block factors (scales, mins) stored as fp32, or as fp16 where the file's are.
template <bool HALF>
struct Factors {
  static float at(const void* p, int64_t i) {
    if constexpr (HALF) return qdot::half_to_float(static_cast<const uint16_t*>(p)[i]);
    else return static_cast<const float*>(p)[i];
  }
  static qdot::QScale pair(const void* p, int64_t i) {
    if constexpr (HALF) return qdot::pair_scale_half(static_cast<const uint16_t*>(p) + i);
    else return qdot::pair_scale(static_cast<const float*>(p) + i);
  }
#if defined(LLMCHAT_QDOT_PAIR_TILES)
  template <class E> static const E* as(const void* p, int64_t i) { return static_cast<const E*>(p) + i; }
  // Factors i and i + 1 of rows at i0 and i1 (a pair's two blocks, or a block's two halves), for a 2x2 tile.
  static qdot::QScale4 rows_pair(const void* p, int64_t i0, int64_t i1) {
    if constexpr (HALF) return qdot::row_pair_factors(as<uint16_t>(p, i0), as<uint16_t>(p, i1));
    else return qdot::row_pair_factors(as<float>(p, i0), as<float>(p, i1));
  }
  static qdot::QScale4 rows_block(const void* p, int64_t i0, int64_t i1) {
    if constexpr (HALF) return qdot::row_block_factors(as<uint16_t>(p, i0), as<uint16_t>(p, i1));
    else return qdot::row_block_factors(as<float>(p, i0), as<float>(p, i1));
  }
#endif
  static float dot(const void* p, int64_t i, const float* b, int64_t n) {
    if constexpr (HALF) return qdot::dot_half_f32(static_cast<const uint16_t*>(p) + i, b, n);
    else return qdot::dot_f32(static_cast<const float*>(p) + i, b, n);
  }
};

// Blocks b, b + 1 of a 4/5-bit row, or block b alone (SINGLE: the row's odd last block; b + 1 reads as zero).
template <QuantKind KIND, bool SINGLE>
inline QPair packed_pair(const QuantWeightView& w, int64_t row, int64_t b, int64_t nb) {
  const uint8_t* qs = static_cast<const uint8_t*>(w.values) + (row * nb + b) * 16;
  if constexpr (KIND == QuantKind::Q5) {
    const uint32_t* qh = w.high + row * nb + b;
    return SINGLE ? qdot::load_q5_single(qs, qh) : qdot::load_q5_pair(qs, qh);
  } else {
    return SINGLE ? qdot::load_q4_single(qs) : qdot::load_q4_pair(qs);
  }
}

// Weight pairs read straight from the packed weight, or from a group unpacked into scratch (64 bytes a pair).
template <QuantKind KIND>
struct Packed {
  const QuantWeightView& w;
  int64_t nb;
  template <bool SINGLE>
  QPair get(int64_t row, int64_t b) const { return packed_pair<KIND, SINGLE>(w, row, b, nb); }
};
struct Unpacked {
  const int8_t* base;  // row `first` of the group
  int64_t first, row_bytes;
  template <bool SINGLE>
  QPair get(int64_t row, int64_t b) const { return qdot::load_pair(base + (row - first) * row_bytes + 32 * b); }
};

// The mins' share of an output, added after its block sums: the mins meet the activation block sums, or
// min = offset * scale, a power of two: exactly offset * (scales . sums).
template <bool HALF>
inline float with_mins(float v, const QuantWeightView& w, int64_t row, const Acts& x, int64_t token) {
  const int64_t nb = w.k / 32;
  const float* ds = x.dsum + token * x.blocks;
  if (w.mins != nullptr) return v + Factors<HALF>::dot(w.mins, row * nb, ds, nb);
  if (w.min_offset != 0) return v + float(w.min_offset) * Factors<HALF>::dot(w.scales, row * nb, ds, nb);
  return v;
}

// res[r][t] = out[m0 + t, n0 + r] before bias, for R <= kMaxRows rows and T <= kTok tokens.
template <QuantKind KIND, bool HALF, int R, int T, class Src>
void tile(const QuantWeightView& w, const Src& src, int64_t n0, const Acts& x, int64_t m0, float (*res)[kTok]) {
  const int64_t nb = w.k / 32;
  QAcc acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = qdot::qzero();
  if constexpr (paired(KIND)) {
    // An odd last block goes as a pair with an empty second block (zero weights, scale and activations).
    auto pair = [&](int64_t b, auto single) {
      constexpr bool kSingle = decltype(single)::value;
      qdot::QActs av[T];
      qdot::QScale dv[T];
      for (int t = 0; t < T; ++t) {
        av[t] = qdot::load_pair_acts(x.q + (m0 + t) * x.row + 32 * b);
        dv[t] = qdot::pair_scale(x.d + (m0 + t) * x.blocks + b);   // padded: d = 0 past the last block
      }
      for (int r = 0; r < R; ++r) {
        prefetch_row_ahead<KIND>(w, (n0 + r) * nb + b);
        const QPair wv = src.template get<kSingle>(n0 + r, b);
        const int64_t at = (n0 + r) * nb + b;
        qdot::QScale sv;
        if constexpr (kSingle) {
          const float last[2] = {Factors<HALF>::at(w.scales, at), 0.f};
          sv = qdot::pair_scale(last);
        } else {
          sv = Factors<HALF>::pair(w.scales, at);
        }
        for (int t = 0; t < T; ++t) acc[r][t] = qdot::fma_pair_u8(acc[r][t], wv, av[t], qdot::qmul(sv, dv[t]));
      }
    };
    const int64_t whole = nb - nb % 2;
    for (int64_t b = 0; b < whole; b += 2) pair(b, std::false_type{});
    if (nb % 2) pair(whole, std::true_type{});
  } else {
    for (int64_t b = 0; b < nb; ++b) {
      QVec av[T];
      qdot::QScale dv[T];
      for (int t = 0; t < T; ++t) {
        av[t] = qdot::load32(x.q + (m0 + t) * x.row + 32 * b);
        dv[t] = qdot::block_scale(x.d[(m0 + t) * x.blocks + b]);
      }
      for (int r = 0; r < R; ++r) {
        prefetch_row_ahead<KIND>(w, (n0 + r) * nb + b);
        alignas(32) int8_t scratch[32];
        const QVec wv = qdot::load32(signed_block<KIND>(w, n0 + r, b, scratch));
        if constexpr (halves(KIND)) {
          const int64_t at = (n0 + r) * 2 * nb + 2 * b;
          const qdot::QScale sv = qdot::halves_scale(Factors<HALF>::at(w.scales, at), Factors<HALF>::at(w.scales, at + 1));
          for (int t = 0; t < T; ++t) acc[r][t] = qdot::fma_s8_halves(acc[r][t], wv, av[t], qdot::qmul(sv, dv[t]));
        } else {
          const qdot::QScale sv = qdot::block_scale(Factors<HALF>::at(w.scales, (n0 + r) * nb + b));
          for (int t = 0; t < T; ++t) acc[r][t] = qdot::fma_s8(acc[r][t], wv, av[t], qdot::qmul(sv, dv[t]));
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) res[r][t] = with_mins<HALF>(qdot::qsum(acc[r][t]), w, n0 + r, x, m0 + t);
}

#if defined(LLMCHAT_QDOT_PAIR_TILES)
// Matrix-multiply tiles (SMMLA): 2 rows x 2 tokens an instruction, R x T (even) per call. Every output of
// every M goes through them, a lone last row or token paired with a copy of itself whose result is dropped:
// the float work is lane by lane, so an output gets the same bits in whichever tile and lane it lands.
template <QuantKind KIND, bool HALF, int R, int T, class Src>
void pair_tile(const QuantWeightView& w, const Src& src, int64_t n0, int rows, const Acts& x, int64_t m0,
               int tokens, float (*res)[kTok]) {
  static_assert(R % 2 == 0 && T % 2 == 0, "whole 2x2 tiles");
  constexpr int RP = R / 2, TP = T / 2;
  const int64_t nb = w.k / 32;
  int64_t row[R], tok[T];
  for (int r = 0; r < R; ++r) row[r] = n0 + std::min(r, rows - 1);
  for (int t = 0; t < T; ++t) tok[t] = m0 + std::min(t, tokens - 1);
  qdot::QAcc4 acc[RP][TP];
  for (int i = 0; i < RP; ++i)
    for (int j = 0; j < TP; ++j) acc[i][j] = qdot::qzero4();
  if constexpr (paired(KIND)) {
    auto pair = [&](int64_t b, auto single) {
      constexpr bool kSingle = decltype(single)::value;
      qdot::QBlock2 a0[TP], a1[TP];
      qdot::QScale4 d[TP];
      for (int j = 0; j < TP; ++j) {
        const int64_t t0 = tok[2 * j], t1 = tok[2 * j + 1];
        const qdot::QActs p = qdot::load_pair_acts(x.q + t0 * x.row + 32 * b);
        const qdot::QActs q = qdot::load_pair_acts(x.q + t1 * x.row + 32 * b);
        a0[j] = qdot::block2(p, q, true), a1[j] = qdot::block2(p, q, false);
        d[j] = qdot::token_pair_factors(x.d + t0 * x.blocks + b, x.d + t1 * x.blocks + b);  // padded: d = 0 past the last block
      }
      for (int i = 0; i < RP; ++i) {
        const QPair p = src.template get<kSingle>(row[2 * i], b), q = src.template get<kSingle>(row[2 * i + 1], b);
        const qdot::QBlock2 w0 = qdot::block2(p, q, true), w1 = qdot::block2(p, q, false);
        const int64_t at0 = row[2 * i] * nb + b, at1 = row[2 * i + 1] * nb + b;
        qdot::QScale4 ws;
        if constexpr (kSingle) {  // the row's odd last block: no factor at b + 1
          const float last[2][2] = {{Factors<HALF>::at(w.scales, at0), 0.f}, {Factors<HALF>::at(w.scales, at1), 0.f}};
          ws = qdot::row_pair_factors(last[0], last[1]);
        } else {
          ws = Factors<HALF>::rows_pair(w.scales, at0, at1);
        }
        for (int j = 0; j < TP; ++j) acc[i][j] = qdot::mma_pair(acc[i][j], w0, a0[j], w1, a1[j], qdot::qmul4(ws, d[j]));
      }
    };
    const int64_t whole = nb - nb % 2;
    for (int64_t b = 0; b < whole; b += 2) pair(b, std::false_type{});
    if (nb % 2) pair(whole, std::true_type{});
  } else {
    for (int64_t b = 0; b < nb; ++b) {
      qdot::QBlock2 a[TP];
      qdot::QScale4 d[TP];
      for (int j = 0; j < TP; ++j) {
        const int64_t t0 = tok[2 * j], t1 = tok[2 * j + 1];
        a[j] = qdot::block2(qdot::load32(x.q + t0 * x.row + 32 * b), qdot::load32(x.q + t1 * x.row + 32 * b));
        d[j] = qdot::token_factors(x.d[t0 * x.blocks + b], x.d[t1 * x.blocks + b]);
      }
      for (int i = 0; i < RP; ++i) {
        alignas(32) int8_t scratch[2][32];
        const qdot::QBlock2 wv = qdot::block2(qdot::load32(signed_block<KIND>(w, row[2 * i], b, scratch[0])),
                                              qdot::load32(signed_block<KIND>(w, row[2 * i + 1], b, scratch[1])));
        const qdot::QScale4 ws = halves(KIND)
                                     ? Factors<HALF>::rows_pair(w.scales, row[2 * i] * 2 * nb + 2 * b, row[2 * i + 1] * 2 * nb + 2 * b)
                                     : Factors<HALF>::rows_block(w.scales, row[2 * i] * nb + b, row[2 * i + 1] * nb + b);
        for (int j = 0; j < TP; ++j) {
          const qdot::QScale4 sd = qdot::qmul4(ws, d[j]);
          if constexpr (halves(KIND)) acc[i][j] = qdot::mma_s8_halves(acc[i][j], wv, a[j], sd);
          else acc[i][j] = qdot::mma_s8(acc[i][j], wv, a[j], sd);
        }
      }
    }
  }
  for (int i = 0; i < RP; ++i)
    for (int j = 0; j < TP; ++j) {
      float lanes[4];
      qdot::qstore4(lanes, acc[i][j]);
      for (int h = 0; h < 2; ++h)
        for (int u = 0; u < 2; ++u) {
          const int r = 2 * i + h, t = 2 * j + u;
          if (r < rows && t < tokens) res[r][t] = with_mins<HALF>(lanes[2 * h + u], w, row[r], x, tok[t]);
        }
    }
}

template <QuantKind KIND, bool HALF, class Src>
void pair_tile_any(int rows, int tokens, const QuantWeightView& w, const Src& src, int64_t n0, const Acts& x,
                   int64_t m0, float (*res)[kTok]) {
  static_assert(kMaxRows == 4 && kTok == 4, "tiles of 2 or 4 rows and tokens");
  if (rows > 2) {
    if (tokens > 2) return pair_tile<KIND, HALF, 4, 4>(w, src, n0, rows, x, m0, tokens, res);
    return pair_tile<KIND, HALF, 4, 2>(w, src, n0, rows, x, m0, tokens, res);
  }
  if (tokens > 2) return pair_tile<KIND, HALF, 2, 4>(w, src, n0, rows, x, m0, tokens, res);
  pair_tile<KIND, HALF, 2, 2>(w, src, n0, rows, x, m0, tokens, res);
}
#endif

template <QuantKind KIND, bool HALF, int R, class Src>
void tile_tokens(int tokens, const QuantWeightView& w, const Src& src, int64_t n0, const Acts& x, int64_t m0,
                 float (*res)[kTok]) {
  static_assert(kTok >= 1 && kTok <= 4, "token tiles of 1 to 4");
  if constexpr (kTok >= 4) {
    if (tokens == 4) return tile<KIND, HALF, R, 4>(w, src, n0, x, m0, res);
  }
  if constexpr (kTok >= 3) {
    if (tokens == 3) return tile<KIND, HALF, R, 3>(w, src, n0, x, m0, res);
  }
  if constexpr (kTok >= 2) {
    if (tokens == 2) return tile<KIND, HALF, R, 2>(w, src, n0, x, m0, res);
  }
  tile<KIND, HALF, R, 1>(w, src, n0, x, m0, res);
}

template <QuantKind KIND, bool HALF, class Src>
void tile_any(int rows, int tokens, const QuantWeightView& w, const Src& src, int64_t n0, const Acts& x, int64_t m0,
              float (*res)[kTok]) {
  static_assert(kMaxRows >= 1 && kMaxRows <= 4, "row tiles of 1 to 4");
#if defined(LLMCHAT_QDOT_PAIR_TILES)
  pair_tile_any<KIND, HALF>(rows, tokens, w, src, n0, x, m0, res);
#else
  if constexpr (kMaxRows >= 4) {
    if (rows == 4) return tile_tokens<KIND, HALF, 4>(tokens, w, src, n0, x, m0, res);
  }
  if constexpr (kMaxRows >= 3) {
    if (rows == 3) return tile_tokens<KIND, HALF, 3>(tokens, w, src, n0, x, m0, res);
  }
  if constexpr (kMaxRows >= 2) {
    if (rows == 2) return tile_tokens<KIND, HALF, 2>(tokens, w, src, n0, x, m0, res);
  }
  tile_tokens<KIND, HALF, 1>(tokens, w, src, n0, x, m0, res);
#endif
}

template <typename T>
void store_tile(const QuantLinearArgs& a, int rows, int tokens, int64_t n0, int64_t m0, float (*res)[kTok]) {
  const T* bias = static_cast<const T*>(a.bias);
  T* out = static_cast<T*>(a.out);
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < tokens; ++t) {
      float v = res[r][t];
      if (bias) v = v + to_float(bias[n0 + r]);
      out[(m0 + t) * a.out_stride + n0 + r] = from_float<T>(v);
    }
}

template <QuantKind KIND, bool HALF, class Src>
void group_tiles(const QuantLinearArgs& a, const Src& src, int64_t n0, int64_t rows, const Acts& x) {
  float res[kMaxRows][kTok];
  const int64_t tile_rows = a.m == 1 ? kRowsAlone : kRows;
  for (int64_t m0 = 0; m0 < a.m; m0 += kTok) {
    const int tokens = int(std::min<int64_t>(kTok, a.m - m0));
    for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
      const int r = int(std::min<int64_t>(tile_rows, rows - r0));
      tile_any<KIND, HALF>(r, tokens, a.w, src, n0 + r0, x, m0, res);
      dispatch_dtype(a.dtype, [&](auto tag) { store_tile<decltype(tag)>(a, r, tokens, n0 + r0, m0, res); });
    }
  }
}

template <QuantKind KIND, bool HALF>
void run(const QuantLinearArgs& a, const Acts& x, const Runtime& rt) {
  const QuantWeightView& w = a.w;
  const int64_t nb = w.k / 32, groups = (w.n + kGroup - 1) / kGroup;
  const int64_t per_thread = (groups + rt.num_threads - 1) / std::max(1, rt.num_threads);
  const int64_t work = std::max<int64_t>(1, w.k * kGroup * a.m);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(per_thread, kMinChunkMacs / work));
  const bool unpack = paired(KIND) && a.m > kTok;
  rt.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    if constexpr (paired(KIND)) {
      if (unpack) {
        const int64_t row_bytes = x.row;  // one row unpacked: whole pairs, like an activation row
        std::vector<int8_t> scratch(size_t(kGroup * row_bytes));
        for (int64_t g = g0; g < g1; ++g) {
          const int64_t n0 = g * kGroup, rows = std::min<int64_t>(kGroup, w.n - n0);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t b = 0; b < nb; b += 2)
              qdot::store_pair(scratch.data() + r * row_bytes + 32 * b, b + 1 == nb ? packed_pair<KIND, true>(w, n0 + r, b, nb)
                                                                                       : packed_pair<KIND, false>(w, n0 + r, b, nb));
          group_tiles<KIND, HALF>(a, Unpacked{scratch.data(), n0, row_bytes}, n0, rows, x);
        }
        return;
      }
    }
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t n0 = g * kGroup, rows = std::min<int64_t>(kGroup, w.n - n0);
      group_tiles<KIND, HALF>(a, Packed<KIND>{w, nb}, n0, rows, x);
    }
  });
}

// Where element j of block b goes in a row of pair order.
inline int64_t pair_position(int64_t b, int j) { return 64 * (b / 2) + 16 * (b % 2) + (j < 16 ? j : 16 + j); }

#if defined(__AVX512F__) && defined(__AVX512BW__)
template <typename T>
inline __m512 floats16(const T* p) {
  if constexpr (std::is_same_v<T, bf16_t>)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  else if constexpr (std::is_same_v<T, fp16_t>)
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  else
    return _mm512_loadu_ps(p);
}

// One block in plain order, in registers: the same operations as the loop below (an exact max, one division,
// x * inv rounded half to even by the conversion, the same clamp), so the same q, d and dsum.
template <typename T>
inline void quantize_block(const T* xb, int8_t* qb, float* d, float* dsum) {
  const __m512 v0 = floats16(xb), v1 = floats16(xb + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float scale = amax / 127.f, inv = scale != 0.f ? 1.f / scale : 0.f;
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  auto quant = [&](__m512 v) {
    return _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(v, _mm512_set1_ps(inv)))));
  };
  const __m512i q0 = quant(v0), q1 = quant(v1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(q1));
  *d = scale, *dsum = scale * float(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
}
#endif

template <typename T>
void quantize_rows(const T* x, int64_t x_stride, int64_t m0, int64_t m1, int64_t k, bool pairs, int64_t row,
                   int64_t blocks, int8_t* q, float* d, float* dsum) {
  const int64_t nb = k / 32;
  for (int64_t m = m0; m < m1; ++m) {
    int8_t* qr = q + m * row;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    if (!pairs) {
      for (int64_t b = 0; b < nb; ++b)
        quantize_block(x + m * x_stride + 32 * b, qr + 32 * b, d + m * blocks + b, dsum + m * blocks + b);
      continue;
    }
#endif
    for (int64_t b = 0; b < nb; ++b) {
      const T* xb = x + m * x_stride + 32 * b;
      float v[32], amax = 0.f;
      for (int j = 0; j < 32; ++j) v[j] = to_float(xb[j]), amax = std::max(amax, std::fabs(v[j]));
      const float scale = amax / 127.f, inv = scale != 0.f ? 1.f / scale : 0.f;
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) {
        const float r = std::nearbyint(v[j] * inv);  // round half to even, as torch.round
        const int8_t qj = int8_t(std::max(-127.f, std::min(127.f, r)));
        qr[pairs ? pair_position(b, j) : 32 * b + j] = qj;
        sum += qj;
      }
      d[m * blocks + b] = scale;
      dsum[m * blocks + b] = scale * float(sum);
    }
    for (int64_t b = nb; b < blocks; ++b) {  // the padding block of an odd count
      for (int j = 0; j < 32; ++j) qr[pair_position(b, j)] = 0;
      d[m * blocks + b] = 0.f, dsum[m * blocks + b] = 0.f;
    }
  }
}

void quantize(DType dt, const void* x, int64_t x_stride, int64_t m, int64_t k, bool pairs, int64_t row,
              int64_t blocks, int8_t* q, float* d, float* dsum, const Runtime& rt) {
  rt.parallel_for(m, grain_for(k), [&](int64_t m0, int64_t m1) {
    dispatch_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      quantize_rows(static_cast<const T*>(x), x_stride, m0, m1, k, pairs, row, blocks, q, d, dsum);
    });
  });
}

}  // namespace

const char* quant_isa_name() { return qdot::kIsa; }

void quantize_activations(DType dt, const void* x, int64_t x_stride, int64_t m, int64_t k, int8_t* q, float* d,
                          float* dsum, const Runtime& rt) {
  quantize(dt, x, x_stride, m, k, false, k, k / 32, q, d, dsum, rt);
}

void quant_linear(const QuantLinearArgs& a, const Runtime& rt) {
  if (a.w.tiled) return neon_tiles_compiled() ? quant_tiles_neon_linear(a, rt) : quant_tiles_linear(a, rt);
  if (a.m <= 0 || a.w.n <= 0) return;
  const int64_t nb = a.w.k / 32;
  const bool pairs = paired(a.w.kind);
  const int64_t blocks = pairs ? nb + nb % 2 : nb, row = 32 * blocks;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, dsum;
  q.resize(size_t(a.m * row)), d.resize(size_t(a.m * blocks)), dsum.resize(size_t(a.m * blocks));
  quantize(a.dtype, a.x, a.x_stride, a.m, a.w.k, pairs, row, blocks, q.data(), d.data(), dsum.data(), rt);
  const Acts x{q.data(), d.data(), dsum.data(), row, blocks};
  const bool half = a.w.half_factors;
  switch (a.w.kind) {
    case QuantKind::Q8: return half ? run<QuantKind::Q8, true>(a, x, rt) : run<QuantKind::Q8, false>(a, x, rt);
    case QuantKind::Q8Halves:
      return half ? run<QuantKind::Q8Halves, true>(a, x, rt) : run<QuantKind::Q8Halves, false>(a, x, rt);
    case QuantKind::Q4: return half ? run<QuantKind::Q4, true>(a, x, rt) : run<QuantKind::Q4, false>(a, x, rt);
    case QuantKind::Q5: return half ? run<QuantKind::Q5, true>(a, x, rt) : run<QuantKind::Q5, false>(a, x, rt);
    case QuantKind::Q6: return half ? run<QuantKind::Q6, true>(a, x, rt) : run<QuantKind::Q6, false>(a, x, rt);
  }
}

void quant_rows(const QuantWeightView& w, const int64_t* ids, int64_t num_ids, DType dt, void* out,
                int64_t out_stride, const Runtime& rt) {
  if (w.tiled) {
    return neon_tiles_compiled() ? quant_tiles_neon_rows(w, ids, num_ids, dt, out, out_stride, rt)
                                 : quant_tiles_rows(w, ids, num_ids, dt, out, out_stride, rt);
  }
  const int64_t K = w.k, nb = K / 32;
  rt.parallel_for(num_ids, grain_for(K), [&](int64_t i0, int64_t i1) {
    int8_t vals[64];
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = ids[i];
      dispatch_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        T* o = static_cast<T*>(out) + i * out_stride;
        for (int64_t b = 0; b < nb; ++b) {
          int8_t block[32];
          if (paired(w.kind)) {  // unpack the block alone (as the first of a pair), then undo the pair order
            const uint8_t* qs = static_cast<const uint8_t*>(w.values) + (row * nb + b) * 16;
            qdot::store_pair(vals, w.kind == QuantKind::Q5 ? qdot::load_q5_single(qs, w.high + row * nb + b)
                                                           : qdot::load_q4_single(qs));
            for (int j = 0; j < 32; ++j) block[j] = vals[j < 16 ? j : 16 + j];
          } else if (w.kind == QuantKind::Q6) {
            signed_block<QuantKind::Q6>(w, row, b, block);
          } else {
            std::memcpy(block, static_cast<const int8_t*>(w.values) + row * K + 32 * b, 32);
          }
          auto factor = [&](const void* p, int64_t i) {
            return w.half_factors ? qdot::half_to_float(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
          };
          for (int j = 0; j < 32; ++j) {
            const float s = factor(w.scales, halves(w.kind) ? row * 2 * nb + 2 * b + j / 16 : row * nb + b);
            float value = s * float(block[j]);  // two roundings, as numpy does it: never one fused multiply-add
            if (w.mins != nullptr) value = value + factor(w.mins, row * nb + b);
            else if (w.min_offset != 0) value = value + float(w.min_offset) * s;
            o[32 * b + j] = from_float<T>(value);
          }
        }
      });
    }
  });
}

}  // namespace llmchat
