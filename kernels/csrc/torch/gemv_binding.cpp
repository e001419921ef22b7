// Torch layer of the small-M linear: schema, input checks, pointers. Its own library fragment, so the
// op lives in its own files next to bindings.cpp.
#include <torch/library.h>

#include <string>

#include "../core/gemv.h"
#include "../core/packed_linear.h"
#include "checks.h"

namespace llmchat::binding {
namespace {

void linear_small_m_op(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       at::Tensor& out) {
  const char* op = "linear_small_m";
  check_cpu(op, x, "x");
  check_cpu(op, weight, "weight");
  check_cpu(op, out, "out");
  check_dim(op, x, "x", 2);
  check_last_dim_contiguous(op, x, "x");
  const DType dt = kernel_dtype(op, x, "x");
  check_same_dtype(op, weight, "weight", x, "x");
  check_same_dtype(op, out, "out", x, "x");
  check_contiguous(op, weight, "weight");
  check_dim(op, out, "out", 2);
  check_last_dim_contiguous(op, out, "out");
  const int64_t N = out.size(1), K = x.size(1);
  LLMCHAT_CHECK(out.size(0) == x.size(0), op, "out must have one row per row of x ", x.sizes(), ", got ", out.sizes());
  const bool packed = weight.dim() == 3;
  if (packed) {  // bf16 panels [ceil(N/16), ceil(K/2), 32] from pack_linear_weight
    LLMCHAT_CHECK(dt == DType::BF16, op, "a packed weight must be bfloat16, got ", weight.scalar_type());
    check_shape(op, weight, "weight", {(N + 15) / 16, (K + 1) / 2, 32});
  } else {
    check_dim(op, weight, "weight", 2);
    LLMCHAT_CHECK(weight.size(1) == K, op, "weight must be [N, ", K, "] to match x ", x.sizes(), ", got ", weight.sizes());
    check_shape(op, out, "out", {x.size(0), weight.size(0)});
  }
  LinearArgs a;
  if (bias.has_value()) {
    check_cpu(op, *bias, "bias");
    check_same_dtype(op, *bias, "bias", x, "x");
    check_shape(op, *bias, "bias", {N});
    check_contiguous(op, *bias, "bias");
    a.bias = bias->data_ptr();
  }
  a.dtype = dt;
  a.x = x.data_ptr(), a.x_stride = x.stride(0);
  a.weight = weight.data_ptr(), a.packed = packed;
  a.out = out.data_ptr(), a.out_stride = out.stride(0);
  a.m = x.size(0), a.n = N, a.k = K;
  linear_small_m(a, torch_runtime());
}

bool linear_packed_native_op() { return linear_packed_native(); }
std::string packed_isa_op() { return packed_isa_name(); }

}  // namespace
}  // namespace llmchat::binding

TORCH_LIBRARY_FRAGMENT(llmchat, m) {
  m.def("linear_small_m(Tensor x, Tensor weight, Tensor? bias, Tensor(a!) out) -> ()");
  m.def("linear_packed_native() -> bool", &llmchat::binding::linear_packed_native_op);
  m.def("packed_isa() -> str", &llmchat::binding::packed_isa_op);
}

TORCH_LIBRARY_IMPL(llmchat, CPU, m) { m.impl("linear_small_m", &llmchat::binding::linear_small_m_op); }
