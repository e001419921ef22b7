// Thin torch layer over the torch-free core: schemas, input checks, pointer/stride extraction.
#include <Python.h>
#include <torch/library.h>

#include "attention_binding.h"
#include "checks.h"
#include "../core/cpu_features.h"

namespace llmchat::binding {
namespace {

void rms_norm_op(const at::Tensor& x, const at::Tensor& weight, double eps, at::Tensor& out) {
  const char* op = "rms_norm";
  check_cpu(op, x, "x");
  check_dim(op, x, "x", 2);
  check_last_dim_contiguous(op, x, "x");
  const DType dt = kernel_dtype(op, x, "x");
  const bool f32_weight = norm_weight_is_f32(op, weight, x);
  check_same_dtype(op, out, "out", x, "x");
  check_shape(op, weight, "weight", {x.size(1)});
  check_contiguous(op, weight, "weight");
  check_shape(op, out, "out", x.sizes());
  check_last_dim_contiguous(op, out, "out");
  rms_norm(dt, x.data_ptr(), x.stride(0), weight.data_ptr(), out.data_ptr(), out.stride(0), x.size(0), x.size(1),
           float(eps), torch_runtime(), f32_weight);
}

void fused_add_rms_norm_op(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps) {
  const char* op = "fused_add_rms_norm";
  check_cpu(op, x, "x");
  check_dim(op, x, "x", 2);
  check_last_dim_contiguous(op, x, "x");
  const DType dt = kernel_dtype(op, x, "x");
  check_same_dtype(op, residual, "residual", x, "x");
  const bool f32_weight = norm_weight_is_f32(op, weight, x);
  check_shape(op, residual, "residual", x.sizes());
  check_last_dim_contiguous(op, residual, "residual");
  check_shape(op, weight, "weight", {x.size(1)});
  check_contiguous(op, weight, "weight");
  fused_add_rms_norm(dt, x.data_ptr(), x.stride(0), residual.data_ptr(), residual.stride(0), weight.data_ptr(), x.size(0),
                     x.size(1), float(eps), torch_runtime(), f32_weight);
}

using GatedActivation = void (*)(DType, const void*, int64_t, void*, int64_t, int64_t, int64_t, const Runtime&);

// x [T, 2I] -> out [T, I] through a gated activation (silu_and_mul, gelu_tanh_and_mul)
void gated_activation(const char* op, GatedActivation fn, const at::Tensor& x, at::Tensor& out) {
  check_cpu(op, x, "x");
  check_dim(op, x, "x", 2);
  check_last_dim_contiguous(op, x, "x");
  const DType dt = kernel_dtype(op, x, "x");
  LLMCHAT_CHECK(x.size(1) % 2 == 0, op, "x must have an even last dimension [T, 2*I], got shape ", x.sizes());
  check_same_dtype(op, out, "out", x, "x");
  check_shape(op, out, "out", {x.size(0), x.size(1) / 2});
  check_last_dim_contiguous(op, out, "out");
  fn(dt, x.data_ptr(), x.stride(0), out.data_ptr(), out.stride(0), x.size(0), x.size(1) / 2, torch_runtime());
}

void silu_and_mul_op(const at::Tensor& x, at::Tensor& out) { gated_activation("silu_and_mul", silu_and_mul, x, out); }

void gelu_tanh_and_mul_op(const at::Tensor& x, at::Tensor& out) {
  gated_activation("gelu_tanh_and_mul", gelu_tanh_and_mul, x, out);
}

// query/key may be [T, H*D] or [T, H, D]; returns (stride per token, stride per head) in elements.
std::pair<int64_t, int64_t> head_strides(const char* op, const at::Tensor& t, const char* name, int64_t head_size) {
  LLMCHAT_CHECK(t.dim() == 2 || t.dim() == 3, op, name, " must be [T, H*D] or [T, H, D], got shape ", t.sizes());
  check_last_dim_contiguous(op, t, name);
  if (t.dim() == 2) {
    LLMCHAT_CHECK(t.size(1) % head_size == 0, op, name, " last dimension ", t.size(1), " is not a multiple of head_size ",
                  head_size);
    return {t.stride(0), head_size};
  }
  LLMCHAT_CHECK(t.size(2) == head_size, op, name, " last dimension must be head_size ", head_size, ", got ", t.sizes());
  return {t.stride(0), t.stride(1)};
}

void rotary_embedding_op(const at::Tensor& positions, at::Tensor& query, at::Tensor& key, const at::Tensor& cos_sin_cache,
                         int64_t head_size, bool is_neox) {
  const char* op = "rotary_embedding";
  for (auto [t, name] : {std::pair{&positions, "positions"}, {&query, "query"}, {&key, "key"}, {&cos_sin_cache, "cos_sin_cache"}})
    check_cpu(op, *t, name);
  check_dim(op, positions, "positions", 1);
  check_dtype(op, positions, "positions", at::kLong);
  check_contiguous(op, positions, "positions");
  LLMCHAT_CHECK(head_size > 0 && head_size % 2 == 0, op, "head_size must be a positive even number, got ", head_size);
  const DType dt = kernel_dtype(op, query, "query");
  check_same_dtype(op, key, "key", query, "query");
  check_dim(op, cos_sin_cache, "cos_sin_cache", 2);
  check_dtype(op, cos_sin_cache, "cos_sin_cache", at::kFloat);
  check_contiguous(op, cos_sin_cache, "cos_sin_cache");
  const int64_t rot_dim = cos_sin_cache.size(1);
  LLMCHAT_CHECK(rot_dim % 2 == 0 && rot_dim > 0 && rot_dim <= head_size, op, "cos_sin_cache last dimension (rot_dim) must be even and <= head_size ",
                head_size, ", got ", rot_dim);
  const auto [qst, qsh] = head_strides(op, query, "query", head_size);
  const auto [kst, ksh] = head_strides(op, key, "key", head_size);
  const int64_t T = positions.size(0);
  LLMCHAT_CHECK(query.size(0) == T && key.size(0) == T, op, "query ", query.sizes(), " and key ", key.sizes(),
                " must have one row per position (", T, ")");
  if (T > 0) {
    const auto [lo, hi] = int64_range(positions);
    LLMCHAT_CHECK(lo >= 0 && hi < cos_sin_cache.size(0), op, "positions must be in [0, ", cos_sin_cache.size(0),
                  "), got [", lo, ", ", hi, "]");
  }
  RotaryArgs a;
  a.dtype = dt;
  a.positions = positions.data_ptr<int64_t>();
  a.query = query.data_ptr();
  a.q_stride_token = qst, a.q_stride_head = qsh;
  a.key = key.data_ptr();
  a.k_stride_token = kst, a.k_stride_head = ksh;
  a.cos_sin_cache = cos_sin_cache.data_ptr<float>();
  a.num_tokens = T;
  a.num_q_heads = int(query.dim() == 3 ? query.size(1) : query.size(1) / head_size);
  a.num_kv_heads = int(key.dim() == 3 ? key.size(1) : key.size(1) / head_size);
  a.head_size = int(head_size), a.rot_dim = int(rot_dim), a.is_neox = is_neox;
  rotary_embedding(a, torch_runtime());
}

std::string isa_op() { return isa_name(); }
std::string compiled_cpu_features_op() { return compiled_cpu_features(); }
std::string missing_cpu_features_op() { return missing_cpu_features(); }

double read_sum_op(const at::Tensor& x) {
  const char* op = "read_sum";
  check_cpu(op, x, "x");
  check_dtype(op, x, "x", at::kFloat);
  check_contiguous(op, x, "x");
  return read_sum(x.data_ptr<float>(), x.numel(), torch_runtime());
}

double read_runs_sum_op(const at::Tensor& x, const at::Tensor& run_starts, int64_t run_floats) {
  const char* op = "read_runs_sum";
  check_cpu(op, x, "x");
  check_dtype(op, x, "x", at::kFloat);
  check_contiguous(op, x, "x");
  check_cpu(op, run_starts, "run_starts");
  check_dtype(op, run_starts, "run_starts", at::kLong);
  check_contiguous(op, run_starts, "run_starts");
  TORCH_CHECK(run_starts.dim() == 1, op, ": run_starts must be 1-D, got ", run_starts.dim(), " dims");
  TORCH_CHECK(run_floats > 0, op, ": run_floats must be positive, got ", run_floats);
  if (run_starts.numel() > 0) {
    const int64_t lo = run_starts.min().item<int64_t>(), hi = run_starts.max().item<int64_t>();
    TORCH_CHECK(lo >= 0 && hi + run_floats <= x.numel(), op, ": runs [", lo, ", ", hi + run_floats,
                ") fall outside x's ", x.numel(), " elements");
  }
  return read_runs_sum(x.data_ptr<float>(), run_floats, run_starts.data_ptr<int64_t>(), run_starts.numel(),
                       torch_runtime());
}

}  // namespace
}  // namespace llmchat::binding

TORCH_LIBRARY(llmchat, m) {
  m.def("paged_attention(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, Tensor seq_lens, "
        "Tensor query_start_loc, float scale, int sliding_window, Tensor(a!) out) -> ()");
  m.def("write_kv_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor slot_mapping) -> ()");
  m.def("copy_blocks(Tensor(a!)[] key_caches, Tensor(b!)[] value_caches, Tensor block_mapping) -> ()");
  m.def("rms_norm(Tensor x, Tensor weight, float eps, Tensor(a!) out) -> ()");
  m.def("fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()");
  m.def("rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!) key, Tensor cos_sin_cache, int head_size, "
        "bool is_neox) -> ()");
  m.def("silu_and_mul(Tensor x, Tensor(a!) out) -> ()");
  m.def("gelu_tanh_and_mul(Tensor x, Tensor(a!) out) -> ()");
  m.def("isa() -> str", &llmchat::binding::isa_op);
  m.def("compiled_cpu_features() -> str", &llmchat::binding::compiled_cpu_features_op);
  m.def("missing_cpu_features() -> str", &llmchat::binding::missing_cpu_features_op);
  m.def("read_sum(Tensor x) -> float");
  m.def("read_runs_sum(Tensor x, Tensor run_starts, int run_floats) -> float");
}

TORCH_LIBRARY_IMPL(llmchat, CPU, m) {
  using namespace llmchat::binding;
  m.impl("paged_attention", &paged_attention_op);
  m.impl("write_kv_cache", &write_kv_cache_op);
  m.impl("copy_blocks", &copy_blocks_op);
  m.impl("rms_norm", &rms_norm_op);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm_op);
  m.impl("rotary_embedding", &rotary_embedding_op);
  m.impl("silu_and_mul", &silu_and_mul_op);
  m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul_op);
  m.impl("read_sum", &read_sum_op);
  m.impl("read_runs_sum", &read_runs_sum_op);
}

// Importing llmchat.kernels._C (or a portable build's _C_<level>, kernels/variants.py) runs the static
// registrations above; the module itself is empty. Its name comes from the build (TORCH_EXTENSION_NAME).
#ifndef TORCH_EXTENSION_NAME
#define TORCH_EXTENSION_NAME _C
#endif
#define LLMCHAT_STR2(x) #x
#define LLMCHAT_STR(x) LLMCHAT_STR2(x)
#define LLMCHAT_INIT2(x) PyInit_##x
#define LLMCHAT_INIT(x) LLMCHAT_INIT2(x)
static PyModuleDef llmchat_module = {PyModuleDef_HEAD_INIT, LLMCHAT_STR(TORCH_EXTENSION_NAME),
                                     "llmchat compiled CPU kernels", -1, nullptr};
PyMODINIT_FUNC LLMCHAT_INIT(TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&llmchat_module); }
