// Input checks of one projection's stacked LoRA weights and a step's token segments (every index the core
// will follow: slots, rank ranges, slice columns, token ranges), shared by lora_apply and decoder_stack.
#pragma once
#include "../core/lora.h"
#include "checks.h"

namespace llmchat::binding {

inline void check_int32_matrix(const char* op, const at::Tensor& t, const char* name, int64_t dims) {
  check_cpu(op, t, name);
  check_dim(op, t, name, dims);
  check_dtype(op, t, name, at::kInt);
  check_contiguous(op, t, name);
}

// LoraArgs for a projection with T tokens, `in` inputs and N outputs in x's dtype; x and out are the caller's.
inline LoraArgs checked_lora_args(const char* op, const at::Tensor& x, int64_t T, int64_t in, int64_t N,
                                  const at::Tensor& a, const at::Tensor& b, const at::Tensor& rank_offsets,
                                  const at::Tensor& slice_offsets, const at::Tensor& slice_ranks,
                                  const at::Tensor& segments) {
  check_cpu(op, a, "a");
  check_cpu(op, b, "b");
  check_same_dtype(op, a, "a", x, "x");
  check_same_dtype(op, b, "b", x, "x");
  check_dim(op, a, "a", 3);
  check_contiguous(op, a, "a");
  LLMCHAT_CHECK(a.size(2) == in, op, "a must be [slots, rank, ", in, "] to match the ", in, " input columns, got ",
                a.sizes());
  const int64_t slots = a.size(0), rank = a.size(1);
  check_int32_matrix(op, slice_offsets, "slice_offsets", 1);
  const int64_t S = slice_offsets.size(0) - 1;
  LLMCHAT_CHECK(S >= 1, op, "slice_offsets must hold at least [0, out_features], got shape ", slice_offsets.sizes());
  const int32_t* so = slice_offsets.data_ptr<int32_t>();
  LLMCHAT_CHECK(so[0] == 0 && so[S] == N, op, "slice_offsets must start at 0 and end at out_features ", N);
  for (int64_t i = 0; i < S; ++i)
    LLMCHAT_CHECK(so[i] <= so[i + 1], op, "slice_offsets must be non-decreasing, got ", slice_offsets);

  check_int32_matrix(op, slice_ranks, "slice_ranks", 1);
  check_shape(op, slice_ranks, "slice_ranks", {S});
  const int32_t* caps = slice_ranks.data_ptr<int32_t>();
  for (int64_t i = 0; i < S; ++i)
    LLMCHAT_CHECK(caps[i] >= 0, op, "slice_ranks must be non-negative, got ", slice_ranks);
  check_dim(op, b, "b", 2);
  check_contiguous(op, b, "b");
  check_shape(op, b, "b", {slots, lora_b_offset(so, caps, int(S))});

  check_int32_matrix(op, rank_offsets, "rank_offsets", 2);
  check_shape(op, rank_offsets, "rank_offsets", {slots, S + 1});
  const int32_t* ro = rank_offsets.data_ptr<int32_t>();
  for (int64_t s = 0; s < slots; ++s)
    for (int64_t i = 0; i <= S; ++i) {
      const int32_t v = ro[s * (S + 1) + i];
      LLMCHAT_CHECK(v >= 0 && v <= rank && (i == 0 || ro[s * (S + 1) + i - 1] <= v), op, "rank_offsets row ", s,
                    " must be non-decreasing in [0, ", rank, "], got ", rank_offsets[s]);
      LLMCHAT_CHECK(i == 0 || v - ro[s * (S + 1) + i - 1] <= caps[i - 1], op, "rank_offsets row ", s, " gives slice ",
                    i - 1, " more rank rows than slice_ranks allows (", caps[i - 1], "), got ", rank_offsets[s]);
    }

  check_int32_matrix(op, segments, "segments", 2);
  LLMCHAT_CHECK(segments.size(1) == 3, op, "segments must be [N, 3] rows of (slot, start, end), got shape ",
                segments.sizes());
  const int32_t* sg = segments.data_ptr<int32_t>();
  int64_t prev_end = 0;
  for (int64_t i = 0; i < segments.size(0); ++i) {
    const int32_t slot = sg[3 * i], start = sg[3 * i + 1], end = sg[3 * i + 2];
    LLMCHAT_CHECK(slot >= 0 && slot < slots, op, "segments slot must be in [0, ", slots, "), got ", slot, " in row ", i);
    LLMCHAT_CHECK(start >= prev_end && start <= end && end <= T, op, "segments must be ordered, disjoint token ranges "
                  "within [0, ", T, "], got (", start, ", ", end, ") in row ", i);
    prev_end = end;
  }

  LoraArgs args;
  args.dtype = kernel_dtype(op, x, "x");
  args.a = a.data_ptr(), args.b = b.data_ptr();
  args.num_tokens = T, args.slots = slots, args.rank = rank, args.in = in, args.out_features = N;
  args.rank_offsets = ro, args.slice_offsets = so, args.slice_ranks = caps, args.num_slices = int(S);
  args.segments = sg, args.num_segments = segments.size(0);
  return args;
}

}  // namespace llmchat::binding
