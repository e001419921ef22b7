// Torch layer of the quantized linear and row dequantization: schemas, input checks, pointers.
#include <torch/library.h>

#include "../core/quant_linear.h"
#include "checks.h"

namespace llmchat::binding {
namespace {

// Checks a weight's tensors against its kind (see core/quant_linear.h) and returns the view.
QuantWeightView weight_view(const char* op, const at::Tensor& values, const at::Tensor& high, const at::Tensor& scales,
                            const at::Tensor& mins, int64_t kind) {
  LLMCHAT_CHECK(kind >= 0 && kind <= 3, op, "kind must be 0 (q8), 1 (q8 halves), 2 (q4) or 3 (q5), got ", kind);
  QuantWeightView w;
  w.kind = QuantKind(kind);
  const bool nibbles = w.kind == QuantKind::Q4 || w.kind == QuantKind::Q5;
  for (auto [t, name] : {std::pair{&values, "values"}, {&scales, "scales"}}) {
    check_cpu(op, *t, name);
    check_contiguous(op, *t, name);
    check_dim(op, *t, name, 2);
  }
  check_dtype(op, values, "values", nibbles ? at::kByte : at::kChar);
  check_dtype(op, scales, "scales", at::kFloat);
  w.n = values.size(0), w.k = values.size(1) * (nibbles ? 2 : 1);
  LLMCHAT_CHECK(w.k % 32 == 0 && w.k > 0, op, "K must be a positive multiple of 32, got ", w.k);
  const int64_t nb = w.k / 32;
  check_shape(op, scales, "scales", {w.n, w.kind == QuantKind::Q8Halves ? 2 * nb : nb});
  w.values = values.data_ptr(), w.scales = scales.data_ptr<float>();
  if (w.kind == QuantKind::Q5) {
    check_cpu(op, high, "high");
    check_contiguous(op, high, "high");
    check_dtype(op, high, "high", at::kInt);
    check_shape(op, high, "high", {w.n, nb});
    w.high = reinterpret_cast<const uint32_t*>(high.data_ptr<int32_t>());
  }
  if (mins.numel() > 0) {
    LLMCHAT_CHECK(nibbles, op, "only the 4/5-bit kinds have mins");
    check_cpu(op, mins, "mins");
    check_contiguous(op, mins, "mins");
    check_dtype(op, mins, "mins", at::kFloat);
    check_shape(op, mins, "mins", {w.n, nb});
    w.mins = mins.data_ptr<float>();
  }
  return w;
}

void quant_linear_op(const at::Tensor& x, const at::Tensor& values, const at::Tensor& high, const at::Tensor& scales,
                     const at::Tensor& mins, int64_t kind, const std::optional<at::Tensor>& bias, at::Tensor& out) {
  const char* op = "quant_linear";
  QuantLinearArgs a;
  a.w = weight_view(op, values, high, scales, mins, kind);
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
                   const at::Tensor& mins, int64_t kind, at::Tensor& out) {
  const char* op = "quant_rows";
  const QuantWeightView w = weight_view(op, values, high, scales, mins, kind);
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

}  // namespace
}  // namespace llmchat::binding

TORCH_LIBRARY_FRAGMENT(llmchat, m) {
  m.def("quant_linear(Tensor x, Tensor values, Tensor high, Tensor scales, Tensor mins, int kind, Tensor? bias, "
        "Tensor(a!) out) -> ()");
  m.def("quant_rows(Tensor ids, Tensor values, Tensor high, Tensor scales, Tensor mins, int kind, Tensor(a!) out) -> ()");
  m.def("quant_isa() -> str", &llmchat::binding::quant_isa_op);
}

TORCH_LIBRARY_IMPL(llmchat, CPU, m) {
  m.impl("quant_linear", &llmchat::binding::quant_linear_op);
  m.impl("quant_rows", &llmchat::binding::quant_rows_op);
}
