// Quantized linear: out[M, N] = x[M, K] @ W[N, K]^T (+ bias) with W in blocks of 32 weights, torch-free.
// Activations are quantized once per call to int8 in blocks of 32 (d = max|x| / 127, q = round-to-even(x / d)),
// and each weight block meets its activation block as exact int32 dots (partial sums of 4-8 elements per vector
// lane, qdot.h), converted and scaled in fp32:
//   out[m, n] = sum_b isum(m, n, b) * (scale[n, b] * d[m, b]) + sum_b min[n, b] * (d[m, b] * sum(q[m, b]))
// The order of those float operations is fixed by K alone (same for every M and thread split).
#pragma once
#include <cstdint>

#include "kernels.h"

namespace llmchat {

// How a weight's blocks are stored. Values are lossless repacks of the GGUF types (engine/quant/):
//   Q8:       int8 values [N, K]; scales [N, K/32]                       (Q8_0)
//   Q8Halves: int8 values [N, K]; scales [N, K/16], one per 16 elements  (Q6_K on ARM and AVX2)
//   Q4:       u8 nibbles [N, K/2], per block 16 bytes: low nibble = element j, high = element j + 16;
//             scales and mins [N, K/32]: w = scale * q + min                 (Q4_0, Q4_1, Q4_K)
//   Q5:       as Q4 plus qh [N, K/32] uint32, bit j = bit 4 of element j  (Q5_0, Q5_1, Q5_K)
//   Q6:       Q8Halves held in 6 bits: u = w + 32 (0..63) as Q4's nibbles [N, K/2] plus qh [N, K/16] uint32,
//             per block two words, bit j = bit 4, then bit 5, of element j; scales [N, K/16]  (Q6_K on AVX512-VNNI)
// Scales and mins are fp32, or fp16 where the file's are (half_factors: Q8_0, Q4_0/1, Q5_0/1 keep their bytes).
// Without mins, min_offset != 0 means min = min_offset * scale (Q4_0: -8, Q5_0: -16), nothing stored.
enum class QuantKind : int { Q8 = 0, Q8Halves = 1, Q4 = 2, Q5 = 3, Q6 = 4 };

struct QuantWeightView {
  QuantKind kind = QuantKind::Q8;
  int64_t n = 0, k = 0;            // k a multiple of 32
  const void* values = nullptr;    // int8 [N, K] or nibbles [N, K/2]
  const uint32_t* high = nullptr;  // Q5 and Q6 only
  const void* scales = nullptr;    // float, or fp16 bits with half_factors
  const void* mins = nullptr;      // Q4/Q5: [N, K/32] like scales, or null
  bool half_factors = false;
  bool compact_factors = false;    // tiled K-quants: uint8 [N, S + 2 K/256] (quant_tiles.h), else float/fp16
  int min_offset = 0;              // a power of two: min_offset * scale is exact
  bool tiled = false;              // the 16-row tile layout of quant_tiles.h (n % 16 == 0), else rows
  bool wide_activations = false;   // Q8 tiled only: activations in 16 bits (quant_tiles.h), else 8
};

struct QuantLinearArgs {
  DType dtype = DType::F32;      // x, bias and out
  const void* x = nullptr;       // [M, K], row stride x_stride
  int64_t x_stride = 0;
  QuantWeightView w;
  const void* bias = nullptr;    // [N] or null
  void* out = nullptr;           // [M, N], row stride out_stride (a column slice of a wider output is fine)
  int64_t out_stride = 0;
  int64_t m = 0;
};

// Multiply-adds a worker-pool chunk of a quantized matmul holds at least (every layout's). A decode step's
// [1536, 1536] projection then splits into 8 chunks where 2^20 gave 3 (one thread took two while the other
// waited): 97 -> 76 us a call on a Xeon, 2 threads.
inline constexpr int64_t kMinChunkMacs = int64_t(1) << 18;

void quant_linear(const QuantLinearArgs& a, const Runtime& rt);
const char* quant_isa_name();  // the block-dot path compiled in (qdot.h)

// The activation quantization quant_linear applies, for tests: q [M, K] int8, d and dsum [M, K/32].
void quantize_activations(DType dt, const void* x, int64_t x_stride, int64_t m, int64_t k, int8_t* q, float* d,
                          float* dsum, const Runtime& rt);

// Rows ids[i] of W dequantized (scale * q + min, exactly as the gguf package computes it) into out [R, K].
void quant_rows(const QuantWeightView& w, const int64_t* ids, int64_t num_ids, DType dt, void* out,
                int64_t out_stride, const Runtime& rt);

}  // namespace llmchat
