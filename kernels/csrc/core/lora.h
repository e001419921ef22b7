// Multi-adapter LoRA on one (possibly fused) projection, torch-free: out[t] += (x[t] @ A^T) @ B for the
// adapter slot of each token segment, written straight into the projection's output.
//
// Weights of every resident adapter are stacked per projection:
//   a [slots, R, in]    A rows of the slot's targeted slices, one after another (rows past its rank unused)
//   b [slots, L]        (scale * B)^T of each slice on its own, no block-diagonal zeros: slice i holds
//                       ceil(width_i / 64) panels of 64 of its output columns, each panel cap_i rank rows of
//                       64 values (cap_i = slice_ranks[i] >= every slot's rank of slice i, zero padded).
//                       So one slice's B is one contiguous read when its rank is cap_i.
// rank_offsets[slot][i] .. rank_offsets[slot][i + 1] are the rank rows of output slice i
// (slice_offsets[i] .. slice_offsets[i + 1]); an untargeted slice has an empty range. So the expand never
// reads the zeros outside a slice's block, and a slot without LoRA here (all ranges empty) costs nothing.
#pragma once
#include <cstdint>

#include "kernels.h"

namespace llmchat {

constexpr int64_t kLoraPanel = 64;  // output columns per panel of b
inline int64_t lora_panels(int64_t columns) { return (columns + kLoraPanel - 1) / kLoraPanel; }
// Offset of slice i's panels inside one slot's b (i = num_slices: the slot's size).
inline int64_t lora_b_offset(const int32_t* slice_offsets, const int32_t* slice_ranks, int i) {
  int64_t off = 0;
  for (int j = 0; j < i; ++j) off += lora_panels(slice_offsets[j + 1] - slice_offsets[j]) * slice_ranks[j] * kLoraPanel;
  return off;
}

struct LoraArgs {
  DType dtype = DType::F32;  // x, out, a and b all have this dtype; accumulation is fp32
  const void* x = nullptr;   // [T, in], row stride x_stride (elements), last dim contiguous
  int64_t x_stride = 0;
  void* out = nullptr;       // [T, out], row stride out_stride, last dim contiguous
  int64_t out_stride = 0;
  const void* a = nullptr;   // [slots, rank, in] contiguous
  const void* b = nullptr;   // [slots, lora_b_elems(...)] contiguous, see above
  int64_t num_tokens = 0, slots = 0, rank = 0, in = 0, out_features = 0;
  const int32_t* rank_offsets = nullptr;   // [slots, num_slices + 1], each row non-decreasing in [0, rank]
  const int32_t* slice_offsets = nullptr;  // [num_slices + 1], 0 .. out_features, non-decreasing
  const int32_t* slice_ranks = nullptr;    // [num_slices] cap_i: rank rows per panel of slice i in b
  int num_slices = 0;
  const int32_t* segments = nullptr;       // [num_segments, 3] = (slot, start, end), disjoint token ranges
  int64_t num_segments = 0;
};

// The delta is summed in fp32 and added to out in fp32; out is rounded to its dtype once. On a build and CPU
// with matrix tiles (lora_path_name() not "vector"), every bf16 segment, decode included, runs shrink and expand
// on them (core/lora_tiles.h), h rounded to bf16 before the expand: a token's delta never depends on its
// segment's length, its batch or the thread split.
void lora_apply(const LoraArgs& a, const Runtime& rt);
// "amx", "amx (emulated)", "bfmmla" or "vector": the path bf16 segments take.
const char* lora_path_name();

}  // namespace llmchat
