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

#include "quant_tiles_x86.h"  // (last: its exact_float.h governs everything below)

namespace llmchat {

#if defined(LLMCHAT_QUANT_TILES)
namespace {
using namespace x86_tiles;

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

template <QuantKind KIND, int HALF>
void run(const QuantLinearArgs& a, const Acts& x, const Runtime& rt) {
  const Store finish{a};
  const int64_t tile_tokens = amx_tokens(a);  // may pass a.m: the activations are padded so far with zeros
  for_groups(a, rt, [&](int64_t g0, int64_t g1) {
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
