// What the x86 tile layout's two kernels share: quant_tiles.cpp (every kind, a float step per block) and
// quant_tiles_super.cpp (K-quants with compact factors, whole super-blocks in integers). The layout's B rows in
// registers, prefetch, outputs, and the AMX tiles' setup. Included by those two sources only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../vec/amx_tiles.h"
#include "../vec/vec.h"
#include "amx_linear.h"
#include "quant_tiles.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)
#define LLMCHAT_QUANT_TILES 1
#include <cpuid.h>
#include <immintrin.h>
#endif

// Only the fused multiply-adds written below: an output's float operations must be the same in every path.
#include "exact_float.h"

#if defined(LLMCHAT_QUANT_TILES)
namespace llmchat::x86_tiles {

constexpr bool nibbles(QuantKind k) { return k == QuantKind::Q4 || k == QuantKind::Q5; }
constexpr bool halves(QuantKind k) { return k == QuantKind::Q8Halves || k == QuantKind::Q6; }
// Q6 is Q8Halves held in 6 bits: its B rows are unpacked to the same bytes (w + 128) as it is read.
constexpr bool unpacked_rows(QuantKind k) { return nibbles(k) || k == QuantKind::Q6; }
constexpr int64_t block_bytes(QuantKind k) { return unpacked_rows(k) ? 256 : 512; }

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

#if defined(LLMCHAT_HAS_AMX_INT8)
inline bool amx_int8_granted() {
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

#endif

// Tokens past the last whole tile from which one AMX tile padded with zero tokens costs less than their VNNI dots
// (a [8960, 1536] weight, 2 threads, a Xeon with AMX: Q4_K's tile 0.62 ms, 6 tokens' dots 0.40; Q5_K's tile pays
// from 7 tokens too; Q6_K's tile 0.90, 5 tokens' dots 0.81, 6 0.96; with per-32 factors, Q4_0's and Q8_0's from
// 10, Q6's from 13). Speculation's verification rows and a few sessions' decode land there.
inline int64_t amx_pad_from(const QuantLinearArgs& a) {
  switch (a.w.kind) {
    case QuantKind::Q4: return a.w.mins != nullptr ? 7 : 10;
    case QuantKind::Q5: return 7;
    case QuantKind::Q6: return a.w.compact_factors ? 6 : 13;  // Q6_K's super-blocks: 5 tokens' dots 0.81 ms, 6 0.96, the tile 0.90
    default: return 10;
  }
}

// Tokens [0, amx_tokens) run on AMX tiles, the rest on VNNI dots; past a.m, zero tokens pad the last tile.
inline int64_t amx_tokens(const QuantLinearArgs& a) {
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

// body(g0, g1) on the worker pool over the weight's 16-row groups: a task owns whole groups and runs every token
// against them, so each weight byte is read once per call.
template <typename Body>
inline void for_groups(const QuantLinearArgs& a, const Runtime& rt, Body body) {
  const int64_t groups = a.w.n / kTileRows;
  const int64_t per_thread = (groups + rt.num_threads - 1) / std::max(1, rt.num_threads);
  const int64_t work = std::max<int64_t>(1, a.w.k * kTileRows * a.m);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(per_thread, kMinChunkMacs / work));
  rt.parallel_for(groups, grain, body);
}

// K-quants with compact factors (quant_tiles_super.cpp): out = x @ W^T (+ bias) by quant_tiles.h's super-block math.
void super_linear(const QuantLinearArgs& a, const Runtime& rt);

}  // namespace llmchat::x86_tiles
#endif
