// Packed bf16 panels on AMX tiles, for every M (decode included, so a row's bits never depend on the step size):
// the panel layout of gemv.h is what a B tile wants (one 64-byte row = one k-pair of 16 output rows), so the one
// weight copy serves both. A block is up to 2 panels (32 outputs) x 2 token tiles (32 tokens): C tiles 0-3,
// token tiles 4-5, panel tiles 6-7. Each output is C = 0, one TDPBF16PS per 16-pair chunk in k order, + bias,
// rounded once. A step of fewer than 16 tokens configures its token and C tiles with that many rows; otherwise
// x is copied once, zero-padded to whole tiles, when its rows or k do not fill them (a C row depends only on its
// own token row, so neither choice changes a bit).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "../vec/vec.h"  // the intrinsics headers, before exact_float.h

#include "exact_float.h"

#include "../vec/amx_tiles.h"
#include "amx_linear.h"

#if defined(LLMCHAT_HAS_AMX)
#if !defined(LLMCHAT_AMX_EMULATED)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace llmchat {
namespace {

constexpr int kPanel = 16, kTileTokens = 16, kChunkPairs = 16;
constexpr int64_t kTileBytes = 64;

struct Scratch {
  alignas(64) bf16_t b[2][kChunkPairs * 2 * kPanel];
  alignas(64) float c[kTileTokens * kPanel];
};

// The C tiles 0-3 and token tiles 4-5 `token_rows` rows, the panel tiles whole.
amx::TileConfig tiles_for(int token_rows) { return amx::full_tiles(token_rows, 6); }

struct Problem {
  const LinearArgs& a;
  int64_t pairs, chunks, panel_elems;
  const bf16_t* x;      // a.x, or its zero-padded copy: every token tile and k chunk read from it is whole
  int64_t x_stride;
  int64_t tokens;       // rows of x as tiles see them: a.m, rounded up to 16 past one tile
  const bf16_t* P() const { return static_cast<const bf16_t*>(a.weight); }
};

// Tokens [t0, t0 + tile rows) x pairs [16c, 16c + 16) of x into tile T.
template <int T>
void load_tokens(const Problem& pr, int64_t t0, int64_t c) {
  amx::load<T>(pr.x + t0 * pr.x_stride + 2 * kChunkPairs * c, pr.x_stride * int64_t(sizeof(bf16_t)));
}

// Pairs [16c, 16c + 16) of panel p into tile T (the panel holds `pairs` k-pairs; the last chunk may be short).
template <int T>
void load_panel(const Problem& pr, int64_t p, int64_t c, bf16_t* pad) {
  const bf16_t* src = pr.P() + p * pr.panel_elems + c * kChunkPairs * 2 * kPanel;
  const int64_t have = std::min<int64_t>(kChunkPairs, pr.pairs - c * kChunkPairs);
  if (have == kChunkPairs) {
    amx::load<T>(src, kTileBytes);
    return;
  }
  std::memset(pad, 0, sizeof(bf16_t) * kChunkPairs * 2 * kPanel);
  std::memcpy(pad, src, have * kTileBytes);
  amx::load<T>(pad, kTileBytes);
}

// out[t0 .. t0 + 16) x [16p, 16p + 16) from the fp32 tile in `c`, + bias, rounded to bf16 (ragged ends masked).
void write_tile(const Problem& pr, const float* c, int64_t t0, int64_t p) {
  const LinearArgs& a = pr.a;
  const int64_t n0 = p * kPanel, rows = std::min<int64_t>(kTileTokens, a.m - t0);
  const int valid = int(std::min<int64_t>(kPanel, a.n - n0));
  const bf16_t* bias = a.bias ? static_cast<const bf16_t*>(a.bias) + n0 : nullptr;
  bf16_t* out = static_cast<bf16_t*>(a.out) + t0 * a.out_stride + n0;
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  const __mmask16 mask = valid >= kPanel ? __mmask16(0xffff) : __mmask16((1u << valid) - 1);
  __m512 b = _mm512_setzero_ps();
  if (bias) b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, bias)), 16));
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 v = _mm512_add_ps(_mm512_loadu_ps(c + r * kPanel), b);
    _mm256_mask_storeu_epi16(out + r * a.out_stride, mask, (__m256i)_mm512_cvtneps_pbh(v));
  }
#else
  for (int64_t r = 0; r < rows; ++r)
    for (int n = 0; n < valid; ++n) out[r * a.out_stride + n] = to_bf16(c[r * kPanel + n] + (bias ? to_float(bias[n]) : 0.f));
#endif
}

// NP panels from p0 x MT token tiles from t0, C tile (token tile i, panel q) = tile i * 2 + q.
template <int NP, int MT>
void block(const Problem& pr, int64_t p0, int64_t t0, Scratch& s) {
  amx::zero<0>();
  if constexpr (NP == 2) amx::zero<1>();
  if constexpr (MT == 2) amx::zero<2>();
  if constexpr (NP == 2 && MT == 2) amx::zero<3>();
  for (int64_t c = 0; c < pr.chunks; ++c) {
    load_tokens<4>(pr, t0, c);
    if constexpr (MT == 2) load_tokens<5>(pr, t0 + kTileTokens, c);
    load_panel<6>(pr, p0, c, s.b[0]);
    if constexpr (NP == 2) load_panel<7>(pr, p0 + 1, c, s.b[1]);
    amx::dp_bf16<0, 4, 6>();
    if constexpr (NP == 2) amx::dp_bf16<1, 4, 7>();
    if constexpr (MT == 2) amx::dp_bf16<2, 5, 6>();
    if constexpr (NP == 2 && MT == 2) amx::dp_bf16<3, 5, 7>();
  }
  auto emit = [&](auto tile, int64_t t, int64_t p) {
    amx::store<decltype(tile)::value>(s.c, kPanel * int64_t(sizeof(float)));
    write_tile(pr, s.c, t, p);
  };
  emit(std::integral_constant<int, 0>{}, t0, p0);
  if constexpr (NP == 2) emit(std::integral_constant<int, 1>{}, t0, p0 + 1);
  if constexpr (MT == 2) emit(std::integral_constant<int, 2>{}, t0 + kTileTokens, p0);
  if constexpr (NP == 2 && MT == 2) emit(std::integral_constant<int, 3>{}, t0 + kTileTokens, p0 + 1);
}

template <int NP>
void panel_pair(const Problem& pr, int64_t p0, Scratch& s) {
  int64_t t = 0;
  for (; t + kTileTokens < pr.tokens; t += 2 * kTileTokens) block<NP, 2>(pr, p0, t, s);
  if (t < pr.tokens) block<NP, 1>(pr, p0, t, s);
}

// The tiles compute what this file assumes (operand order, the B layout), checked once on small integers, where
// every product and sum is exact: a CPU or emulator that disagrees keeps the panel path.
bool tiles_agree() {
  alignas(64) bf16_t x[kTileTokens * 2 * kChunkPairs], w[kChunkPairs * 2 * kPanel];
  alignas(64) float c[kTileTokens * kPanel];
  for (int m = 0; m < kTileTokens; ++m)
    for (int k = 0; k < 2 * kChunkPairs; ++k) x[m * 2 * kChunkPairs + k] = to_bf16(float((3 * m + k) % 7) - 3.f);
  for (int j = 0; j < kChunkPairs; ++j)
    for (int n = 0; n < kPanel; ++n)
      for (int e = 0; e < 2; ++e) w[(j * kPanel + n) * 2 + e] = to_bf16(float((5 * j + 2 * n + e) % 5) - 2.f);
  amx::configure(amx::full_tiles());
  amx::zero<0>();
  amx::load<4>(x, kTileBytes);
  amx::load<6>(w, kTileBytes);
  amx::dp_bf16<0, 4, 6>();
  amx::store<0>(c, kPanel * int64_t(sizeof(float)));
  amx::release();
  for (int m = 0; m < kTileTokens; ++m)
    for (int n = 0; n < kPanel; ++n) {
      float want = 0.f;
      for (int k = 0; k < 2 * kChunkPairs; ++k)
        want += to_float(x[m * 2 * kChunkPairs + k]) * to_float(w[((k / 2) * kPanel + n) * 2 + k % 2]);
      if (c[m * kPanel + n] != want) return false;
    }
  return true;
}

#if !defined(LLMCHAT_AMX_EMULATED)
// CPUID says AMX-TILE and AMX-BF16, XCR0 says the OS saves tile state, and Linux grants this process the tile
// data (arch_prctl ARCH_REQ_XCOMP_PERM): without the grant the first tile instruction faults.
bool request_tiles() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = d & (1u << 24), bf16 = d & (1u << 22);
  if (!tile || !bf16) return false;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG and XTILEDATA
  constexpr long kReqXcompPerm = 0x1023, kXfeatureTileData = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) == 0 && tiles_agree();
}
#endif

}  // namespace

const char* amx_path_name() {
#if defined(LLMCHAT_AMX_EMULATED)
  return "amx (emulated)";
#else
  return "avx512+bf16+amx";
#endif
}

bool amx_ready() {
  static std::once_flag once;
  static bool ready = false;
#if defined(LLMCHAT_AMX_EMULATED)
  std::call_once(once, [] { ready = tiles_agree(); });
#else
  std::call_once(once, [] { ready = request_tiles(); });
#endif
  return ready;
}

void run_packed_amx(const LinearArgs& a, const Runtime& rt) {
  const int64_t pairs = (a.k + 1) / 2, chunks = (pairs + kChunkPairs - 1) / kChunkPairs, kp = 2 * kChunkPairs * chunks;
  const int token_rows = int(std::min<int64_t>(a.m, kTileTokens));
  const int64_t tokens = a.m < kTileTokens ? a.m : (a.m + kTileTokens - 1) / kTileTokens * kTileTokens;
  const bf16_t* x = static_cast<const bf16_t*>(a.x);
  int64_t x_stride = a.x_stride;
  std::vector<bf16_t> padded;
  if (tokens != a.m || kp != a.k) {  // one copy per call, not a padded tile per chunk
    padded.assign(size_t(tokens * kp), bf16_t{});
    for (int64_t m = 0; m < a.m; ++m) std::memcpy(padded.data() + m * kp, x + m * a.x_stride, a.k * sizeof(bf16_t));
    x = padded.data(), x_stride = kp;
  }
  const Problem pr{a, pairs, chunks, pairs * 2 * kPanel, x, x_stride, tokens};
  const int64_t panels = (a.n + kPanel - 1) / kPanel, groups = (panels + 1) / 2;
  const int64_t per_thread = (groups + rt.num_threads - 1) / std::max(1, rt.num_threads);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(per_thread, 8192 / std::max<int64_t>(1, a.k)));
  rt.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    Scratch s;
    amx::configure(tiles_for(token_rows));  // per task: tile state belongs to the thread that runs it
    for (int64_t g = g0; g < g1; ++g) {
      if (2 * g + 1 < panels) panel_pair<2>(pr, 2 * g, s);
      else panel_pair<1>(pr, 2 * g, s);
    }
    amx::release();
  });
}

}  // namespace llmchat

#else  // no AMX in this build

namespace llmchat {
const char* amx_path_name() { return ""; }
bool amx_ready() { return false; }
void run_packed_amx(const LinearArgs&, const Runtime&) {}
}  // namespace llmchat

#endif
