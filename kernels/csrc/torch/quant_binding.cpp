// Torch layer of the quantized linear and row dequantization: schemas, input checks, pointers.
#include <torch/library.h>

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

std::string quant_isa_op() { return quant_isa_name(); }
std::string quant_tiles_isa_op() { return neon_tiles_compiled() ? quant_tiles_neon_isa() : quant_tiles_isa(); }

}  // namespace
}  // namespace llmchat::binding

TORCH_LIBRARY_FRAGMENT(llmchat, m) {
  m.def("quant_linear(Tensor x, Tensor values, Tensor high, Tensor scales, Tensor mins, int kind, int min_offset, "
        "Tensor? bias, Tensor(a!) out) -> ()");
  m.def("quant_rows(Tensor ids, Tensor values, Tensor high, Tensor scales, Tensor mins, int kind, int min_offset, "
        "Tensor(a!) out) -> ()");
  m.def("quant_isa() -> str", &llmchat::binding::quant_isa_op);
  m.def("quant_tiles_isa() -> str", &llmchat::binding::quant_tiles_isa_op);
}

TORCH_LIBRARY_IMPL(llmchat, CPU, m) {
  m.impl("quant_linear", &llmchat::binding::quant_linear_op);
  m.impl("quant_rows", &llmchat::binding::quant_rows_op);
}
