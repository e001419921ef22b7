// Integer block dots for the quantized linear (core/quant_linear.cpp), one header per ISA behind one interface:
//   QVec  32 int8 lanes: one block of 32 weights (u8 0..31 for the 4/5-bit kinds, s8 for the 8-bit kinds) or
//         of 32 quantized activations (s8, -127..127)
//   QAcc  float partial sums of one output; lanes add up in a fixed order in qsum()
//   load32 / store32, load_q4 (16 packed nibbles: low = elements 0..15, high = 16..31), load_q5 (+ bit plane)
//   fma_u8 / fma_s8: acc += dot(w, a) * s, the integer dot exact in int32; fma_s8_halves: elements 0..15
//   scaled by lo and 16..31 by hi (Q6_K's 16-element sub-blocks)
// Every output runs the same sequence of these calls whatever M or the thread split, so a row's result does
// not depend on what else is in the batch.
#pragma once

#if defined(LLMCHAT_FORCE_SCALAR)
#include "qdot_scalar.h"
#elif defined(__AVX2__) && defined(__FMA__)
#include "qdot_avx2.h"
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include "qdot_neon.h"
#else
#include "qdot_scalar.h"
#endif
