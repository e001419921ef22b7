// LoRA's shrink and expand on matrix tiles, for bf16: the backend this build has (at most one) defines
// LLMCHAT_LORA_TILES and, in namespace llmchat::lora_tiles,
//   kRows                     rank rows one shrink call computes at most (the fine plan's task size)
//   Tokens(const LoraArgs&)   x of every segment in the tiles' operand layout, built once per call before
//                             any task runs, read by every thread
//   ready(), name()           this CPU and OS run the tiles; the path's name for lora_path_name()
//   shrink(a, x, seg, r0, r1, h)
//       h[t * a.rank + r] = x[t] . A[slot, r] in fp32, for the tokens of segment seg and rank rows [r0, r1)
//       (r1 - r0 <= kRows) of its slot
//   expand(a, start, end, B, r0, r1, c0, c1, h)
//       out[t, c] += sum over r in [r0, r1) of bf16(h[t * a.rank + r]) * B[(r - r0) * kLoraPanel + c - c0],
//       tokens [start, end), columns [c0, c1) (one panel, c1 - c0 <= 64): the delta in fp32, added to out in
//       fp32, rounded to bf16 once
// lora.cpp calls them for every bf16 segment when ready(), so the rule never depends on the batch. Each output
// must depend only on its own token row and rank row (or column): not on the segment's length, the other rows of
// a tile, zero padding or the task split.
#pragma once

#include "lora_amx.h"     // x86 builds with AMX-BF16 (or its emulation)
#include "lora_bfmmla.h"  // ARM builds with bf16
