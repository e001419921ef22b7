// Quantized weights in 16-row tiles: the layout x86 machines with AVX512-VNNI run, read by both the VNNI block
// dots (every step size) and AMX-INT8 tiles (TDPBSUD/TDPBSSD, each whole tile of 16 tokens) from one copy.
// A weight with N % 16 == 0 is stored group by group (16 rows), each group block by block (32 elements); the
// tensors keep the row layout's shapes and dtypes (quant_linear.h), only the order of their bytes changes:
//   8-bit kinds: 512 bytes a block, [r 0..7][n 0..15][j 0..3] = u8 (w + 128) of row 16g+n, element 4r+j: an
//     AMX B tile (8 rows x 64 bytes) as it lies, and the 8 vpdpbusd operands of 16 rows
//   4/5-bit kinds: 256 bytes a block, [r 0..3][n][j]: low nibble = element 4r+j, high nibble = element 16+4r+j
//     (one AND and one shift give B rows r and r + 4)
//   Q5 high bits: 8 uint64 a block, word r bit 4n+j = bit 4 of element 4r+j of row n (a byte mask of B row r)
//   scales and mins: [g][block][16] (Q8Halves: [g][2 block + half][16]), fp32 or fp16 as in the row layout;
//     or compact (K-quants, uint8 tensors): per group the integers, then fp16 super-factors [K/256][16] (d;
//     -dmin for mins), meaning factor = float(integer) * float(fp16) (the row layout's fp32 factor). Q6_K's sc
//     are i8 [S][16] ([N, S + 2 K/256], S sub-blocks a row); Q4_K/Q5_K's sc and m keep the file's 6 bits
//     ([N, 8 K/256]): per super-block of 8 sub-blocks j, 96 bytes: [4][16] bytes whose low nibble holds bits
//     0-3 of j and high nibble bits 0-3 of j + 4 (j < 4), then [2][16] bytes holding bits 4-5 of j = 4h + i at
//     bits 2i, 2i + 1 of row h
// Every output (token m, row n) is computed as:
//   isum(b)  = sum_j u[n, 32b+j] * q[m, 32b+j] - offset * sum_j q[m, 32b+j], exact in int32: u the weight as
//              stored (0..15, 0..31, or w + 128), offset 128 for the 8-bit kinds, -min_offset for the 4/5-bit
//              kinds whose min is min_offset * scale (Q4_0, Q5_0), else 0 (Q8Halves: one sum per half)
//   acc      = fma(float(isum(b)), scale[n, b] * d[m, b], acc), then with stored mins (Q4_1, Q4_K, ...)
//              acc = fma(min[n, b], dsum[m, b], acc), for b = 0, 1, ... (halves in order)
//   out      = acc (+ bias)
// Q8 weights with wide_activations (what the engine tiles Q8_0 with) take 16-bit activations: per block
// d = max|x| / 32639 and q = round-half-even(x / d), split as q = 256 hi + lo (lo in [-128, 127]); then
//   isum(b)  = 256 sum_j u * hi + sum_j u * lo - 128 * sum_j q, still exact in int32 (|isum| < 2^28),
// two block dots where 8-bit activations take one, and the same float step. Quantizing the activations is
// the largest error of an 8-bit weight's dot; at 16 bits it is 256x smaller.
// K-quants with compact factors (Q4_K, Q5_K: u6 sc and m; Q6_K, or Q8Halves holding it: i8 sc) run whole
// super-blocks S of 256 in integers instead. Activations per super-block: dA = max|x| / 127, q as above; then
//   I(S)     = sum_j sc[n, j] * sum_{i in j} w[n, i] * q[m, i] over S's sub-blocks j (32 elements; 16 for the
//              halves kinds), w = u for Q4/Q5 (0..31, mins apart) and the signed weight for Q6/Q8Halves
//   Im(S)    = sum_j m[n, j] * sum_{i in j} q[m, i] (Q4/Q5)
//   acc      = fma(float(I(S)), d[n, S] * dA[m, S], acc), then acc = fma(float(Im(S)), -dmin[n, S] * dA[m, S], acc)
// (|I| < 2^31: at most 256 * 127 * 63 * 31 for Q5, 256 * 127 * 128 * 128 for Q8Halves). VNNI multiplies each
// sub-block's dot by sc in int32; AMX either does the same with the tile sums of a sub-block (a lone token tile)
// or multiplies sc into the weights, w * sc = 256 hi + lo as two byte planes (TDPBSUD on lo, TDPBSSD on hi), so
// that a K=64 product spans sub-blocks and a tile accumulates the whole I(S).
// The VNNI path keeps 16 rows in the lanes of one register and the AMX path 16 rows in a tile row; both do the
// float operations above lane by lane, so a row's bits do not depend on M, the path or the thread split.
#pragma once
#include <cstdint>

#include "kernels.h"
#include "quant_linear.h"

namespace llmchat {

inline constexpr int kTileRows = 16;  // weight rows per group of the tiled layout
inline constexpr int kCompact6Bytes = 6 * kTileRows;  // 8 u6 integers of 16 rows: a super-block's sc (or m)

bool quant_tiles_compiled();     // this build has the tiled path (AVX512-VNNI + BW + VL)
const char* quant_tiles_isa();   // "avx512+vnni", "avx512+vnni+amx" where tiles are granted, "" when not compiled
// a.w.tiled: out = x @ W^T (+ bias), as quant_linear.
void quant_tiles_linear(const QuantLinearArgs& a, const Runtime& rt);
// The 16-bit activation quantization above, for tests: lo, hi [M, K] int8, d [M, K/32], offsets [M, K/32]
// = 128 * sum(q) (compiled with the tile layout only).
void quantize_activations_wide(DType dt, const void* x, int64_t x_stride, int64_t m, int64_t k, int8_t* lo,
                               int8_t* hi, float* d, int32_t* offsets, const Runtime& rt);
// Rows ids[i] of a tiled W dequantized (the same values as quant_rows on the row layout).
void quant_tiles_rows(const QuantWeightView& w, const int64_t* ids, int64_t num_ids, DType dt, void* out,
                      int64_t out_stride, const Runtime& rt);

}  // namespace llmchat
