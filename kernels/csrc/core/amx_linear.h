// Packed bf16 panels (gemv.h's layout) on Intel AMX tiles: the path run_packed takes for every step size where
// the build has AMX-BF16 and this CPU and OS grant the tiles (so a row's bits do not depend on M).
#pragma once

#include "gemv.h"

namespace llmchat {

// True once this process may use AMX tiles (asked of the OS on the first call); false in builds without AMX.
bool amx_ready();
const char* amx_path_name();  // "avx512+bf16+amx" ("amx (emulated)" in test builds)
// a.packed, a.dtype bf16: as run_packed, on tiles. Call only when amx_ready().
void run_packed_amx(const LinearArgs& a, const Runtime& rt);

}  // namespace llmchat
