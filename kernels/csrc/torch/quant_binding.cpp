// Torch layer of the quantized linear and row dequantization: schemas, input checks, pointers.
#include <torch/library.h>

#include "../core/gguf_tiles.h"
#include "../core/quant_linear.h"
#include "../core/quant_tiles_neon.h"
#include "checks.h"
#include "quant_checks.h"

namespace llmchat::binding {
namespace {

void quant_linear_op(const at::Tensor& x, const at::Tensor& values, const at::Tensor& high, const at::Tensor& scales,
                     const at::Tensor& mins, int64_t kind, int64_t min_offset, const std::optional<at::Tensor>& bias,
                     at::Tensor& out) {
  const char* op = "quant_linear";
  QuantLinearArgs a;
  a.w = quant_weight_view(op, values, high, scales, mins, kind, min_offset);
  check_cpu(op, x, "x");
  check_cpu(op, out, "out");
  check_dim(op, x, "x", 2);
  check_dim(op, out, "out", 2);
  check_last_dim_contiguous(op, x, "x");
  check_last_dim_contiguous(op, out, "out");
  a.dtype = kernel_dtype(op, x, "x");
  check_same_dtype(op, out, "out", x, "x");
  LLMCHAT_CHECK(x.size(1) == a.w.k, op, "x must be [M, ", a.w.k, "] to match the weight, got ", x.sizes());
  check_shape(op, out, "out", {x.size(0), a.w.n});
  if (bias.has_value()) {
    check_cpu(op, *bias, "bias");
    check_same_dtype(op, *bias, "bias", x, "x");
    check_contiguous(op, *bias, "bias");
    check_shape(op, *bias, "bias", {a.w.n});
    a.bias = bias->data_ptr();
  }
  a.x = x.data_ptr(), a.x_stride = x.stride(0);
  a.out = out.data_ptr(), a.out_stride = out.stride(0);
  a.m = x.size(0);
  quant_linear(a, torch_runtime());
}

void quant_rows_op(const at::Tensor& ids, const at::Tensor& values, const at::Tensor& high, const at::Tensor& scales,
                   const at::Tensor& mins, int64_t kind, int64_t min_offset, at::Tensor& out) {
  const char* op = "quant_rows";
  const QuantWeightView w = quant_weight_view(op, values, high, scales, mins, kind, min_offset);
  check_cpu(op, ids, "ids");
  check_dim(op, ids, "ids", 1);
  check_contiguous(op, ids, "ids");
  check_dtype(op, ids, "ids", at::kLong);
  check_cpu(op, out, "out");
  check_dim(op, out, "out", 2);
  check_last_dim_contiguous(op, out, "out");
  check_shape(op, out, "out", {ids.size(0), w.k});
  const DType dt = kernel_dtype(op, out, "out");
  if (ids.numel() > 0) {
    auto [lo, hi] = int64_range(ids);
    LLMCHAT_CHECK(lo >= 0 && hi < w.n, op, "ids must lie in [0, ", w.n, "), got [", lo, ", ", hi, "]");
  }
  quant_rows(w, ids.data_ptr<int64_t>(), ids.size(0), dt, out.data_ptr(), out.stride(0), torch_runtime());
}

// GGUF blocks -> the tensors of a layout (core/gguf_tiles.h: 0 rows, 1 x86's tiles, 2 ARM's); the outputs' sizes
// say which tensors the type has.
void gguf_tiles_op(const at::Tensor& raw, int64_t type, int64_t rows, int64_t cols, const std::optional<at::Tensor>& order,
                   int64_t layout, bool q6_wide, at::Tensor& values, at::Tensor& high, at::Tensor& scales, at::Tensor& mins) {
  const char* op = "gguf_tiles";
  LLMCHAT_CHECK(type >= 0 && type <= int64_t(GgufType::Q6_K), op, "unknown GGUF block type code ", type);
  GgufTileArgs a;
  a.type = GgufType(type);
  const int64_t row_bytes = gguf_row_bytes(a.type, cols);
  LLMCHAT_CHECK(row_bytes > 0, op, "rows of ", cols, " elements are not whole blocks of this type");
  LLMCHAT_CHECK(layout >= 0 && layout <= 2, op, "layout must be 0 (rows), 1 (x86 tiles) or 2 (ARM tiles), got ", layout);
  a.layout = GgufLayout(layout);
  const bool tiles = a.layout != GgufLayout::Rows;
  LLMCHAT_CHECK(rows > 0 && (!tiles || rows % 16 == 0), op, "rows must be positive", tiles ? " and a multiple of 16" : "",
                ", got ", rows);
  check_cpu(op, raw, "raw");
  check_contiguous(op, raw, "raw");
  check_dtype(op, raw, "raw", at::kByte);
  LLMCHAT_CHECK(raw.numel() == rows * row_bytes, op, "raw must hold ", rows * row_bytes, " bytes, got ", raw.numel());
  if (order.has_value()) {
    check_cpu(op, *order, "order");
    check_contiguous(op, *order, "order");
    check_dtype(op, *order, "order", at::kLong);
    check_shape(op, *order, "order", {rows});
    auto [lo, hi] = int64_range(*order);
    LLMCHAT_CHECK(lo >= 0 && hi < rows, op, "order must lie in [0, ", rows, "), got [", lo, ", ", hi, "]");
    a.order = order->data_ptr<int64_t>();
  }
  const bool k_quant = a.type >= GgufType::Q4_K;
  const bool nibbles = a.type != GgufType::Q8_0 && !(a.type == GgufType::Q6_K && q6_wide);
  const bool has_high = a.type == GgufType::Q5_0 || a.type == GgufType::Q5_1 || a.type == GgufType::Q5_K ||
                        (a.type == GgufType::Q6_K && !q6_wide);
  const bool has_mins = a.type == GgufType::Q4_1 || a.type == GgufType::Q5_1 || a.type == GgufType::Q4_K ||
                        a.type == GgufType::Q5_K;
  const int64_t planes = a.type == GgufType::Q6_K ? 2 : 1;
  const int64_t factor_bytes = !k_quant ? rows * (cols / 32) * 2
                               : tiles ? (a.type == GgufType::Q6_K ? rows * 18 * (cols / 256) : rows * 8 * (cols / 256))
                               : rows * (cols / (a.type == GgufType::Q6_K ? 16 : 32)) * 4;   // fp32 per sub-block
  auto check_out = [&](const at::Tensor& t, const char* name, int64_t bytes) {
    check_cpu(op, t, name);
    check_contiguous(op, t, name);
    LLMCHAT_CHECK(t.nbytes() == size_t(bytes), op, name, " must hold ", bytes, " bytes, got ", t.nbytes());
  };
  check_out(values, "values", rows * (nibbles ? cols / 2 : cols));
  check_out(high, "high", has_high ? rows * planes * (cols / 32) * 4 : 0);
  check_out(scales, "scales", factor_bytes);
  check_out(mins, "mins", has_mins ? factor_bytes : 0);
  a.raw = raw.data_ptr<uint8_t>();
  a.rows = rows, a.cols = cols, a.q6_wide = q6_wide;
  a.values = static_cast<uint8_t*>(values.data_ptr());
  a.high = has_high ? static_cast<uint8_t*>(high.data_ptr()) : nullptr;
  a.scales = static_cast<uint8_t*>(scales.data_ptr());
  a.mins = has_mins ? static_cast<uint8_t*>(mins.data_ptr()) : nullptr;
  gguf_to_tiles(a, torch_runtime());
}

std::string quant_isa_op() { return quant_isa_name(); }
std::string quant_tiles_isa_op() { return neon_tiles_compiled() ? quant_tiles_neon_isa() : quant_tiles_isa(); }

}  // namespace
}  // namespace llmchat::binding

TORCH_LIBRARY_FRAGMENT(llmchat, m) {
  m.def("quant_linear(Tensor x, Tensor values, Tensor high, Tensor scales, Tensor mins, int kind, int min_offset, "
        "Tensor? bias, Tensor(a!) out) -> ()");
  m.def("quant_rows(Tensor ids, Tensor values, Tensor high, Tensor scales, Tensor mins, int kind, int min_offset, "
        "Tensor(a!) out) -> ()");
  m.def("gguf_tiles(Tensor raw, int type, int rows, int cols, Tensor? order, int layout, bool q6_wide, "
        "Tensor(a!) values, Tensor(b!) high, Tensor(c!) scales, Tensor(d!) mins) -> ()");
  m.def("quant_isa() -> str", &llmchat::binding::quant_isa_op);
  m.def("quant_tiles_isa() -> str", &llmchat::binding::quant_tiles_isa_op);
}

TORCH_LIBRARY_IMPL(llmchat, CPU, m) {
  m.impl("quant_linear", &llmchat::binding::quant_linear_op);
  m.impl("quant_rows", &llmchat::binding::quant_rows_op);
  m.impl("gguf_tiles", &llmchat::binding::gguf_tiles_op);
}
