// The packed bf16 decode panel (core/packed_linear.cpp), one header per ISA behind one interface:
//   PanelAcc      16 fp32 accumulators: one panel's 16 output rows for one token
//   PanelWeights  one k-pair of a panel: 16 rows x (k even, k odd) bf16, 64 contiguous bytes
//   XPair         a token's k-pair (x[2j] low, x[2j+1] high) broadcast to every row
//   RowMask       which of the panel's 16 rows exist (the last panel of N may be ragged)
//   acc_zero / load_weights / broadcast_pair / pair_dot (acc[r] += w[r].even * x.lo + w[r].odd * x.hi)
//   row_mask / load_bias (bf16 -> fp32, absent rows 0) / add / store_rounded (round to bf16, masked store)
// kPanels x kTokens: panels and tokens a block computes at once, sized to the register file.
// kNative: the pair-dot is a hardware instruction here, so packing weights pays off (packed_native()).
// Every output runs acc_zero, one pair_dot per k-pair in k order, add, store_rounded: the same sequence
// whatever M, the block shape or the thread split.
// Include after vec.h, in a file that turns floating-point contraction off (the scalar instance's
// multiply-adds are meant as written).
#pragma once

#if defined(LLMCHAT_FORCE_SCALAR) || defined(LLMCHAT_FORCE_AVX2)
#include "panel_scalar.h"
#elif defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include "panel_avx512.h"
#elif defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
#include "panel_neon.h"
#else
#include "panel_scalar.h"
#endif
