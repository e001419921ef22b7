// Intel AMX tiles (AMX-TILE + AMX-BF16) behind small functions, and an emulation of the same operations for
// machines without AMX (define LLMCHAT_EMULATE_AMX): the tests run the tile kernels' blocking, tails and padding
// anywhere, and the emulation refuses every tile shape the hardware would fault on.
// Tile numbers are template arguments because the instructions encode them.
#pragma once
#include <cstdint>
#include <cstring>

#include "dtypes.h"

#if defined(LLMCHAT_EMULATE_AMX)
#include <cstdio>
#include <cstdlib>
#define LLMCHAT_HAS_AMX 1
#define LLMCHAT_AMX_EMULATED 1
#elif defined(__x86_64__) && defined(__AVX512BF16__) && \
    ((defined(__AMX_TILE__) && defined(__AMX_BF16__)) || (defined(__AMXTILE__) && defined(__AMXBF16__)))  // gcc, clang
#include <immintrin.h>
#define LLMCHAT_HAS_AMX 1
#endif

#if defined(LLMCHAT_HAS_AMX) && (defined(LLMCHAT_AMX_EMULATED) || defined(__AMX_INT8__) || defined(__AMXINT8__))
#define LLMCHAT_HAS_AMX_INT8 1  // TDPBSUD (core/quant_tiles.cpp)
#endif

#if defined(LLMCHAT_HAS_AMX)
namespace llmchat::amx {

// LDTILECFG's 64-byte operand (palette 1): bytes per row and rows of each of the 8 tiles.
struct TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads exactly 64 bytes");

inline constexpr int kMaxRows = 16, kMaxColsb = 64;

// Every tile 16 rows x 64 bytes, but tiles [0, count) `rows` rows (a step with fewer tokens than a tile).
inline TileConfig full_tiles(int rows = kMaxRows, int count = 0) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = uint8_t(t < count ? rows : kMaxRows), cfg.colsb[t] = kMaxColsb;
  return cfg;
}

#if defined(LLMCHAT_AMX_EMULATED)
struct EmulatedTiles {
  TileConfig cfg;
  bool configured = false;
  alignas(64) uint8_t data[8][kMaxRows * kMaxColsb];
};
inline thread_local EmulatedTiles emulated;

[[noreturn]] inline void fault(const char* what) {
  std::fprintf(stderr, "AMX emulation: %s (the hardware would fault)\n", what);
  std::abort();
}
inline void check_tile(int t) {
  if (!emulated.configured) fault("tile used before LDTILECFG");
  const TileConfig& c = emulated.cfg;
  if (c.rows[t] == 0 || c.rows[t] > kMaxRows || c.colsb[t] == 0 || c.colsb[t] > kMaxColsb) fault("tile shape");
}

inline void configure(const TileConfig& c) {
  if (c.palette != 1) fault("palette");
  for (int t = 0; t < 8; ++t)
    if (c.rows[t] > kMaxRows || c.colsb[t] > kMaxColsb) fault("configured shape");
  emulated.cfg = c;
  emulated.configured = true;
  std::memset(emulated.data, 0, sizeof emulated.data);  // LDTILECFG zeroes every tile
}
inline void release() { emulated.configured = false; }
template <int T> inline void zero() {
  check_tile(T);
  std::memset(emulated.data[T], 0, sizeof emulated.data[T]);
}
template <int T> inline void load(const void* p, int64_t stride) {
  check_tile(T);
  const TileConfig& c = emulated.cfg;
  std::memset(emulated.data[T], 0, sizeof emulated.data[T]);
  for (int r = 0; r < c.rows[T]; ++r)
    std::memcpy(emulated.data[T] + r * kMaxColsb, static_cast<const uint8_t*>(p) + r * stride, c.colsb[T]);
}
template <int T> inline void store(void* p, int64_t stride) {
  check_tile(T);
  const TileConfig& c = emulated.cfg;
  for (int r = 0; r < c.rows[T]; ++r)
    std::memcpy(static_cast<uint8_t*>(p) + r * stride, emulated.data[T] + r * kMaxColsb, c.colsb[T]);
}
// C[m][n] += A[m][2k] * B[k][2n] + A[m][2k+1] * B[k][2n+1] (fp32), with TDPBF16PS's shape rules.
template <int C, int A, int B> inline void dp_bf16() {
  check_tile(C), check_tile(A), check_tile(B);
  const TileConfig& c = emulated.cfg;
  if (c.rows[A] != c.rows[C] || c.colsb[B] != c.colsb[C] || c.colsb[A] != c.rows[B] * 4) fault("TDPBF16PS shapes");
  if (C == A || C == B || A == B) fault("TDPBF16PS tiles must differ");
  const int pairs = c.colsb[A] / 4, cols = c.colsb[C] / 4;
  for (int m = 0; m < c.rows[C]; ++m)
    for (int n = 0; n < cols; ++n) {
      float acc;
      std::memcpy(&acc, emulated.data[C] + m * kMaxColsb + 4 * n, 4);
      for (int k = 0; k < pairs; ++k) {
        bf16_t a0, a1, b0, b1;
        std::memcpy(&a0, emulated.data[A] + m * kMaxColsb + 4 * k, 2);
        std::memcpy(&a1, emulated.data[A] + m * kMaxColsb + 4 * k + 2, 2);
        std::memcpy(&b0, emulated.data[B] + k * kMaxColsb + 4 * n, 2);
        std::memcpy(&b1, emulated.data[B] + k * kMaxColsb + 4 * n + 2, 2);
        acc += to_float(a0) * to_float(b0);
        acc += to_float(a1) * to_float(b1);
      }
      std::memcpy(emulated.data[C] + m * kMaxColsb + 4 * n, &acc, 4);
    }
}
// C[m][n] += sum_k A[m][k] * B[k / 4][4n + k % 4] (int32), A signed bytes, B unsigned (TDPBSUD) or signed
// (SIGNED_B: TDPBSSD).
template <bool SIGNED_B, int C, int A, int B> inline void dp_int8(const char* name) {
  check_tile(C), check_tile(A), check_tile(B);
  const TileConfig& c = emulated.cfg;
  if (c.rows[A] != c.rows[C] || c.colsb[B] != c.colsb[C] || c.colsb[A] != c.rows[B] * 4) fault(name);
  if (C == A || C == B || A == B) fault(name);
  const int cols = c.colsb[C] / 4;
  for (int m = 0; m < c.rows[C]; ++m)
    for (int n = 0; n < cols; ++n) {
      int32_t acc;
      std::memcpy(&acc, emulated.data[C] + m * kMaxColsb + 4 * n, 4);
      for (int k = 0; k < c.colsb[A]; ++k) {
        const uint8_t b = emulated.data[B][(k / 4) * kMaxColsb + 4 * n + k % 4];
        acc += int32_t(int8_t(emulated.data[A][m * kMaxColsb + k])) * (SIGNED_B ? int32_t(int8_t(b)) : int32_t(b));
      }
      std::memcpy(emulated.data[C] + m * kMaxColsb + 4 * n, &acc, 4);
    }
}
template <int C, int A, int B> inline void dp_s8u8() { dp_int8<false, C, A, B>("TDPBSUD shapes or tiles"); }
template <int C, int A, int B> inline void dp_s8s8() { dp_int8<true, C, A, B>("TDPBSSD shapes or tiles"); }
#else
// GCC's _tile_* macros paste the tile number into the instruction text, so each tile gets its own functions.
inline void configure(const TileConfig& c) { _tile_loadconfig(&c); }
inline void release() { _tile_release(); }
template <int T> void zero();
template <int T> void load(const void* p, int64_t stride);
template <int T> void store(void* p, int64_t stride);
template <int C, int A, int B> void dp_bf16();
#define LLMCHAT_AMX_TILE(N)                                                                    \
  template <> inline void zero<N>() { _tile_zero(N); }                                         \
  template <> inline void load<N>(const void* p, int64_t stride) { _tile_loadd(N, p, stride); } \
  template <> inline void store<N>(void* p, int64_t stride) { _tile_stored(N, p, stride); }
LLMCHAT_AMX_TILE(0)
LLMCHAT_AMX_TILE(1)
LLMCHAT_AMX_TILE(2)
LLMCHAT_AMX_TILE(3)
LLMCHAT_AMX_TILE(4)
LLMCHAT_AMX_TILE(5)
LLMCHAT_AMX_TILE(6)
LLMCHAT_AMX_TILE(7)
#undef LLMCHAT_AMX_TILE
// the (C, A, B) triples amx_linear.cpp uses
#define LLMCHAT_AMX_DP(C, A, B) \
  template <> inline void dp_bf16<C, A, B>() { _tile_dpbf16ps(C, A, B); }
LLMCHAT_AMX_DP(0, 4, 6)
LLMCHAT_AMX_DP(1, 4, 7)
LLMCHAT_AMX_DP(2, 5, 6)
LLMCHAT_AMX_DP(3, 5, 7)
#undef LLMCHAT_AMX_DP
#if defined(LLMCHAT_HAS_AMX_INT8)
template <int C, int A, int B> void dp_s8u8();
template <int C, int A, int B> void dp_s8s8();
// the (C, A, B) triples quant_tiles.cpp uses
#define LLMCHAT_AMX_DP_S8U8(C, A, B) \
  template <> inline void dp_s8u8<C, A, B>() { _tile_dpbsud(C, A, B); } \
  template <> inline void dp_s8s8<C, A, B>() { _tile_dpbssd(C, A, B); }
LLMCHAT_AMX_DP_S8U8(4, 0, 2)  // 2 token tiles x 2 groups
LLMCHAT_AMX_DP_S8U8(5, 0, 3)
LLMCHAT_AMX_DP_S8U8(6, 1, 2)
LLMCHAT_AMX_DP_S8U8(7, 1, 3)
LLMCHAT_AMX_DP_S8U8(4, 0, 1)  // 1 token tile x 3 groups
LLMCHAT_AMX_DP_S8U8(5, 0, 2)
LLMCHAT_AMX_DP_S8U8(6, 0, 3)
#undef LLMCHAT_AMX_DP_S8U8
#endif
#endif

}  // namespace llmchat::amx
#endif
