// Quantized weights in the ARM tile layout: the order SMMLA (i8mm) reads as its weight operand, so neither the
// prefill tiles nor decode interleave rows in registers. It is what `tiled` means on an aarch64 build (x86
// reads the order of quant_tiles.h instead: a weight is tiled once, at load, for the machine it runs on).
// Every kind (Q8, Q8Halves, Q4, Q5, Q6; with or without stored mins, fp32, fp16 or compact factors).
// A weight with N % 16 == 0 is stored group by group (16 rows = 8 row pairs), each group block by block; the
// tensors keep the row layout's shapes and dtypes (quant_linear.h), only the order of their bytes changes:
//   Q8, Q8Halves: 512 bytes a block, [p 0..7][c 0..3][h 0..1][j 0..7] = w of row 16g+2p+h, element 8c+j:
//       16 bytes are one SMMLA operand (8 elements of two rows)
//   Q4: 256 bytes a block, [p][s 0..1][h][j 0..7] = the row layout's nibble byte 8s+j of row 16g+2p+h: low
//       nibble = element 8s+j, high = element 16+8s+j (one AND and one shift give operands c = s and s + 2)
//   Q5 as Q4, and its high bits (the row layout's [N, K/32] uint32) as 64 bytes a block, [p/2][8h+j]: bit
//       4(p%2)+c = bit 4 of element 8c+j of row 16g+2p+h (one load serves two row pairs' 8 operands, each rebuilt
//       by a shift-and-insert and an AND)
//   Q6 (Q6_K in its 6 bits, u = w + 32) as Q4, and bits 4-5 as 128 bytes a block, [p][8h + j]: bits 2c, 2c+1 =
//       bits 4, 5 of element 8c+j of row 16g+2p+h (one load serves a row pair's 4 operands: a shift and an AND
//       each); its operands are rebuilt in registers (OR, subtract 32) into Q8Halves' signed bytes, so it gives
//       Q8Halves' bits; scales per 16 elements as Q8Halves
//   scales and mins: [g][block][16] (Q8Halves: [g][2 block + half][16]), fp32 or fp16 as in the row layout,
//   or compact for K-quants (Q4_K / Q5_K's u6 sc and m, Q6_K's i8 sc, and fp16 per 256 elements): the bytes
//   and order of quant_tiles.h, read through tile_factors.h, so a K-quant is held in the file's factor bytes
// Activations are quantized per call (quantize_activations) and laid out in token pairs the same way:
// [pair][block][c][token 0..1][j], a lone last token paired with zeros.
// Every output (token m, row n) is computed as quant_tiles.h says, lane by lane:
//   isum(b) = sum_j u[n, 32b+j] * q[m, 32b+j] - offset * sum_j q[m, 32b+j], exact in int32 (u as stored:
//             s8 for Q8, 0..15 / 0..31 for Q4 / Q5; offset = -min_offset for Q4 / Q5 without stored mins, else 0)
//   acc     = fma(float(isum(b)), scale[n, b] * d[m, b], acc), then with stored mins acc = fma(min[n, b],
//             dsum[m, b], acc), for b = 0, 1, ... (Q8Halves: one sum and scale per half, halves in order);
//   out     = acc (+ bias)
// SMMLA (2 rows x 2 tokens, every M from 2 on with i8mm), SDOT (4 rows' block sums in one vector: decode, and
// every M without i8mm), widening multiplies (no dotprod) and the scalar loop all give the same int32 and then
// the same float steps, so a row's bits depend neither on M, the path, the thread split nor the build.
#pragma once
#include <cstdint>

#include "kernels.h"
#include "quant_linear.h"

namespace llmchat {

inline constexpr int kNeonTileRows = 16;  // weight rows per group (as x86's kTileRows: the same slicing rules)

bool neon_tiles_compiled();           // an aarch64 build: `tiled` weights are in this layout
bool neon_tiles_take(QuantKind kind);  // the kinds this layout has: all
const char* quant_tiles_neon_isa();    // "neon+i8mm", "neon+dotprod", "neon" or "scalar": the block-sum path
// a.w in this layout: out = x @ W^T (+ bias), as quant_linear.
void quant_tiles_neon_linear(const QuantLinearArgs& a, const Runtime& rt);
// Rows ids[i] of such a W dequantized (the same values as quant_rows on the row layout).
void quant_tiles_neon_rows(const QuantWeightView& w, const int64_t* ids, int64_t num_ids, DType dt, void* out,
                           int64_t out_stride, const Runtime& rt);
// The layout's bytes from the row layout's (n % 16 == 0): values, and per-block factors
// (scales or mins, `per_row` entries a row of `elem_bytes` each). For tests and tools; Python reorders in torch.
void neon_tile_values(QuantKind kind, int64_t n, int64_t k, const void* rows, void* tiled);
// Q5's high bits ([N, K/32] uint32), or Q6's (planes = 2: [N, K/16], a word of bit 4 then one of bit 5 a block)
void neon_tile_high(int64_t n, int64_t k, const uint32_t* rows, uint32_t* tiled, int planes = 1);
void neon_tile_factors(int64_t n, int64_t per_row, int elem_bytes, const void* rows, void* tiled);

}  // namespace llmchat
