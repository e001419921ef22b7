// K-quants with compact factors on the x86 tile layout (quant_tiles.h): whole super-blocks of 256 in integers,
// activations quantized per super-block, one float step per super-block. VNNI block dots for a few tokens; AMX
// tiles for whole tiles of 16, the rows' factors multiplied in int32 (one tile) or into the weights' bytes (more).
#include <algorithm>
#include <cstring>
#include <vector>

#include "dispatch.h"
#include "tile_factors.h"
#include "quant_tiles_x86.h"  // (last: its exact_float.h governs everything below)

namespace llmchat {

#if defined(LLMCHAT_QUANT_TILES)
namespace x86_tiles {
namespace {

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
  const Store finish{a};
  const int64_t tile_tokens = amx_tokens(a);  // may pass a.m: the activations are padded so far with zeros
  for_groups(a, rt, [&](int64_t g0, int64_t g1) {
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

}  // namespace

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

}  // namespace x86_tiles
#endif

}  // namespace llmchat
