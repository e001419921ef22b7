// Quantized linear on the 16-row tile layout (see quant_tiles.h). A task owns whole groups of 16 weight rows
// and runs every token against them, so each weight byte is read once per call: whole tiles of 16 tokens on
// AMX (where the OS grants the tiles), the rest (and everything elsewhere) as VNNI block dots, G groups x T
// tokens a register tile. Both produce each block's exact int32 sum, then the same float operations.
#include "quant_tiles.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../vec/amx_tiles.h"
#include "../vec/vec.h"
#include "amx_linear.h"
#include "dispatch.h"
#include "tile_factors.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)
#define LLMCHAT_QUANT_TILES 1
#include <cpuid.h>
#include <immintrin.h>
#endif

// Only the fused multiply-adds written below: an output's float operations must be the same in every path.
#include "exact_float.h"

namespace llmchat {

#if defined(LLMCHAT_QUANT_TILES)
namespace {

constexpr bool nibbles(QuantKind k) { return k == QuantKind::Q4 || k == QuantKind::Q5; }
constexpr bool halves(QuantKind k) { return k == QuantKind::Q8Halves || k == QuantKind::Q6; }
// Q6 is Q8Halves held in 6 bits: its B rows are unpacked to the same bytes (w + 128) as it is read.
constexpr bool unpacked_rows(QuantKind k) { return nibbles(k) || k == QuantKind::Q6; }
constexpr int64_t block_bytes(QuantKind k) { return unpacked_rows(k) ? 256 : 512; }

// Quantized activations in plain order: q [M, K], d and dsum [M, nb]; offsets [M, subs] (or null): the stored
// weights' offset times sum(q) over each block (Q8Halves: each half), what a sum of u * q has on top of the signed one.
// 16-bit activations (q_high not null): q holds the low bytes and q_high the high ones, q = 256 q_high + q.
struct Acts {
  const int8_t* q;
  const float *d, *dsum;
  const int32_t* offsets;
  int64_t k, nb;
  const int8_t* q_high = nullptr;
};

// 16 rows' fp32 or fp16 factors of sub-block s of group g, for `subs` sub-blocks a row.
template <int F>
inline __m512 factors16(const void* p, int64_t g, int64_t s, int64_t subs) {
  if constexpr (F == kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + (g * subs + s) * kTileRows)));
  } else {
    static_assert(F == kF32, "compact factors take the super-block path");
    return _mm512_loadu_ps(static_cast<const float*>(p) + (g * subs + s) * kTileRows);
  }
}

// The 8 B rows (16 rows x 4 elements each) of group g, block b: u8 weights as stored (VNNI's vpdpbusd takes
// one side unsigned), or with SIGNED (a 4/5/6-bit kind, for AMX's TDPBSSD) the weights themselves, their offset
// taken off each byte (Q6: the 32 of its 6 bits; Q4_0/Q5_0: min_offset) instead of off every sum.
template <QuantKind KIND, bool SIGNED = false>
inline void block_rows(const QuantWeightView& w, int64_t nb, int64_t g, int64_t b, __m512i rows[8]) {
  static_assert(!SIGNED || unpacked_rows(KIND), "8-bit weights are read as stored");
  const uint8_t* p = static_cast<const uint8_t*>(w.values) + (g * nb + b) * block_bytes(KIND);
  if constexpr (unpacked_rows(KIND)) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int r = 0; r < 4; ++r) {
      const __m512i v = _mm512_loadu_si512(p + 64 * r);
      rows[r] = _mm512_and_si512(v, low);
      rows[r + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
    if constexpr (KIND == QuantKind::Q5) {
      const uint64_t* masks = reinterpret_cast<const uint64_t*>(w.high) + (g * nb + b) * 8;
      const __m512i bit4 = _mm512_set1_epi8(0x10);
      for (int r = 0; r < 8; ++r) rows[r] = _mm512_mask_add_epi8(rows[r], _cvtu64_mask64(masks[r]), rows[r], bit4);
    }
    if constexpr (KIND == QuantKind::Q6) {  // bits 4 and 5 (8 masks each), then u + 96 = w + 128 (SIGNED: u - 32 = w)
      const uint64_t* masks = reinterpret_cast<const uint64_t*>(w.high) + (g * nb + b) * 16;
      const __m512i bit4 = _mm512_set1_epi8(0x10), bit5 = _mm512_set1_epi8(0x20),
                    to_u8 = _mm512_set1_epi8(SIGNED ? -32 : 96);
      for (int r = 0; r < 8; ++r) {
        rows[r] = _mm512_mask_add_epi8(rows[r], _cvtu64_mask64(masks[r]), rows[r], bit4);
        rows[r] = _mm512_mask_add_epi8(rows[r], _cvtu64_mask64(masks[8 + r]), rows[r], bit5);
        rows[r] = _mm512_add_epi8(rows[r], to_u8);
      }
    }
    if constexpr (SIGNED && nibbles(KIND)) {
      if (w.min_offset != 0) {
        const __m512i offset = _mm512_set1_epi8(int8_t(w.min_offset));
        for (int r = 0; r < 8; ++r) rows[r] = _mm512_add_epi8(rows[r], offset);
      }
    }
  } else {
    for (int r = 0; r < 8; ++r) rows[r] = _mm512_loadu_si512(p + 64 * r);
  }
}

// Asks for the lines of the block `kPrefetchBytes` of values past block `index` (g * nb + b: a thread's blocks lie
// in one run) and its high-bit masks into L1, and of the block `kPrefetchFarBytes` past it into L2. A lone token's
// dots leave DRAM idle between the hardware prefetcher's requests: decode of a 1.5B Q4_K_M on a Xeon went from
// 19.5 to 23.6 tok/s with the first (1-2 KB ahead was best; 3 KB already lost some), and from 21.1 to 23.7 with
// the second on top (3-6 KB all alike; on cache-resident weights neither costs anything measurable).
constexpr int64_t kPrefetchBytes = 1536, kPrefetchFarBytes = 4096;
template <QuantKind KIND, _mm_hint HINT>
inline void prefetch_block(const QuantWeightView& w, int64_t block) {
  const char* values = static_cast<const char*>(w.values) + block * block_bytes(KIND);
  for (int l = 0; l < block_bytes(KIND); l += 64) _mm_prefetch(values + l, HINT);
  if constexpr (KIND == QuantKind::Q5 || KIND == QuantKind::Q6) {  // 8 (Q6: 16) 64-bit masks a block
    constexpr int kMaskBytes = KIND == QuantKind::Q6 ? 128 : 64;
    const char* masks = reinterpret_cast<const char*>(w.high) + block * kMaskBytes;
    for (int l = 0; l < kMaskBytes; l += 64) _mm_prefetch(masks + l, HINT);
  }
}
template <QuantKind KIND>
inline void prefetch_ahead(const QuantWeightView& w, int64_t index) {
  prefetch_block<KIND, _MM_HINT_T0>(w, index + kPrefetchBytes / block_bytes(KIND));
  prefetch_block<KIND, _MM_HINT_T1>(w, index + kPrefetchFarBytes / block_bytes(KIND));
}

inline int32_t four_bytes(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// acc += float(isum) * (scale * d), lane by lane: the one float step of a block (or half).
inline __m512 scaled_add(__m512 acc, __m512i isum, __m512 scale, float d) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(scale, _mm512_set1_ps(d)), acc);
}

// 16 floats of a bias or to an output in dtype dt; bf16 rounds to nearest even and fp16 as F16C does, the
// scalar to_bf16 / to_fp16's results.
inline __m512 load16(DType dt, const void* p) {
  switch (dt) {
    case DType::BF16:
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p))), 16));
    case DType::F16: return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    default: return _mm512_loadu_ps(p);
  }
}
inline void store16(DType dt, void* p, __m512 v) {
  switch (dt) {
    case DType::BF16: {
      const __m512i u = _mm512_castps_si512(v);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
      r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));  // quiet nan
      _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
      return;
    }
    case DType::F16:
      _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      return;
    default: _mm512_storeu_ps(p, v);
  }
}

// out[m, 16g .. 16g + 15] = acc (+ bias), in the output's dtype.
struct Store {
  const QuantLinearArgs& a;

  void operator()(int64_t g, int64_t m, __m512 acc) const {
    if (m >= a.m) return;  // a padding token of the last AMX tile (amx_tokens)
    const int size = dtype_size(a.dtype);
    if (a.bias) acc = _mm512_add_ps(acc, load16(a.dtype, static_cast<const char*>(a.bias) + g * kTileRows * size));
    store16(a.dtype, static_cast<char*>(a.out) + (m * a.out_stride + g * kTileRows) * size, acc);
  }
};

// G groups x T tokens from (g0, m0) on VNNI block dots: per block, 8 vpdpbusd a group and token give the
// block's int32 sums of 16 rows in the lanes (starting from -offset, so they come out signed). WIDE: 8 more
// for the high bytes, added shifted by 8.
template <QuantKind KIND, int HALF, bool WIDE, int G, int T>
void vnni_tile(const QuantLinearArgs& a, const Acts& x, int64_t g0, int64_t m0, const Store& finish) {
  constexpr int kSub = halves(KIND) ? 2 : 1;
  const int64_t nb = x.nb;
  __m512 acc[G][T];
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < T; ++t) acc[g][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    // unrolled: the G groups' accumulators then stay in registers and their dot chains interleave; as a loop
    // (gcc's choice), each group's sums went through the stack, and a decode step ran ~1.6x slower (Zen 5)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      prefetch_ahead<KIND>(a.w, (g0 + g) * nb + b);
      __m512i rows[8];
      block_rows<KIND>(a.w, nb, g0 + g, b, rows);
      __m512i isum[T][kSub];
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < kSub; ++h)
          isum[t][h] = x.offsets ? _mm512_set1_epi32(-x.offsets[(m0 + t) * kSub * nb + kSub * b + h]) : _mm512_setzero_si512();
      for (int r = 0; r < 8; ++r)
        for (int t = 0; t < T; ++t) {
          const __m512i act = _mm512_set1_epi32(four_bytes(x.q + (m0 + t) * x.k + 32 * b + 4 * r));
          isum[t][r / (8 / kSub)] = _mm512_dpbusd_epi32(isum[t][r / (8 / kSub)], rows[r], act);
        }
      if constexpr (WIDE) {
        static_assert(kSub == 1, "16-bit activations are for whole-block scales");
        for (int t = 0; t < T; ++t) {
          __m512i high = _mm512_setzero_si512();
          for (int r = 0; r < 8; ++r)
            high = _mm512_dpbusd_epi32(high, rows[r], _mm512_set1_epi32(four_bytes(x.q_high + (m0 + t) * x.k + 32 * b + 4 * r)));
          isum[t][0] = _mm512_add_epi32(isum[t][0], _mm512_slli_epi32(high, 8));
        }
      }
      for (int h = 0; h < kSub; ++h) {
        const __m512 scale = factors16<HALF>(a.w.scales, g0 + g, kSub * b + h, kSub * nb);
        for (int t = 0; t < T; ++t) acc[g][t] = scaled_add(acc[g][t], isum[t][h], scale, x.d[(m0 + t) * nb + b]);
      }
      if (nibbles(KIND) && a.w.mins != nullptr) {
        const __m512 mins = factors16<HALF>(a.w.mins, g0 + g, b, nb);
        for (int t = 0; t < T; ++t) acc[g][t] = _mm512_fmadd_ps(mins, _mm512_set1_ps(x.dsum[(m0 + t) * nb + b]), acc[g][t]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < T; ++t) finish(g0 + g, m0 + t, acc[g][t]);
}

template <QuantKind KIND, int HALF, bool WIDE, int G>
void vnni_tokens(const QuantLinearArgs& a, const Acts& x, int64_t g0, int64_t m0, int64_t m1,
                 const Store& finish) {
  int64_t m = m0;
  for (; m + 4 <= m1; m += 4) vnni_tile<KIND, HALF, WIDE, G, 4>(a, x, g0, m, finish);
  switch (m1 - m) {
    case 3: return vnni_tile<KIND, HALF, WIDE, G, 3>(a, x, g0, m, finish);
    case 2: return vnni_tile<KIND, HALF, WIDE, G, 2>(a, x, g0, m, finish);
    case 1: return vnni_tile<KIND, HALF, WIDE, G, 1>(a, x, g0, m, finish);
    default: return;
  }
}

// Groups [g0, g1) against tokens [m0, m1). Packed kinds (nibbles, Q6) go one group at a time: the thread then
// reads its weights as one sequential stream, which DRAM prefetch keeps up with (4 groups' streams at once ran a
// Zen 5's Q4/Q6 decode ~30% below its read bandwidth). 8-bit weights, whose rows need no unpacking, take 4
// groups for a lone token (more rows share each activation load) and 2 for more (rows reused across tokens).
template <QuantKind KIND, int HALF, bool WIDE>
void vnni_groups(const QuantLinearArgs& a, const Acts& x, int64_t g0, int64_t g1, int64_t m0, int64_t m1,
                 const Store& finish) {
  int64_t g = g0;
  if constexpr (unpacked_rows(KIND)) {
    for (; g < g1; ++g) vnni_tokens<KIND, HALF, WIDE, 1>(a, x, g, m0, m1, finish);
    return;
  }
  if (m1 - m0 == 1) {
    for (; g + 4 <= g1; g += 4) vnni_tokens<KIND, HALF, WIDE, 4>(a, x, g, m0, m1, finish);
  } else {
    for (; g + 2 <= g1; g += 2) vnni_tokens<KIND, HALF, WIDE, 2>(a, x, g, m0, m1, finish);
  }
  for (; g < g1; ++g) vnni_tokens<KIND, HALF, WIDE, 1>(a, x, g, m0, m1, finish);
}

#if defined(LLMCHAT_HAS_AMX_INT8)
bool amx_int8_granted() {
#if defined(LLMCHAT_AMX_EMULATED)
  return amx_ready();
#else
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 25))) return false;  // AMX-INT8
  return amx_ready();  // AMX-TILE, the OS's tile state and this process's grant
#endif
}

constexpr int kTileTokens = 16;

// Tile numbers for TM token tiles x TN groups: A (tokens) i, B (weights) TM + j, C (sums) TM + TN + i TN + j.
// Two layouts: 2 x 2 (32 tokens and more: 4 independent products per sub-block) and 1 x 3 (16 to 31 tokens).
// A sub-block is a block, or a Q8Halves half: A 16 tokens x 32 (16) bytes, B 8 (4) rows x 64 bytes, C 16 x 16.
template <int TM, int TN>
inline amx::TileConfig int8_tiles(int sub_bytes) {
  amx::TileConfig cfg = amx::full_tiles();
  for (int i = 0; i < TM; ++i) cfg.colsb[i] = uint16_t(sub_bytes);
  for (int j = 0; j < TN; ++j) cfg.rows[TM + j] = uint8_t(sub_bytes / 4);
  return cfg;
}

// One sub-block's products of NA <= TM A tiles and NB <= TN groups, each C stored to c[i TN + j] (16 x 16).
// A tile i is 16 rows of stride k from q[i]: token tiles, or a token tile's low and high activation bytes.
// SIGNED: B holds signed weights (TDPBSSD), else unsigned (TDPBSUD).
template <bool SIGNED, int TM, int TN, int NA, int NB, int I = 0>
inline void tile_products(const int8_t* const* q, int64_t k, const uint8_t* const* w, int32_t (*c)[kTileTokens * kTileRows]) {
  if constexpr (I == 0) {
    if constexpr (NA > 0) amx::load<0>(q[0], k);
    if constexpr (NA > 1) amx::load<1>(q[1], k);
    if constexpr (NB > 0) amx::load<TM>(w[0], 64);
    if constexpr (NB > 1) amx::load<TM + 1>(w[1], 64);
    if constexpr (NB > 2) amx::load<TM + 2>(w[2], 64);
  }
  if constexpr (I < NA * NB) {
    constexpr int ti = I / NB, tj = I % NB, tc = TM + TN + ti * TN + tj;
    amx::zero<tc>();
    if constexpr (SIGNED) amx::dp_s8s8<tc, ti, TM + tj>();
    else amx::dp_s8u8<tc, ti, TM + tj>();
    amx::store<tc>(c[ti * TN + tj], 4 * kTileRows);
    tile_products<SIGNED, TM, TN, NA, NB, I + 1>(q, k, w, c);
  }
}

// acc rows [16][stride] += the float step of one sub-block for 16 tokens and 16 rows, from int32 sums c (WIDE:
// plus 256 x the high bytes' sums c_high). With OFF, offsets off[t * off_stride] come off the sums; with MINS,
// acc += mins * dsum[t * d_stride].
template <bool OFF, bool MINS, bool WIDE>
__attribute__((always_inline)) inline void fold(float* acc, int64_t stride, const int32_t* c, const int32_t* c_high,
                                                __m512 scale, const float* d, int64_t d_stride, const int32_t* off,
                                                int64_t off_stride, __m512 mins, const float* dsum) {
#pragma GCC unroll 4
  for (int t = 0; t < kTileTokens; ++t) {
    __m512i isum = _mm512_load_si512(c + t * kTileRows);
    if constexpr (WIDE) isum = _mm512_add_epi32(isum, _mm512_slli_epi32(_mm512_load_si512(c_high + t * kTileRows), 8));
    if constexpr (OFF) isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(off[t * off_stride]));
    __m512 v = scaled_add(_mm512_load_ps(acc + t * stride), isum, scale, d[t * d_stride]);
    if constexpr (MINS) v = _mm512_fmadd_ps(mins, _mm512_set1_ps(dsum[t * d_stride]), v);
    _mm512_store_ps(acc + t * stride, v);
  }
}

// NA token tiles from token m x NB groups from g on TDPBSUD (WIDE: one token tile, its low and high activation
// bytes as the two A tiles). w[j]: group g + j's B rows (the 4/5/6-bit kinds' unpacked, 512 bytes a block), or
// with UNPACK (a 4/5/6-bit kind) none: each block is unpacked two blocks ahead into a ring that stays in L1.
// OFF: the sums have offsets to take off; MINS: stored mins.
template <QuantKind KIND, int HALF, bool OFF, bool MINS, bool UNPACK, bool WIDE, int TM, int TN, int NA, int NB>
void amx_chunk(const QuantLinearArgs& a, const Acts& x, int64_t g, const uint8_t* const* w, int64_t m,
               const Store& finish) {
  constexpr int kSub = halves(KIND) ? 2 : 1, kSubBytes = 32 / kSub, kB = kSubBytes * kTileRows;
  constexpr int kTok = WIDE ? 1 : NA;  // token tiles
  constexpr int64_t kStride = TN * kTileRows;  // floats per accumulator row
  const int64_t nb = x.nb, subs = kSub * nb, k = x.k;
  alignas(64) float acc[kTok * kTileTokens][TN * kTileRows];
  // Two sets of sums: sub-block s + 1 is multiplied (and stored) before s is folded, so the fold never
  // waits for the tile stores it reads.
  alignas(64) int32_t sums[2][TM * TN][kTileTokens * kTileRows];
  std::memset(acc, 0, sizeof acc);
  const int8_t* q = x.q + m * k;
  const int8_t* q1 = WIDE ? x.q_high + m * k : NA > 1 ? q + kTileTokens * k : nullptr;  // the second A tile
  alignas(64) uint8_t ring[UNPACK ? 4 : 1][NB][512];
  auto unpack = [&](int64_t b) {
    for (int j = 0; j < NB; ++j) {
      __m512i rows[8];
      block_rows<KIND, unpacked_rows(KIND)>(a.w, nb, g + j, b, rows);
      for (int r = 0; r < 8; ++r) _mm512_store_si512(ring[b & 3][j] + 64 * r, rows[r]);
    }
  };
  auto products = [&](int64_t s) {
    const uint8_t* ws[3] = {};
    for (int j = 0; j < NB; ++j) ws[j] = UNPACK ? ring[(s / kSub) & 3][j] + (s % kSub) * kB : w[j] + s * kB;
    const int8_t* qs[2] = {q + s * kSubBytes, q1 ? q1 + s * kSubBytes : nullptr};
    tile_products<unpacked_rows(KIND), TM, TN, NA, NB>(qs, k, ws, sums[s & 1]);
  };
  if constexpr (UNPACK) {  // blocks two ahead of the sub-block being folded (a Q6 block holds two)
    unpack(0);
    if (nb > 1) unpack(1);
  }
  products(0);
  for (int64_t s = 0; s < subs; ++s) {
    if constexpr (UNPACK) {
      if (s % kSub == 0 && s / kSub + 2 < nb) unpack(s / kSub + 2);
    }
    if (s + 1 < subs) products(s + 1);
    auto& c = sums[s & 1];
    for (int j = 0; j < NB; ++j) {
      const __m512 scale = factors16<HALF>(a.w.scales, g + j, s, subs);
      const __m512 mn = MINS ? factors16<HALF>(a.w.mins, g + j, s, nb) : scale;
      for (int i = 0; i < kTok; ++i) {
        const int64_t mt = m + i * kTileTokens;
        fold<OFF, MINS, WIDE>(&acc[i * kTileTokens][j * kTileRows], kStride, c[i * TN + j], WIDE ? c[TN + j] : nullptr,
                              scale, x.d + mt * nb + s / kSub, nb, OFF ? x.offsets + mt * subs + s : nullptr, subs, mn,
                              x.dsum + mt * nb + s);
      }
    }
  }
  for (int i = 0; i < kTok; ++i)
    for (int j = 0; j < NB; ++j)
      for (int t = 0; t < kTileTokens; ++t)
        finish(g + j, m + i * kTileTokens + t, _mm512_load_ps(&acc[i * kTileTokens + t][j * kTileRows]));
}

// Groups [g0, g1) x tokens [0, tokens) (whole tiles) in TM x TN chunks, the tails in smaller ones. WIDE (16-bit
// activations, TM = 2): the two A tiles are one token tile's low and high bytes.
template <QuantKind KIND, int HALF, bool WIDE, int TM, int TN>
void amx_groups(const QuantLinearArgs& a, const Acts& x, int64_t g0, int64_t g1, int64_t tokens, const Store& finish) {
  const int64_t nb = x.nb;
  amx::configure(int8_tiles<TM, TN>(halves(KIND) ? 16 : 32));  // per task: tile state belongs to the thread
  // One token tile: each block is unpacked as the chunk goes (amx_chunk's UNPACK). More: once per group, for
  // all its token tiles.
  // (Q6's ring holds whole blocks, each serving its two halves.)
  constexpr bool kAhead = unpacked_rows(KIND) && TM > 1, kAsItGoes = unpacked_rows(KIND) && TM == 1;
  thread_local std::vector<uint8_t> unpacked;  // the workers' own: no allocation per call
  if (kAhead && unpacked.size() < size_t(TN * nb * 512)) unpacked.resize(size_t(TN * nb * 512));
  for (int64_t g = g0; g < g1; g += TN) {
    const int nbg = int(std::min<int64_t>(TN, g1 - g));
    const uint8_t* w[TN];
    for (int j = 0; j < nbg; ++j) {
      w[j] = static_cast<const uint8_t*>(a.w.values) + (g + j) * nb * block_bytes(KIND);
      if constexpr (kAhead) {  // B tiles are bytes: unpack the group once for all its token tiles
        uint8_t* dst = unpacked.data() + j * nb * 512;
        for (int64_t b = 0; b < nb; ++b) {
          __m512i rows[8];
          block_rows<KIND, unpacked_rows(KIND)>(a.w, nb, g + j, b, rows);
          for (int r = 0; r < 8; ++r) _mm512_storeu_si512(dst + b * 512 + 64 * r, rows[r]);
        }
        w[j] = dst;
      }
    }
    constexpr int kStep = WIDE ? 1 : TM;  // token tiles a chunk
    for (int64_t m = 0; m < tokens; m += kStep * kTileTokens) {
      const int nta = int(std::min<int64_t>(TM, (tokens - m) / kTileTokens));
      auto chunk = [&](auto na, auto nbt) {
        constexpr int NA = decltype(na)::value, NB = decltype(nbt)::value;
        if (a.w.mins != nullptr) amx_chunk<KIND, HALF, false, true, kAsItGoes, WIDE, TM, TN, NA, NB>(a, x, g, w, m, finish);
        else if (x.offsets != nullptr && !unpacked_rows(KIND))  // unpacked rows are signed: no offsets
          amx_chunk<KIND, HALF, true, false, kAsItGoes, WIDE, TM, TN, NA, NB>(a, x, g, w, m, finish);
        else amx_chunk<KIND, HALF, false, false, kAsItGoes, WIDE, TM, TN, NA, NB>(a, x, g, w, m, finish);
      };
      using I1 = std::integral_constant<int, 1>;
      using I2 = std::integral_constant<int, 2>;
      using I3 = std::integral_constant<int, 3>;
      if constexpr (WIDE) {
        nbg == 2 ? chunk(I2{}, I2{}) : chunk(I2{}, I1{});
      } else if constexpr (TM == 2) {
        if (nta == 2) nbg == 2 ? chunk(I2{}, I2{}) : chunk(I2{}, I1{});
        else nbg == 2 ? chunk(I1{}, I2{}) : chunk(I1{}, I1{});
      } else {
        nbg == 3 ? chunk(I1{}, I3{}) : nbg == 2 ? chunk(I1{}, I2{}) : chunk(I1{}, I1{});
      }
    }
  }
  amx::release();
}
#endif

// Tokens past the last whole tile from which one AMX tile padded with zero tokens costs less than their VNNI dots
// (a [8960, 1536] weight, 2 threads, a Xeon with AMX: Q4_K's tile 0.62 ms, 6 tokens' dots 0.40; Q5_K's tile pays
// from 7 tokens too; Q6_K's tile 0.90, 5 tokens' dots 0.81, 6 0.96; with per-32 factors, Q4_0's and Q8_0's from
// 10, Q6's from 13). Speculation's verification rows and a few sessions' decode land there.
int64_t amx_pad_from(const QuantLinearArgs& a) {
  switch (a.w.kind) {
    case QuantKind::Q4: return a.w.mins != nullptr ? 7 : 10;
    case QuantKind::Q5: return 7;
    case QuantKind::Q6: return a.w.compact_factors ? 6 : 13;  // Q6_K's super-blocks: 5 tokens' dots 0.81 ms, 6 0.96, the tile 0.90
    default: return 10;
  }
}

// Tokens [0, amx_tokens) run on AMX tiles, the rest on VNNI dots; past a.m, zero tokens pad the last tile.
int64_t amx_tokens(const QuantLinearArgs& a) {
#if defined(LLMCHAT_HAS_AMX_INT8)
  static const bool amx = amx_int8_granted();
  if (!amx) return 0;
  const int64_t whole = a.m / kTileTokens * kTileTokens;
  return a.m - whole >= amx_pad_from(a) ? whole + kTileTokens : whole;
#else
  (void)a;
  return 0;
#endif
}

template <QuantKind KIND, int HALF>
void run(const QuantLinearArgs& a, const Acts& x, const Runtime& rt) {
  const int64_t nb = x.nb, groups = a.w.n / kTileRows;
  const Store finish{a};
  const int64_t tile_tokens = amx_tokens(a);  // may pass a.m: the activations are padded so far with zeros
  const int64_t per_thread = (groups + rt.num_threads - 1) / std::max(1, rt.num_threads);
  const int64_t work = std::max<int64_t>(1, a.w.k * kTileRows * a.m);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(per_thread, kMinChunkMacs / work));
  rt.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    if constexpr (KIND == QuantKind::Q8) {
      if (x.q_high != nullptr) {
#if defined(LLMCHAT_HAS_AMX_INT8)
        if (tile_tokens > 0) amx_groups<KIND, HALF, true, 2, 2>(a, x, g0, g1, tile_tokens, finish);
#endif
        if (tile_tokens < a.m) vnni_groups<KIND, HALF, true>(a, x, g0, g1, tile_tokens, a.m, finish);
        return;
      }
    }
#if defined(LLMCHAT_HAS_AMX_INT8)
    if (tile_tokens >= 2 * kTileTokens) amx_groups<KIND, HALF, false, 2, 2>(a, x, g0, g1, tile_tokens, finish);
    else if (tile_tokens > 0) amx_groups<KIND, HALF, false, 1, 3>(a, x, g0, g1, tile_tokens, finish);
#endif
    if (tile_tokens < a.m) vnni_groups<KIND, HALF, false>(a, x, g0, g1, tile_tokens, a.m, finish);
  });
}

// ---- K-quants with compact factors: whole super-blocks in integers (quant_tiles.h) ----

// Activations quantized per super-block of 256: q [rows][k], d [rows][supers], and sums [rows][subs]: q summed over
// each sub-block (32 elements for Q4/Q5, 16 for the halves kinds), which the mins (and w + 128's offset) take.
struct SuperActs {
  const int8_t* q;
  const float* d;
  const int16_t* sums;
  int64_t k, supers, subs;
};

inline int32_t load32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 16 rows' integer factors of sub-block j (0 .. per_super - 1) of super-block S, one a lane.
template <int F>
inline __m512i compact_ints16(const uint8_t* group, int64_t S, int j, int per_super) {
  if constexpr (F == kCompactU6) {  // 4 nibble rows, then 2 rows of 2-bit pairs (quant_tiles.h)
    const uint8_t* ints = group + S * kCompact6Bytes;
    __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ints + kTileRows * (j % 4)));
    __m128i high = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ints + 4 * kTileRows + kTileRows * (j / 4)));
    low = _mm_and_si128(_mm_srl_epi16(low, _mm_cvtsi32_si128(4 * (j / 4))), _mm_set1_epi8(0x0F));
    high = _mm_and_si128(_mm_srl_epi16(high, _mm_cvtsi32_si128(2 * (j % 4))), _mm_set1_epi8(0x03));
    return _mm512_cvtepu8_epi32(_mm_or_si128(low, _mm_slli_epi16(high, 4)));
  } else {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(group + (S * per_super + j) * kTileRows)));
  }
}

// 16 rows' fp16 super-factor of super-block S (d of the scales; -dmin of the mins).
template <int F>
inline __m512 compact_super16(const uint8_t* group, int64_t S, int64_t subs, int64_t supers) {
  const int64_t ints = F == kCompactU6 ? supers * kCompact6Bytes : subs * kTileRows;
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + ints + S * 2 * kTileRows)));
}

// A super-block's mins term in integers, sum_j m[n, j] * sums[t, j] over its 8 sub-blocks: the u6 m as 16-bit
// pairs (j, j + 1) in each row's lane, two sub-block sums a vpdpwssd (|sum| <= 32 * 127 fits 16 bits).
struct MinPairs {
  __m512i p[4];
  MinPairs() = default;
  MinPairs(const uint8_t* group, int64_t S) {
    for (int i = 0; i < 4; ++i)
      p[i] = _mm512_or_si512(compact_ints16<kCompactU6>(group, S, 2 * i, 8),
                             _mm512_slli_epi32(compact_ints16<kCompactU6>(group, S, 2 * i + 1, 8), 16));
  }
  __m512i sum(const int16_t* sums) const {  // the token's 8 sub-block sums of this super-block
    __m512i s = _mm512_setzero_si512();
    for (int i = 0; i < 4; ++i) s = _mm512_dpwssd_epi32(s, p[i], _mm512_set1_epi32(load32(sums + 2 * i)));
    return s;
  }
};

template <QuantKind KIND>
constexpr bool offset_rows(QuantKind k = KIND) { return k == QuantKind::Q6 || k == QuantKind::Q8Halves; }

// One group of 16 rows, T tokens from m0, on VNNI block dots: each sub-block's int32 sums (w + 128 for Q6 and
// Q8Halves, so 128 * sum(q) comes off) times the rows' integer factors, added up over the super-block.
template <QuantKind KIND, int F, int T>
void vnni_super_tile(const QuantLinearArgs& a, const SuperActs& x, int64_t g, int64_t m0, const Store& finish) {
  constexpr int kSub = halves(KIND) ? 2 : 1, kPerSuper = 8 * kSub;
  constexpr bool kMins = F == kCompactU6;
  const int64_t nb = a.w.k / 32, supers = x.supers, subs = x.subs;
  const uint8_t* scales = compact_group(Factors(F), a.w.scales, g, subs, supers);
  const uint8_t* mins = kMins ? compact_group(Factors(F), a.w.mins, g, nb, supers) : nullptr;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t S = 0; S < supers; ++S) {
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int jb = 0; jb < 8; ++jb) {
      const int64_t b = 8 * S + jb;
      prefetch_ahead<KIND>(a.w, g * nb + b);
      __m512i rows[8];
      block_rows<KIND>(a.w, nb, g, b, rows);
      for (int h = 0; h < kSub; ++h) {
        const __m512i sc = compact_ints16<F>(scales, S, kSub * jb + h, kPerSuper);
        for (int t = 0; t < T; ++t) {
          __m512i dot = _mm512_setzero_si512();
          if constexpr (offset_rows<KIND>()) dot = _mm512_set1_epi32(-128 * x.sums[(m0 + t) * subs + kSub * b + h]);
          for (int r = h * 8 / kSub; r < (h + 1) * 8 / kSub; ++r)
            dot = _mm512_dpbusd_epi32(dot, rows[r], _mm512_set1_epi32(load32(x.q + (m0 + t) * x.k + 32 * b + 4 * r)));
          isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot, sc));
        }
      }
    }
    const __m512 d = compact_super16<F>(scales, S, subs, supers);
    for (int t = 0; t < T; ++t) acc[t] = scaled_add(acc[t], isum[t], d, x.d[(m0 + t) * supers + S]);
    if constexpr (kMins) {
      const MinPairs pairs(mins, S);
      const __m512 dmin = compact_super16<F>(mins, S, nb, supers);
      for (int t = 0; t < T; ++t)
        acc[t] = scaled_add(acc[t], pairs.sum(x.sums + (m0 + t) * subs + 8 * S), dmin, x.d[(m0 + t) * supers + S]);
    }
  }
  for (int t = 0; t < T; ++t) finish(g, m0 + t, acc[t]);
}

template <QuantKind KIND, int F>
void vnni_super_groups(const QuantLinearArgs& a, const SuperActs& x, int64_t g0, int64_t g1, int64_t m0, int64_t m1,
                       const Store& finish) {
  for (int64_t g = g0; g < g1; ++g) {
    int64_t m = m0;
    for (; m + 4 <= m1; m += 4) vnni_super_tile<KIND, F, 4>(a, x, g, m, finish);
    switch (m1 - m) {
      case 3: vnni_super_tile<KIND, F, 3>(a, x, g, m, finish); break;
      case 2: vnni_super_tile<KIND, F, 2>(a, x, g, m, finish); break;
      case 1: vnni_super_tile<KIND, F, 1>(a, x, g, m, finish); break;
      default: break;
    }
  }
}

#if defined(LLMCHAT_HAS_AMX_INT8)
constexpr int64_t kStepBytes = 2 * 1024, kSuperPlaneBytes = 4 * kStepBytes;  // a K=64 step's lo and hi B tiles

// The B tiles of one K=64 step (blocks b and b + 1) of group g: each weight times its row's sub-block factor, a
// 16-bit product split as 256 hi + lo, lo as unsigned bytes (TDPBSUD) and hi as signed ones (TDPBSSD); 16 rows of
// 64 bytes each, in the block layout's order.
template <QuantKind KIND, int F>
inline void super_planes(const QuantWeightView& w, int64_t nb, int64_t g, int64_t b, const uint8_t* scales,
                         uint8_t* lo, uint8_t* hi) {
  constexpr int kSub = halves(KIND) ? 2 : 1, kPerSuper = 8 * kSub;
  constexpr __mmask64 kOdd = 0xAAAAAAAAAAAAAAAAull;
  for (int half = 0; half < 2; ++half) {
    const int64_t block = b + half;
    __m512i rows[8];
    block_rows<KIND, KIND == QuantKind::Q6>(w, nb, g, block, rows);  // Q6: w itself; Q8Halves: w + 128
    for (int h = 0; h < kSub; ++h) {
      const __m512i s = compact_ints16<F>(scales, block / 8, kSub * int(block % 8) + h, kPerSuper);
      const __m512i sc = _mm512_or_si512(_mm512_and_si512(s, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(s, 16));
      for (int r = h * 8 / kSub; r < (h + 1) * 8 / kSub; ++r) {
        __m512i even, odd;
        if constexpr (offset_rows<KIND>()) {
          const __m512i v = KIND == QuantKind::Q8Halves ? _mm512_xor_si512(rows[r], _mm512_set1_epi8(char(0x80))) : rows[r];
          even = _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8), odd = _mm512_srai_epi16(v, 8);
        } else {
          even = _mm512_and_si512(rows[r], _mm512_set1_epi16(0x00FF)), odd = _mm512_srli_epi16(rows[r], 8);
        }
        const __m512i pe = _mm512_mullo_epi16(even, sc), po = _mm512_mullo_epi16(odd, sc);
        _mm512_storeu_si512(lo + 64 * (8 * half + r), _mm512_mask_blend_epi8(kOdd, pe, _mm512_slli_epi16(po, 8)));
        _mm512_storeu_si512(hi + 64 * (8 * half + r), _mm512_mask_blend_epi8(kOdd, _mm512_srli_epi16(pe, 8), po));
      }
    }
  }
}

// Group g against tokens [m0, m0 + tokens) (whole tiles) on AMX, super-block by super-block and, within one, pair
// of token tiles by pair: per K=64 step and token tile, TDPBSUD of the lo bytes into C tile 4 + 2i and TDPBSSD of the
// hi bytes into 5 + 2i, accumulated over the super-block; their sums (lo + 256 hi) then take one float step into
// acc [tokens][16]. A super-block's B tiles (planes(S)) thus stay in L1 for every token tile. Each item's products
// go out before the one before it is folded, so the fold never waits for the tile stores it reads.
template <QuantKind KIND, int F, typename Planes>
void amx_super_group(const QuantLinearArgs& a, const SuperActs& x, int64_t g, int64_t m0, int64_t tokens,
                     Planes planes, float* acc, const Store& finish) {
  constexpr bool kMins = F == kCompactU6;
  const int64_t nb = a.w.k / 32, supers = x.supers, subs = x.subs, k = x.k;
  const int64_t tiles = tokens / kTileTokens, pairs = (tiles + 1) / 2;
  const uint8_t* scales = compact_group(Factors(F), a.w.scales, g, subs, supers);
  const uint8_t* mins = kMins ? compact_group(Factors(F), a.w.mins, g, nb, supers) : nullptr;
  alignas(64) int32_t sums[2][2][2][kTileTokens * kTileRows];  // [item & 1][token tile][lo, hi]
  std::memset(acc, 0, size_t(tokens * kTileRows) * sizeof(float));
  auto products = [&](int64_t item) {
    const int64_t S = item / pairs, m = item % pairs * 2 * kTileTokens;
    const bool two = m + kTileTokens < tokens;
    const uint8_t* p = planes(S);
    const int8_t* q0 = x.q + (m0 + m) * k + 256 * S;
    amx::zero<4>(), amx::zero<5>();
    if (two) amx::zero<6>(), amx::zero<7>();
    for (int step = 0; step < 4; ++step) {
      const int8_t* q = q0 + 64 * step;
      amx::load<0>(q, k);
      amx::load<2>(p + kStepBytes * step, 64);
      amx::load<3>(p + kStepBytes * step + kStepBytes / 2, 64);
      amx::dp_s8u8<4, 0, 2>(), amx::dp_s8s8<5, 0, 3>();
      if (two) {
        amx::load<1>(q + kTileTokens * k, k);
        amx::dp_s8u8<6, 1, 2>(), amx::dp_s8s8<7, 1, 3>();
      }
    }
    auto& c = sums[item & 1];
    amx::store<4>(c[0][0], 4 * kTileRows), amx::store<5>(c[0][1], 4 * kTileRows);
    if (two) amx::store<6>(c[1][0], 4 * kTileRows), amx::store<7>(c[1][1], 4 * kTileRows);
  };
  auto fold = [&](int64_t item) {
    const int64_t S = item / pairs, m = item % pairs * 2 * kTileTokens;
    const __m512 d = compact_super16<F>(scales, S, subs, supers);
    const MinPairs pairs_m = kMins ? MinPairs(mins, S) : MinPairs{};
    const __m512 dmin = kMins ? compact_super16<F>(mins, S, nb, supers) : d;
    auto& c = sums[item & 1];
    const int64_t n = std::min<int64_t>(2 * kTileTokens, tokens - m);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t token = m0 + m + t;
      const int32_t* lo = c[t / kTileTokens][0] + t % kTileTokens * kTileRows;
      const int32_t* hi = c[t / kTileTokens][1] + t % kTileTokens * kTileRows;
      const __m512i isum = _mm512_add_epi32(_mm512_load_si512(lo), _mm512_slli_epi32(_mm512_load_si512(hi), 8));
      const float da = x.d[token * supers + S];
      __m512 v = scaled_add(_mm512_loadu_ps(acc + (m + t) * kTileRows), isum, d, da);
      if constexpr (kMins) v = scaled_add(v, pairs_m.sum(x.sums + token * subs + 8 * S), dmin, da);
      _mm512_storeu_ps(acc + (m + t) * kTileRows, v);
    }
  };
  const int64_t items = supers * pairs;
  products(0);
  for (int64_t item = 0; item < items; ++item) {
    if (item + 1 < items) products(item + 1);
    fold(item);
  }
  for (int64_t t = 0; t < tokens; ++t) finish(g, m0 + t, _mm512_loadu_ps(acc + t * kTileRows));
}

// One token tile (16 tokens) against groups [g, g + NB) of a 4/5/6-bit kind on AMX, sub-block by sub-block as the
// per-32 path goes (B rows unpacked into a ring two blocks ahead; one K=32 (Q6: 16) product a sub-block and
// group), each sub-block's sums times the rows' integer factors added up in int32 over the super-block: the
// integers of amx_super_group's B planes, without making them, which for a lone token tile cost more than they save.
template <QuantKind KIND, int F, int NB>
void amx_super_subs(const QuantLinearArgs& a, const SuperActs& x, int64_t g, const Store& finish) {
  constexpr int kSub = halves(KIND) ? 2 : 1, kSubBytes = 32 / kSub, kB = kSubBytes * kTileRows, kPerSuper = 8 * kSub;
  constexpr bool kMins = F == kCompactU6;
  const int64_t nb = a.w.k / 32, supers = x.supers, subs = x.subs, k = x.k;
  alignas(64) int32_t isum[NB][kTileTokens][kTileRows];
  alignas(64) float acc[NB][kTileTokens][kTileRows];
  alignas(64) int32_t sums[2][3][kTileTokens * kTileRows];
  alignas(64) uint8_t ring[4][NB][512];
  std::memset(acc, 0, sizeof acc);
  const uint8_t* scales[NB];
  const uint8_t* mins[NB];
  for (int j = 0; j < NB; ++j) {
    scales[j] = compact_group(Factors(F), a.w.scales, g + j, subs, supers);
    mins[j] = kMins ? compact_group(Factors(F), a.w.mins, g + j, nb, supers) : nullptr;
  }
  auto unpack = [&](int64_t b) {
    for (int j = 0; j < NB; ++j) {
      prefetch_ahead<KIND>(a.w, (g + j) * nb + b);
      __m512i rows[8];
      block_rows<KIND, true>(a.w, nb, g + j, b, rows);  // the weights themselves (compact: no min_offset)
      for (int r = 0; r < 8; ++r) _mm512_store_si512(ring[b & 3][j] + 64 * r, rows[r]);
    }
  };
  auto products = [&](int64_t s) {
    const uint8_t* ws[3] = {};
    for (int j = 0; j < NB; ++j) ws[j] = ring[(s / kSub) & 3][j] + (s % kSub) * kB;
    const int8_t* qs[2] = {x.q + s * kSubBytes, nullptr};
    tile_products<true, 1, 3, 1, NB>(qs, k, ws, sums[s & 1]);
  };
  unpack(0);
  if (nb > 1) unpack(1);
  products(0);
  for (int64_t s = 0; s < subs; ++s) {
    if (s % kSub == 0 && s / kSub + 2 < nb) unpack(s / kSub + 2);
    if (s + 1 < subs) products(s + 1);
    const int64_t S = s / kPerSuper;
    const int j = int(s % kPerSuper);
    for (int gi = 0; gi < NB; ++gi) {
      const __m512i sc = compact_ints16<F>(scales[gi], S, j, kPerSuper);
      const int32_t* c = sums[s & 1][gi];
#pragma GCC unroll 4
      for (int t = 0; t < kTileTokens; ++t) {
        const __m512i p = _mm512_mullo_epi32(_mm512_load_si512(c + t * kTileRows), sc);
        _mm512_store_si512(isum[gi][t], j == 0 ? p : _mm512_add_epi32(_mm512_load_si512(isum[gi][t]), p));
      }
      if (j + 1 < kPerSuper) continue;
      const __m512 d = compact_super16<F>(scales[gi], S, subs, supers);
      const MinPairs pairs = kMins ? MinPairs(mins[gi], S) : MinPairs{};
      const __m512 dmin = kMins ? compact_super16<F>(mins[gi], S, nb, supers) : d;
      for (int t = 0; t < kTileTokens; ++t) {
        const float da = x.d[t * supers + S];
        __m512 v = scaled_add(_mm512_load_ps(acc[gi][t]), _mm512_load_si512(isum[gi][t]), d, da);
        if constexpr (kMins) v = scaled_add(v, pairs.sum(x.sums + t * subs + 8 * S), dmin, da);
        _mm512_store_ps(acc[gi][t], v);
      }
    }
  }
  for (int gi = 0; gi < NB; ++gi)
    for (int t = 0; t < kTileTokens; ++t) finish(g + gi, t, _mm512_load_ps(acc[gi][t]));
}

template <QuantKind KIND, int F>
void amx_super_tile(const QuantLinearArgs& a, const SuperActs& x, int64_t g0, int64_t g1, const Store& finish) {
  amx::configure(int8_tiles<1, 3>(halves(KIND) ? 16 : 32));  // per task: tile state belongs to the thread
  int64_t g = g0;
  for (; g + 3 <= g1; g += 3) amx_super_subs<KIND, F, 3>(a, x, g, finish);
  if (g1 - g == 2) amx_super_subs<KIND, F, 2>(a, x, g, finish);
  if (g1 - g == 1) amx_super_subs<KIND, F, 1>(a, x, g, finish);
  amx::release();
}

// Groups [g0, g1) x tokens [0, tokens) (whole tiles), a run of token pairs at a time whose activations (about
// kSuperActBytes) stay in L2 for every group: each group's B planes are made once a run. Each super-block's B
// tiles are made two super-blocks ahead of its products, into a ring of three that stays in L1 (AMX's tile loads
// wait for vector stores to reach L1).
#if !defined(LLMCHAT_SUPER_ACT_BYTES)
#define LLMCHAT_SUPER_ACT_BYTES (1 << 20)  // (the quant driver's emulated-AMX build makes it small: several runs)
#endif
constexpr int64_t kSuperActBytes = LLMCHAT_SUPER_ACT_BYTES;
template <QuantKind KIND, int F>
void amx_super_groups(const QuantLinearArgs& a, const SuperActs& x, int64_t g0, int64_t g1, int64_t tokens,
                      const Store& finish) {
  const int64_t nb = a.w.k / 32, supers = x.supers;
  amx::configure(amx::full_tiles());  // per task: tile state belongs to the thread
  thread_local std::vector<uint8_t> planes;  // the workers' own: no allocation per call
  thread_local std::vector<float> acc;
  const int64_t run = std::max<int64_t>(2, kSuperActBytes / (2 * kTileTokens * a.w.k)) * 2 * kTileTokens;
  planes.resize(size_t(3 * kSuperPlaneBytes)), acc.resize(size_t(std::min(run, tokens) * kTileRows));
  for (int64_t m0 = 0; m0 < tokens; m0 += run)
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* scales = compact_group(Factors(F), a.w.scales, g, x.subs, supers);
      auto ring = [&](int64_t S) { return planes.data() + S % 3 * kSuperPlaneBytes; };
      auto make = [&](int64_t S) {
        for (int step = 0; step < 4; ++step)
          super_planes<KIND, F>(a.w, nb, g, 8 * S + 2 * step, scales, ring(S) + kStepBytes * step,
                                ring(S) + kStepBytes * step + kStepBytes / 2);
      };
      for (int64_t S = 0; S < std::min<int64_t>(2, supers); ++S) make(S);
      // (called once per item; a super-block's first item makes the planes two ahead)
      int64_t made = std::min<int64_t>(2, supers);
      auto planes_of = [&](int64_t S) -> const uint8_t* {
        if (S + 2 < supers && made == S + 2) make(S + 2), ++made;
        return ring(S);
      };
      amx_super_group<KIND, F>(a, x, g, m0, std::min(run, tokens - m0), planes_of, acc.data(), finish);
    }
  amx::release();
}
#endif

template <QuantKind KIND, int F>
void run_super(const QuantLinearArgs& a, const SuperActs& x, const Runtime& rt) {
  const int64_t groups = a.w.n / kTileRows;
  const Store finish{a};
  const int64_t tile_tokens = amx_tokens(a);  // may pass a.m: the activations are padded so far with zeros
  const int64_t per_thread = (groups + rt.num_threads - 1) / std::max(1, rt.num_threads);
  const int64_t work = std::max<int64_t>(1, a.w.k * kTileRows * a.m);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(per_thread, kMinChunkMacs / work));
  rt.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
#if defined(LLMCHAT_HAS_AMX_INT8)
    if constexpr (unpacked_rows(KIND)) {  // (Q8Halves, which x86 never holds compact, takes the planes)
      if (tile_tokens == kTileTokens) amx_super_tile<KIND, F>(a, x, g0, g1, finish);
      else if (tile_tokens > 0) amx_super_groups<KIND, F>(a, x, g0, g1, tile_tokens, finish);
    } else if (tile_tokens > 0) {
      amx_super_groups<KIND, F>(a, x, g0, g1, tile_tokens, finish);
    }
#endif
    if (tile_tokens < a.m) vnni_super_groups<KIND, F>(a, x, g0, g1, tile_tokens, a.m, finish);
  });
}

// Activations per super-block of 256 (quant_tiles.h): the steps of quantize_block (an exact max, one division,
// x * inv rounded half to even by the conversion, a clamp) over 256 elements, and the sums of q over each
// sub-block of `sub` (16 or 32) elements.
inline void quantize_super(DType dt, const char* x, int64_t k, int sub, int8_t* q, float* d, int16_t* sums) {
  const int size = dtype_size(dt);
  for (int64_t S = 0; S < k / 256; ++S) {
    __m512 v[16], top = _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i) v[i] = load16(dt, x + (256 * S + 16 * i) * size), top = _mm512_max_ps(top, _mm512_abs_ps(v[i]));
    const float amax = _mm512_reduce_max_ps(top);
    const float scale = amax / 127.f, inv = scale != 0.f ? 1.f / scale : 0.f;
    d[S] = scale;
    for (int i = 0; i < 16; ++i) {
      const __m512i qi = _mm512_min_epi32(_mm512_set1_epi32(127), _mm512_max_epi32(_mm512_set1_epi32(-127),
                                          _mm512_cvtps_epi32(_mm512_mul_ps(v[i], _mm512_set1_ps(inv)))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 256 * S + 16 * i), _mm512_cvtepi32_epi8(qi));
      const int32_t s = _mm512_reduce_add_epi32(qi);
      if (sub == 16) sums[16 * S + i] = int16_t(s);
      else if (i % 2 == 0) sums[8 * S + i / 2] = int16_t(s);
      else sums[8 * S + i / 2] = int16_t(sums[8 * S + i / 2] + s);
    }
  }
}

void super_linear(const QuantLinearArgs& a, const Runtime& rt) {
  const int64_t supers = a.w.k / 256, sub = halves(a.w.kind) ? 16 : 32, subs = a.w.k / sub;
  const int64_t rows = std::max(a.m, amx_tokens(a));  // past a.m, zero tokens pad the last AMX tile
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d;
  thread_local std::vector<int16_t> sums;
  q.assign(size_t(rows * a.w.k), 0), d.assign(size_t(rows * supers), 0.f), sums.assign(size_t(rows * subs), 0);
  int8_t* qs = q.data();  // (thread_local: the workers see their own vectors under these names)
  float* ds = d.data();
  int16_t* ss = sums.data();
  rt.parallel_for(a.m, grain_for(a.w.k), [&](int64_t m0, int64_t m1) {
    for (int64_t t = m0; t < m1; ++t)
      quantize_super(a.dtype, static_cast<const char*>(a.x) + t * a.x_stride * dtype_size(a.dtype), a.w.k, int(sub),
                     qs + t * a.w.k, ds + t * supers, ss + t * subs);
  });
  const SuperActs x{qs, ds, ss, a.w.k, supers, subs};
  switch (a.w.kind) {
    case QuantKind::Q4: return run_super<QuantKind::Q4, kCompactU6>(a, x, rt);
    case QuantKind::Q5: return run_super<QuantKind::Q5, kCompactU6>(a, x, rt);
    case QuantKind::Q6: return run_super<QuantKind::Q6, kCompactI8>(a, x, rt);
    case QuantKind::Q8Halves: return run_super<QuantKind::Q8Halves, kCompactI8>(a, x, rt);
    case QuantKind::Q8: return;  // no compact factors (the binding checks)
  }
}

// 16-bit activations of one block (quant_tiles.h): the same steps as the 8-bit quantize_block of
// quant_linear.cpp (an exact max, one division, x * inv rounded half to even by the conversion, a clamp).
inline void quantize_block_wide(DType dt, const char* xb, int8_t* lo, int8_t* hi, float* d, int32_t* offset) {
  const __m512 v0 = load16(dt, xb), v1 = load16(dt, xb + 16 * dtype_size(dt));
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float scale = amax / 32639.f, inv = scale != 0.f ? 1.f / scale : 0.f;
  __m512i sum = _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h) {
    const __m512i q = _mm512_min_epi32(_mm512_set1_epi32(32639), _mm512_max_epi32(_mm512_set1_epi32(-32639),
                                       _mm512_cvtps_epi32(_mm512_mul_ps(h ? v1 : v0, _mm512_set1_ps(inv)))));
    const __m512i high = _mm512_srai_epi32(_mm512_add_epi32(q, _mm512_set1_epi32(128)), 8);  // lo in [-128, 127]
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + 16 * h), _mm512_cvtepi32_epi8(high));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + 16 * h), _mm512_cvtepi32_epi8(_mm512_sub_epi32(q, _mm512_slli_epi32(high, 8))));
    sum = _mm512_add_epi32(sum, q);
  }
  *d = scale, *offset = 128 * _mm512_reduce_add_epi32(sum);
}

}  // namespace

void quantize_activations_wide(DType dt, const void* x, int64_t x_stride, int64_t m, int64_t k, int8_t* lo,
                               int8_t* hi, float* d, int32_t* offsets, const Runtime& rt) {
  const int64_t nb = k / 32, size = dtype_size(dt);
  rt.parallel_for(m, grain_for(k), [&](int64_t m0, int64_t m1) {
    for (int64_t t = m0; t < m1; ++t)
      for (int64_t b = 0; b < nb; ++b)
        quantize_block_wide(dt, static_cast<const char*>(x) + (t * x_stride + 32 * b) * size, lo + t * k + 32 * b,
                            hi + t * k + 32 * b, d + t * nb + b, offsets + t * nb + b);
  });
}

bool quant_tiles_compiled() { return true; }

const char* quant_tiles_isa() {
#if defined(LLMCHAT_HAS_AMX_INT8)
  static const bool amx = amx_int8_granted();
#if defined(LLMCHAT_AMX_EMULATED)
  if (amx) return "avx512+vnni+amx (emulated)";
#else
  if (amx) return "avx512+vnni+amx";
#endif
#endif
  return "avx512+vnni";
}

void quant_tiles_linear(const QuantLinearArgs& a, const Runtime& rt) {
  if (a.m <= 0 || a.w.n <= 0) return;
  if (a.w.compact_factors) return super_linear(a, rt);  // K-quants: whole super-blocks in integers
  const int64_t nb = a.w.k / 32;
  // rows for every token an AMX tile reads: past a.m, zero tokens (zero bytes and factors) pad the last tile
  const int64_t rows = std::max(a.m, amx_tokens(a));
  auto padded = [&](auto& v, int64_t per_token) {
    v.resize(size_t(rows * per_token));
    std::fill(v.begin() + a.m * per_token, v.end(), 0);
  };
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, dsum;
  thread_local std::vector<int32_t> offsets;
  padded(q, a.w.k), padded(d, nb);
  if (a.w.wide_activations) {  // Q8 only (checked by the binding): no mins, offsets from the quantization
    thread_local std::vector<int8_t> q_high;
    padded(q_high, a.w.k), padded(offsets, nb);
    quantize_activations_wide(a.dtype, a.x, a.x_stride, a.m, a.w.k, q.data(), q_high.data(), d.data(), offsets.data(), rt);
    // dsum is read only with stored mins, which Q8 has not
    const Acts x{q.data(), d.data(), d.data(), offsets.data(), a.w.k, nb, q_high.data()};
    return a.w.half_factors ? run<QuantKind::Q8, kF16>(a, x, rt) : run<QuantKind::Q8, kF32>(a, x, rt);
  }
  padded(dsum, nb);
  quantize_activations(a.dtype, a.x, a.x_stride, a.m, a.w.k, q.data(), d.data(), dsum.data(), rt);
  // 128 for the 8-bit kinds (stored as w + 128), -min_offset for the 4/5-bit kinds whose min is one (Q4_0: 8)
  const bool eight_bit = !nibbles(a.w.kind);  // Q6 too: its rows are unpacked to w + 128
  const int32_t offset = eight_bit ? 128 : a.w.mins == nullptr ? -a.w.min_offset : 0;
  if (offset != 0) {
    const int size = halves(a.w.kind) ? 16 : 32;
    const int64_t per_token = a.w.k / size;
    padded(offsets, per_token);
    const int8_t* qs = q.data();  // (thread_local: the workers see their own vectors under these names)
    int32_t* sums = offsets.data();
    rt.parallel_for(a.m, grain_for(a.w.k), [&](int64_t m0, int64_t m1) {
      for (int64_t i = m0 * per_token; i < m1 * per_token; ++i) {
        int32_t sum = 0;
        for (int j = 0; j < size; ++j) sum += qs[i * size + j];
        sums[i] = offset * sum;
      }
    });
  }
  const Acts x{q.data(), d.data(), dsum.data(), offset != 0 ? offsets.data() : nullptr, a.w.k, nb};
  const bool half = a.w.half_factors;  // compact factors took super_linear above
  switch (a.w.kind) {
    case QuantKind::Q8: return half ? run<QuantKind::Q8, kF16>(a, x, rt) : run<QuantKind::Q8, kF32>(a, x, rt);
    case QuantKind::Q8Halves: return half ? run<QuantKind::Q8Halves, kF16>(a, x, rt) : run<QuantKind::Q8Halves, kF32>(a, x, rt);
    case QuantKind::Q4: return half ? run<QuantKind::Q4, kF16>(a, x, rt) : run<QuantKind::Q4, kF32>(a, x, rt);
    case QuantKind::Q5: return half ? run<QuantKind::Q5, kF16>(a, x, rt) : run<QuantKind::Q5, kF32>(a, x, rt);
    case QuantKind::Q6: return half ? run<QuantKind::Q6, kF16>(a, x, rt) : run<QuantKind::Q6, kF32>(a, x, rt);
  }
}

#else  // no AVX512-VNNI in this build: weights stay in the row layout

bool quant_tiles_compiled() { return false; }
const char* quant_tiles_isa() { return ""; }
void quant_tiles_linear(const QuantLinearArgs&, const Runtime&) {}
void quantize_activations_wide(DType, const void*, int64_t, int64_t, int64_t, int8_t*, int8_t*, float*, int32_t*,
                               const Runtime&) {}

#endif

// Element e of row n's block b, unsigned as stored, and the factors' index: from the layout of quant_tiles.h.
void quant_tiles_rows(const QuantWeightView& w, const int64_t* ids, int64_t num_ids, DType dt, void* out,
                      int64_t out_stride, const Runtime& rt) {
  const int64_t K = w.k, nb = K / 32;
  const bool four = w.kind == QuantKind::Q4 || w.kind == QuantKind::Q5, six = w.kind == QuantKind::Q6;
  const bool eight_bit = !four;
  const bool signed_factors = w.kind == QuantKind::Q8Halves || six;
  const int sub = signed_factors ? 2 : 1;
  const int64_t supers = K / 256;
  const Factors store = factors_of(w);
  auto factor = [&](const void* p, int64_t g, int64_t s, int64_t subs, int64_t n) {
    return tile_factor(store, p, g, s, subs, supers, n);
  };
  rt.parallel_for(num_ids, grain_for(K), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = ids[i] / kTileRows, n = ids[i] % kTileRows;
      dispatch_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        T* o = static_cast<T*>(out) + i * out_stride;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = static_cast<const uint8_t*>(w.values) + (g * nb + b) * (four || six ? 256 : 512);
          for (int e = 0; e < 32; ++e) {
            const int r = e % 16 / 4, j = e % 4;
            int q;
            if (six) {
              const uint8_t byte = blk[64 * r + 4 * n + j];
              const uint64_t* masks = reinterpret_cast<const uint64_t*>(w.high) + (g * nb + b) * 16;
              const int bit = 4 * n + j, word = e / 4;  // B row of element e: e / 4 (rows 4..7 the high nibbles)
              q = (e < 16 ? byte & 15 : byte >> 4) | int((masks[word] >> bit) & 1) << 4 |
                  int((masks[8 + word] >> bit) & 1) << 5;
              q -= 32;
            } else if (four) {
              const uint8_t byte = blk[64 * r + 4 * n + j];
              q = e < 16 ? byte & 15 : byte >> 4;
              if (w.kind == QuantKind::Q5) {
                const uint64_t mask = reinterpret_cast<const uint64_t*>(w.high)[(g * nb + b) * 8 + e / 4];
                q |= int((mask >> (4 * n + j)) & 1) << 4;
              }
            } else {
              q = int(blk[64 * (e / 4) + 4 * n + j]) - 128;
            }
            const float s = factor(w.scales, g, sub * b + (sub == 2 ? e / 16 : 0), sub * nb, n);
            float value = s * float(q);  // two roundings, as numpy does it: never one fused multiply-add
            if (w.mins != nullptr) value = value + factor(w.mins, g, b, nb, n);
            else if (!eight_bit && w.min_offset != 0) value = value + float(w.min_offset) * s;
            o[32 * b + e] = from_float<T>(value);
          }
        }
      });
    }
  });
}

}  // namespace llmchat
