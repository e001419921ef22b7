// Multi-adapter LoRA on one (possibly fused) projection, torch-free: out[t] += (x[t] @ A^T) @ B for the
// adapter slot of each token segment, written straight into the projection's output.
//
// Weights of every resident adapter are stacked per projection:
//   a [slots, R, in]    A rows of the slot's targeted slices, one after another (rows past its rank unused)
//   b [slots, P, R, 64] (scale * B)^T in panels of 64 output columns (P = ceil(out / 64), zero padded):
//                       element (slot, r, c) sits at [slot][c / 64][r][c % 64], so one panel's rows of one
//                       slice are one contiguous read; rank row r feeds only the columns of its own slice
// rank_offsets[slot][i] .. rank_offsets[slot][i + 1] are the rank rows of output slice i
// (slice_offsets[i] .. slice_offsets[i + 1]); an untargeted slice has an empty range. So the expand never
// reads the zeros outside a slice's block, and a slot without LoRA here (all ranges empty) costs nothing.
#pragma once
#include <cstdint>

#include "kernels.h"

namespace llmchat {

constexpr int64_t kLoraPanel = 64;  // output columns per panel of b
inline int64_t lora_panels(int64_t out_features) { return (out_features + kLoraPanel - 1) / kLoraPanel; }

struct LoraArgs {
  DType dtype = DType::F32;  // x, out, a and b all have this dtype; accumulation is fp32
  const void* x = nullptr;   // [T, in], row stride x_stride (elements), last dim contiguous
  int64_t x_stride = 0;
  void* out = nullptr;       // [T, out], row stride out_stride, last dim contiguous
  int64_t out_stride = 0;
  const void* a = nullptr;   // [slots, rank, in] contiguous
  const void* b = nullptr;   // [slots, lora_panels(out), rank, kLoraPanel] contiguous
  int64_t num_tokens = 0, slots = 0, rank = 0, in = 0, out_features = 0;
  const int32_t* rank_offsets = nullptr;   // [slots, num_slices + 1], each row non-decreasing in [0, rank]
  const int32_t* slice_offsets = nullptr;  // [num_slices + 1], 0 .. out_features, non-decreasing
  int num_slices = 0;
  const int32_t* segments = nullptr;       // [num_segments, 3] = (slot, start, end), disjoint token ranges
  int64_t num_segments = 0;
};

// The delta is summed in fp32 and added to out in fp32; out is rounded to its dtype once.
void lora_apply(const LoraArgs& a, const Runtime& rt);

}  // namespace llmchat
