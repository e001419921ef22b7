// Quantized linear on the 16-row tile layout (see quant_tiles.h). A task owns whole groups of 16 weight rows
// and runs every token against them, so each weight byte is read once per call: whole tiles of 16 tokens on
// AMX (where the OS grants the tiles), the rest (and everything elsewhere) as VNNI block dots, G groups x T
// tokens a register tile. Both produce each block's exact int32 sum, then the same float operations.
#include "quant_tiles.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "../vec/amx_tiles.h"
#include "../vec/vec.h"
#include "amx_linear.h"
#include "dispatch.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)
#define LLMCHAT_QUANT_TILES 1
#include <cpuid.h>
#include <immintrin.h>
#endif

// Only the fused multiply-adds written below: an output's float operations must be the same in every path.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace llmchat {

#if defined(LLMCHAT_QUANT_TILES)
namespace {

constexpr bool nibbles(QuantKind k) { return k == QuantKind::Q4 || k == QuantKind::Q5; }
constexpr bool halves(QuantKind k) { return k == QuantKind::Q8Halves; }
constexpr int64_t block_bytes(QuantKind k) { return nibbles(k) ? 256 : 512; }

// Quantized activations in plain order: q [M, K], d and dsum [M, nb]; for the 8-bit kinds, offsets [M, subs]:
// 128 * sum(q) over each block (Q8Halves: each half), what the +128 of the stored weights adds to a sum.
struct Acts {
  const int8_t* q;
  const float *d, *dsum;
  const int32_t* offsets;
  int64_t k, nb;
};

template <bool HALF>
inline __m512 factors16(const void* p, int64_t at) {  // 16 per-row factors from index at
  if constexpr (HALF) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + at)));
  else return _mm512_loadu_ps(static_cast<const float*>(p) + at);
}

// The 8 B rows (u8 weights, 16 rows x 4 elements each) of group g, block b.
template <QuantKind KIND>
inline void block_rows(const QuantWeightView& w, int64_t nb, int64_t g, int64_t b, __m512i rows[8]) {
  const uint8_t* p = static_cast<const uint8_t*>(w.values) + (g * nb + b) * block_bytes(KIND);
  if constexpr (nibbles(KIND)) {
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
  } else {
    for (int r = 0; r < 8; ++r) rows[r] = _mm512_loadu_si512(p + 64 * r);
  }
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

// The mins' share (4/5-bit kinds) of 16 rows of group g for token m, then out = acc + mins (+ bias), stored.
template <QuantKind KIND, bool HALF>
struct Finish {
  const QuantLinearArgs& a;
  const Acts& x;
  int64_t nb;

  // The min of 16 rows at factor index `at`: stored, or min_offset * scale (exact: a power of two times it).
  __m512 min16(int64_t at) const {
    if (a.w.mins != nullptr) return factors16<HALF>(a.w.mins, at);
    return _mm512_mul_ps(_mm512_set1_ps(float(a.w.min_offset)), factors16<HALF>(a.w.scales, at));
  }
  void operator()(int64_t g, int64_t m, __m512 acc) const {
    __m512 mins = _mm512_setzero_ps();
    if (nibbles(KIND) && (a.w.mins != nullptr || a.w.min_offset != 0)) {
      const float* ds = x.dsum + m * nb;
      for (int64_t b = 0; b < nb; ++b) mins = _mm512_fmadd_ps(min16((g * nb + b) * kTileRows), _mm512_set1_ps(ds[b]), mins);
    }
    alignas(64) float v[kTileRows];
    _mm512_store_ps(v, _mm512_add_ps(acc, mins));
    dispatch_dtype(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* bias = static_cast<const T*>(a.bias);
      T* out = static_cast<T*>(a.out) + m * a.out_stride + g * kTileRows;
      for (int n = 0; n < kTileRows; ++n) {
        float r = v[n];
        if (bias) r = r + to_float(bias[g * kTileRows + n]);
        out[n] = from_float<T>(r);
      }
    });
  }
};

// G groups x T tokens from (g0, m0) on VNNI block dots: per block, 8 vpdpbusd a group and token give the
// block's int32 sums of 16 rows in the lanes (the 8-bit kinds' start from -offset, so they come out signed).
template <QuantKind KIND, bool HALF, int G, int T>
void vnni_tile(const QuantLinearArgs& a, const Acts& x, int64_t g0, int64_t m0, const Finish<KIND, HALF>& finish) {
  constexpr int kSub = halves(KIND) ? 2 : 1;
  const int64_t nb = x.nb;
  __m512 acc[G][T];
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < T; ++t) acc[g][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    for (int g = 0; g < G; ++g) {
      __m512i rows[8];
      block_rows<KIND>(a.w, nb, g0 + g, b, rows);
      __m512i isum[T][kSub];
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < kSub; ++h)
          isum[t][h] = nibbles(KIND) ? _mm512_setzero_si512() : _mm512_set1_epi32(-x.offsets[(m0 + t) * kSub * nb + kSub * b + h]);
      for (int r = 0; r < 8; ++r)
        for (int t = 0; t < T; ++t) {
          const __m512i act = _mm512_set1_epi32(four_bytes(x.q + (m0 + t) * x.k + 32 * b + 4 * r));
          isum[t][r / (8 / kSub)] = _mm512_dpbusd_epi32(isum[t][r / (8 / kSub)], rows[r], act);
        }
      for (int h = 0; h < kSub; ++h) {
        const __m512 scale = factors16<HALF>(a.w.scales, ((g0 + g) * kSub * nb + kSub * b + h) * kTileRows);
        for (int t = 0; t < T; ++t) acc[g][t] = scaled_add(acc[g][t], isum[t][h], scale, x.d[(m0 + t) * nb + b]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < T; ++t) finish(g0 + g, m0 + t, acc[g][t]);
}

template <QuantKind KIND, bool HALF, int G>
void vnni_tokens(const QuantLinearArgs& a, const Acts& x, int64_t g0, int64_t m0, int64_t m1,
                 const Finish<KIND, HALF>& finish) {
  int64_t m = m0;
  for (; m + 4 <= m1; m += 4) vnni_tile<KIND, HALF, G, 4>(a, x, g0, m, finish);
  switch (m1 - m) {
    case 3: return vnni_tile<KIND, HALF, G, 3>(a, x, g0, m, finish);
    case 2: return vnni_tile<KIND, HALF, G, 2>(a, x, g0, m, finish);
    case 1: return vnni_tile<KIND, HALF, G, 1>(a, x, g0, m, finish);
    default: return;
  }
}

// Groups [g0, g1) against tokens [m0, m1): a lone token takes 4 groups at once (more rows share each
// activation load), more tokens 2 groups (the weight rows are reused across the tile's tokens).
template <QuantKind KIND, bool HALF>
void vnni_groups(const QuantLinearArgs& a, const Acts& x, int64_t g0, int64_t g1, int64_t m0, int64_t m1,
                 const Finish<KIND, HALF>& finish) {
  int64_t g = g0;
  if (m1 - m0 == 1) {
    for (; g + 4 <= g1; g += 4) vnni_tokens<KIND, HALF, 4>(a, x, g, m0, m1, finish);
  } else {
    for (; g + 2 <= g1; g += 2) vnni_tokens<KIND, HALF, 2>(a, x, g, m0, m1, finish);
  }
  for (; g < g1; ++g) vnni_tokens<KIND, HALF, 1>(a, x, g, m0, m1, finish);
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

// Tiles: A0 = 0, B0 = 1, C0 = 2 and A1 = 3, B1 = 4, C1 = 5 (two sub-blocks in flight). A sub-block is a block,
// or a Q8Halves half: A 16 tokens x 32 (16) bytes, B 8 (4) rows x 64 bytes, C 16 x 16 int32.
inline amx::TileConfig int8_tiles(int sub_bytes) {
  amx::TileConfig cfg = amx::full_tiles();
  for (int t : {0, 3}) cfg.colsb[t] = uint16_t(sub_bytes);
  for (int t : {1, 4}) cfg.rows[t] = uint8_t(sub_bytes / 4);
  return cfg;
}

// Whole 16-token tiles [m0, m1) of group g on TDPBSUD. `weights`: the group's B rows, unpacked for the 4/5-bit
// kinds (512 bytes a block).
template <QuantKind KIND, bool HALF>
void amx_group(const Acts& x, const QuantLinearArgs& a, int64_t g, const uint8_t* weights, int64_t m0, int64_t m1,
               const Finish<KIND, HALF>& finish) {
  constexpr int kSub = halves(KIND) ? 2 : 1, kSubBytes = 32 / kSub;
  const int64_t nb = x.nb, subs = kSub * nb;
  alignas(64) int32_t c0[kTileTokens * kTileRows], c1[kTileTokens * kTileRows];
  for (int64_t m = m0; m < m1; m += kTileTokens) {
    __m512 acc[kTileTokens];
    for (int t = 0; t < kTileTokens; ++t) acc[t] = _mm512_setzero_ps();
    auto fold = [&](const int32_t* c, int64_t s) {
      const __m512 scale = factors16<HALF>(a.w.scales, (g * subs + s) * kTileRows);
      const float* d = x.d + m * nb + s / kSub;
      for (int t = 0; t < kTileTokens; ++t) {
        __m512i isum = _mm512_load_si512(c + t * kTileRows);
        if constexpr (!nibbles(KIND)) isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(x.offsets[(m + t) * subs + s]));
        acc[t] = scaled_add(acc[t], isum, scale, d[t * nb]);
      }
    };
    const int8_t* q = x.q + m * x.k;
    int64_t s = 0;
    for (; s + 2 <= subs; s += 2) {
      amx::load<0>(q + s * kSubBytes, x.k), amx::load<1>(weights + s * kSubBytes * kTileRows, 64);
      amx::load<3>(q + (s + 1) * kSubBytes, x.k), amx::load<4>(weights + (s + 1) * kSubBytes * kTileRows, 64);
      amx::zero<2>(), amx::zero<5>();
      amx::dp_s8u8<2, 0, 1>(), amx::dp_s8u8<5, 3, 4>();
      amx::store<2>(c0, 4 * kTileRows), amx::store<5>(c1, 4 * kTileRows);
      fold(c0, s), fold(c1, s + 1);
    }
    if (s < subs) {
      amx::load<0>(q + s * kSubBytes, x.k), amx::load<1>(weights + s * kSubBytes * kTileRows, 64);
      amx::zero<2>();
      amx::dp_s8u8<2, 0, 1>();
      amx::store<2>(c0, 4 * kTileRows);
      fold(c0, s);
    }
    for (int t = 0; t < kTileTokens; ++t) finish(g, m + t, acc[t]);
  }
}
#endif

template <QuantKind KIND, bool HALF>
void run(const QuantLinearArgs& a, const Acts& x, const Runtime& rt) {
  const int64_t nb = x.nb, groups = a.w.n / kTileRows;
  const Finish<KIND, HALF> finish{a, x, nb};
  int64_t tile_tokens = 0;  // tokens [0, tile_tokens) on AMX tiles
#if defined(LLMCHAT_HAS_AMX_INT8)
  static const bool amx = amx_int8_granted();
  if (amx) tile_tokens = a.m / kTileTokens * kTileTokens;
#endif
  const int64_t per_thread = (groups + rt.num_threads - 1) / std::max(1, rt.num_threads);
  const int64_t work = std::max<int64_t>(1, a.w.k * kTileRows * a.m);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(per_thread, (1 << 20) / work));
  rt.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
#if defined(LLMCHAT_HAS_AMX_INT8)
    if (tile_tokens > 0) {
      amx::configure(int8_tiles(halves(KIND) ? 16 : 32));  // per task: tile state belongs to the thread
      std::vector<uint8_t> unpacked(nibbles(KIND) ? size_t(nb * 512) : 0);
      for (int64_t g = g0; g < g1; ++g) {
        const uint8_t* weights = static_cast<const uint8_t*>(a.w.values) + g * nb * block_bytes(KIND);
        if constexpr (nibbles(KIND)) {
          for (int64_t b = 0; b < nb; ++b) {
            __m512i rows[8];
            block_rows<KIND>(a.w, nb, g, b, rows);
            for (int r = 0; r < 8; ++r) _mm512_storeu_si512(unpacked.data() + b * 512 + 64 * r, rows[r]);
          }
          weights = unpacked.data();
        }
        amx_group<KIND, HALF>(x, a, g, weights, 0, tile_tokens, finish);
      }
      amx::release();
    }
#endif
    if (tile_tokens < a.m) vnni_groups<KIND, HALF>(a, x, g0, g1, tile_tokens, a.m, finish);
  });
}

}  // namespace

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
  const int64_t nb = a.w.k / 32;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, dsum;
  thread_local std::vector<int32_t> offsets;
  q.resize(size_t(a.m * a.w.k)), d.resize(size_t(a.m * nb)), dsum.resize(size_t(a.m * nb));
  quantize_activations(a.dtype, a.x, a.x_stride, a.m, a.w.k, q.data(), d.data(), dsum.data(), rt);
  if (a.w.kind == QuantKind::Q8 || a.w.kind == QuantKind::Q8Halves) {
    const int size = a.w.kind == QuantKind::Q8Halves ? 16 : 32;
    const int64_t per_token = a.w.k / size;
    offsets.resize(size_t(a.m * per_token));
    const int8_t* qs = q.data();  // (thread_local: the workers see their own vectors under these names)
    int32_t* sums = offsets.data();
    rt.parallel_for(a.m, grain_for(a.w.k), [&](int64_t m0, int64_t m1) {
      for (int64_t i = m0 * per_token; i < m1 * per_token; ++i) {
        int32_t sum = 0;
        for (int j = 0; j < size; ++j) sum += qs[i * size + j];
        sums[i] = 128 * sum;
      }
    });
  }
  const Acts x{q.data(), d.data(), dsum.data(), offsets.data(), a.w.k, nb};
  const bool half = a.w.half_factors;
  switch (a.w.kind) {
    case QuantKind::Q8: return half ? run<QuantKind::Q8, true>(a, x, rt) : run<QuantKind::Q8, false>(a, x, rt);
    case QuantKind::Q8Halves:
      return half ? run<QuantKind::Q8Halves, true>(a, x, rt) : run<QuantKind::Q8Halves, false>(a, x, rt);
    case QuantKind::Q4: return half ? run<QuantKind::Q4, true>(a, x, rt) : run<QuantKind::Q4, false>(a, x, rt);
    case QuantKind::Q5: return half ? run<QuantKind::Q5, true>(a, x, rt) : run<QuantKind::Q5, false>(a, x, rt);
  }
}

#else  // no AVX512-VNNI in this build: weights stay in the row layout

bool quant_tiles_compiled() { return false; }
const char* quant_tiles_isa() { return ""; }
void quant_tiles_linear(const QuantLinearArgs&, const Runtime&) {}

#endif

// Element e of row n's block b, unsigned as stored, and the factors' index: from the layout of quant_tiles.h.
void quant_tiles_rows(const QuantWeightView& w, const int64_t* ids, int64_t num_ids, DType dt, void* out,
                      int64_t out_stride, const Runtime& rt) {
  const int64_t K = w.k, nb = K / 32;
  const bool four = w.kind == QuantKind::Q4 || w.kind == QuantKind::Q5, eight_bit = !four;
  const int sub = w.kind == QuantKind::Q8Halves ? 2 : 1;
  auto factor = [&](const void* p, int64_t i) {
    return w.half_factors ? to_float(fp16_t{static_cast<const uint16_t*>(p)[i]}) : static_cast<const float*>(p)[i];
  };
  rt.parallel_for(num_ids, grain_for(K), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = ids[i] / kTileRows, n = ids[i] % kTileRows;
      dispatch_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        T* o = static_cast<T*>(out) + i * out_stride;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = static_cast<const uint8_t*>(w.values) + (g * nb + b) * (four ? 256 : 512);
          for (int e = 0; e < 32; ++e) {
            const int r = e % 16 / 4, j = e % 4;
            int q;
            if (four) {
              const uint8_t byte = blk[64 * r + 4 * n + j];
              q = e < 16 ? byte & 15 : byte >> 4;
              if (w.kind == QuantKind::Q5) {
                const uint64_t mask = reinterpret_cast<const uint64_t*>(w.high)[(g * nb + b) * 8 + e / 4];
                q |= int((mask >> (4 * n + j)) & 1) << 4;
              }
            } else {
              q = int(blk[64 * (e / 4) + 4 * n + j]) - 128;
            }
            const int64_t at = (g * sub * nb + sub * b + (sub == 2 ? e / 16 : 0)) * kTileRows + n;
            const float s = factor(w.scales, at);
            float value = s * float(q);  // two roundings, as numpy does it: never one fused multiply-add
            if (w.mins != nullptr) value = value + factor(w.mins, at);
            else if (!eight_bit && w.min_offset != 0) value = value + float(w.min_offset) * s;
            o[32 * b + e] = from_float<T>(value);
          }
        }
      });
    }
  });
}

}  // namespace llmchat
