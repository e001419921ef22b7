// Integer block dots for the quantized linear (core/quant_linear.cpp), one header per ISA behind one interface:
//   QVec  32 int8 lanes: one block of 32 weights (u8 0..31 for the 4/5-bit kinds, s8 for the 8-bit kinds) or
//         of 32 quantized activations (s8, -127..127)
//   QAcc  float partial sums of one output; lanes add up in a fixed order in qsum()
//   QScale per-lane float factors; block_scale(s), halves_scale(lo, hi), pair_scale(s[2]), qmul (weight scale
//         times activation scale, lane by lane: the same product a scalar multiply gives)
//   load32 / store32; fma_s8: acc += dot(w, a) * scale, integer partial dots exact in int32; fma_s8_halves:
//   elements 0..15 scaled by scale.lo and 16..31 by scale.hi (Q6_K's 16-element sub-blocks)
//   QPair  the 4/5-bit kinds go two blocks b, b+1 at a time, 64 u8 weights in "pair order": positions 0..15 =
//         block b elements 0..15, 16..31 = block b+1 elements 0..15, 32..47 = b 16..31, 48..63 = b+1 16..31,
//         which is what one 32-byte load of two blocks' nibbles splits into. Activations are laid out alike.
//   load_q4_pair / load_q5_pair (+ bit planes) / load_q4_single / load_q5_single (block b alone, b+1 zero),
//   load_pair / store_pair (64 unpacked bytes); load_pair_acts; fma_pair_u8: acc += dot_b * scale of b +
//   dot_b+1 * scale of b + 1
//   dot_f32 / dot_half_f32: a float dot in a fixed order (the mins against the activation block sums);
//   half_to_float, pair_scale_half: fp16 factors
// kRows x kTokens: the register tile of weight rows and tokens each path computes at once.
// Every output runs the same sequence of these calls whatever M or the thread split, so a row's result does
// not depend on what else is in the batch.
// Pair tiles (NEON with i8mm, qdot_neon_i8mm.h, which defines LLMCHAT_QDOT_PAIR_TILES): SMMLA gives 2 rows x
// 2 tokens each block's whole int32 sum, where SDOT leaves 4 partial lanes, so the two round differently and
// such a build computes every output in 2x2 tiles, for every M (a lone row or token goes with a copy of
// itself). QAcc4 / QScale4 hold a tile's 4 outputs lane by lane; block2 interleaves a block of two rows or
// two tokens into SMMLA operands; row_pair_factors / row_block_factors / token_(pair_)factors and qmul4 make the tile's
// scale products; mma_s8 / mma_s8_halves / mma_pair are fma_s8 / fma_s8_halves / fma_pair_u8 for a tile.
#pragma once

#if defined(LLMCHAT_FORCE_SCALAR)
#include "qdot_scalar.h"
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "qdot_avx2.h"
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include "qdot_neon.h"
#else
#include "qdot_scalar.h"
#endif
