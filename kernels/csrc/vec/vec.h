// Picks the vector implementation for the compile target. Every kernel is written once against
// llmchat::vec::VecF (16 fp32 lanes) and the free functions below, so each ISA is one header.
//   define LLMCHAT_FORCE_SCALAR or LLMCHAT_FORCE_AVX2 to build a narrower path on a wider CPU (tests).
#pragma once

#if defined(LLMCHAT_FORCE_SCALAR)
#include "vec_scalar.h"
#elif defined(__AVX512F__) && defined(__AVX512BW__) && !defined(LLMCHAT_FORCE_AVX2)
#include "vec_avx512.h"
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "vec_avx2.h"
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include "vec_neon.h"
#else
#include "vec_scalar.h"
#endif

#include "vec_math.h"
