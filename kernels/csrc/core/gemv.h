// Small-M linear (decode GEMV/GEMM): out[M, N] = x[M, K] @ W[N, K]^T (+ bias), torch-free.
// Decode is bound by reading W once per step, so the kernel streams W rows exactly once per call
// (a few rows at a time, every token of the batch reuses them from L1) and splits N across threads.
#pragma once
#include <cstdint>

#include "kernels.h"

namespace llmchat {

struct LinearArgs {
  DType dtype = DType::F32;      // x, weight, bias and out all have this dtype
  const void* x = nullptr;       // [M, K], row stride x_stride (elements), last dim contiguous
  int64_t x_stride = 0;
  const void* weight = nullptr;  // [N, K] contiguous, or bf16 panels when packed (see below)
  bool packed = false;
  const void* bias = nullptr;    // [N] or null
  void* out = nullptr;           // [M, N], row stride out_stride
  int64_t out_stride = 0;
  int64_t m = 0, n = 0, k = 0;
};

// Packed bf16 weight: panels of 16 rows, [ceil(N/16)][ceil(K/2)][16 rows][2 k] (zero padded), so one
// 64-byte load holds a k-pair of 16 output rows: core/packed_linear.cpp broadcasts a token's k-pair and
// accumulates 16 outputs per pair-dot (VDPBF16PS on AVX512-BF16, four BFDOTs on NEON with bf16) without
// horizontal sums. Elsewhere a portable loop reads the panels (correct, slow): pack only where
// linear_packed_native() says so.
bool linear_packed_native();
// fp32 accumulation; the result is rounded to the dtype once, like torch's linear.
void linear_small_m(const LinearArgs& a, const Runtime& rt);

}  // namespace llmchat
