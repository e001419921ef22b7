// Input checks of a quantized weight's tensors (see core/quant_linear.h), shared by the quant_linear and
// decoder_stack bindings.
#pragma once
#include "../core/quant_linear.h"
#include "../core/quant_tiles.h"
#include "../core/quant_tiles_neon.h"
#include "checks.h"

namespace llmchat::binding {

// Checks a weight's tensors against its kind (see core/quant_linear.h) and returns the view. Scales (and mins)
// are float32 or float16; min_offset (0, or a power of two with no mins) gives min = min_offset * scale.
inline QuantWeightView quant_weight_view(const char* op, const at::Tensor& values, const at::Tensor& high,
                                         const at::Tensor& scales, const at::Tensor& mins, int64_t kind,
                                         int64_t min_offset) {
  LLMCHAT_CHECK((kind >= 0 && kind <= 7) || kind == 12 || kind == 16 || kind == 20, op,
                "kind must be 0 (q8), 1 (q8 halves), 2 (q4), 3 (q5) or 16 (q6), plus 4 for the tile layout "
                "(12: q8 tiled with 16-bit activations), got ", kind);
  QuantWeightView w;
  w.kind = (kind & 16) ? QuantKind::Q6 : QuantKind(kind & 3);
  w.tiled = (kind & 4) != 0;
  w.wide_activations = kind == 12;
  // ARM builds tile every kind in their own layout (core/quant_tiles_neon.h)
  LLMCHAT_CHECK(!w.tiled || quant_tiles_compiled() || (neon_tiles_compiled() && neon_tiles_take(w.kind)), op,
                "this build has no tile layout for this kind (x86 needs AVX512-VNNI)");
  LLMCHAT_CHECK(!w.wide_activations || quant_tiles_compiled(), op,
                "16-bit activations run on the x86 tile layout only (AVX512-VNNI)");
  const bool nibbles = w.kind == QuantKind::Q4 || w.kind == QuantKind::Q5;  // the kinds with mins or offsets
  const bool nibble_values = nibbles || w.kind == QuantKind::Q6;
  for (auto [t, name] : {std::pair{&values, "values"}, {&scales, "scales"}}) {
    check_cpu(op, *t, name);
    check_contiguous(op, *t, name);
    check_dim(op, *t, name, 2);
  }
  check_dtype(op, values, "values", nibble_values ? at::kByte : at::kChar);
  LLMCHAT_CHECK(scales.scalar_type() == at::kFloat || scales.scalar_type() == at::kHalf ||
                    scales.scalar_type() == at::kByte, op,
                "scales must be float32, float16 or uint8 (compact K-quant factors), got ", scales.scalar_type());
  w.half_factors = scales.scalar_type() == at::kHalf;
  w.compact_factors = scales.scalar_type() == at::kByte;
  w.n = values.size(0), w.k = values.size(1) * (nibble_values ? 2 : 1);
  LLMCHAT_CHECK(w.k % 32 == 0 && w.k > 0, op, "K must be a positive multiple of 32, got ", w.k);
  const int64_t nb = w.k / 32;
  LLMCHAT_CHECK(!w.tiled || w.n % kTileRows == 0, op, "a tiled weight has a multiple of 16 rows, got ", w.n);
  LLMCHAT_CHECK(!w.compact_factors || (w.tiled && w.kind != QuantKind::Q8 && w.k % 256 == 0), op,
                "compact (uint8) factors are for K-quant weights (K % 256 == 0) in a tile layout");
  const int64_t subs = w.kind == QuantKind::Q8Halves || w.kind == QuantKind::Q6 ? 2 * nb : nb;
  // compact: Q4_K/Q5_K's integers in 6 bits (8 bytes a row per 256 with the fp16), Q6_K's in 8 (quant_tiles.h)
  const int64_t compact_cols = nibbles ? 8 * (w.k / 256) : subs + 2 * (w.k / 256);
  check_shape(op, scales, "scales", {w.n, w.compact_factors ? compact_cols : subs});
  w.values = values.data_ptr(), w.scales = scales.data_ptr();
  if (w.kind == QuantKind::Q5 || w.kind == QuantKind::Q6) {
    check_cpu(op, high, "high");
    check_contiguous(op, high, "high");
    check_dtype(op, high, "high", at::kInt);
    check_shape(op, high, "high", {w.n, w.kind == QuantKind::Q6 ? 2 * nb : nb});
    w.high = reinterpret_cast<const uint32_t*>(high.data_ptr<int32_t>());
  }
  if (mins.numel() > 0) {
    LLMCHAT_CHECK(nibbles, op, "only the 4/5-bit kinds have mins");
    check_cpu(op, mins, "mins");
    check_contiguous(op, mins, "mins");
    check_dtype(op, mins, "mins", scales.scalar_type());
    check_shape(op, mins, "mins", {w.n, w.compact_factors ? compact_cols : nb});
    w.mins = mins.data_ptr();
  }
  const int64_t m = min_offset < 0 ? -min_offset : min_offset;
  LLMCHAT_CHECK(m == 0 || (nibbles && mins.numel() == 0 && m <= 64 && (m & (m - 1)) == 0), op,
                "min_offset must be 0, or a power of two up to 64 for a 4/5-bit weight without mins, got ", min_offset);
  w.min_offset = int(min_offset);
  return w;
}

}  // namespace llmchat::binding
