// Linear over packed bf16 panels (the layout is described in gemv.h): every step of bf16 projections where the
// CPU has a bf16 pair-dot (AVX512-BF16, NEON BFDOT; vec/panel.h), on matrix tiles where there are some (AMX for
// every step, BFMMLA for steps of two or more tokens).
#pragma once

#include "gemv.h"

namespace llmchat {

// a.packed, a.dtype bf16: out[M, N] from the panels in a.weight, fp32 accumulation, rounded to bf16 once.
void run_packed(const LinearArgs& a, const Runtime& rt);
// What runs the panels: "avx512+bf16+amx" (AMX tiles), "avx512+bf16", "neon+bf16+bfmmla" or "scalar".
const char* packed_isa_name();
// What a step of m tokens runs: "amx" or "bfmmla" tiles, or "panels" (the pair-dot panel of packed_isa_name()).
const char* packed_step_path(int64_t m);

}  // namespace llmchat
