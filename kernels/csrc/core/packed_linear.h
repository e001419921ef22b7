// Small-M linear over packed bf16 panels (the layout is described in gemv.h): the decode path of bf16
// projections where the CPU has a bf16 pair-dot (AVX512-BF16, NEON BFDOT; vec/panel.h).
#pragma once

#include "gemv.h"

namespace llmchat {

// a.packed, a.dtype bf16: out[M, N] from the panels in a.weight, fp32 accumulation, rounded to bf16 once.
void run_packed(const LinearArgs& a, const Runtime& rt);
const char* packed_isa_name();  // the panel instance compiled in: "avx512+bf16", "neon+bf16" or "scalar"

}  // namespace llmchat
