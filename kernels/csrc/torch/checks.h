// Input checks at the op boundary (never in inner loops). Failures raise Python ValueError with the
// op name, the argument and what was expected.
#pragma once
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "worker_pool.h"

#include "../core/kernels.h"

namespace llmchat::binding {

#define LLMCHAT_CHECK(cond, op, ...) TORCH_CHECK_VALUE(cond, "llmchat.kernels.", op, ": ", __VA_ARGS__)

inline DType kernel_dtype(const char* op, const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::F32;
    case at::kBFloat16: return DType::BF16;
    case at::kHalf: return DType::F16;
    default:
      LLMCHAT_CHECK(false, op, name, " must be float32, bfloat16 or float16, got ", t.scalar_type());
  }
  return DType::F32;
}

inline void check_cpu(const char* op, const at::Tensor& t, const char* name) {
  LLMCHAT_CHECK(t.device().is_cpu(), op, name, " must be on the CPU, got ", t.device());
}

inline void check_dim(const char* op, const at::Tensor& t, const char* name, int64_t dim) {
  LLMCHAT_CHECK(t.dim() == dim, op, name, " must have ", dim, " dimensions, got shape ", t.sizes());
}

inline void check_dtype(const char* op, const at::Tensor& t, const char* name, at::ScalarType want) {
  LLMCHAT_CHECK(t.scalar_type() == want, op, name, " must be ", want, ", got ", t.scalar_type());
}

inline void check_same_dtype(const char* op, const at::Tensor& t, const char* name, const at::Tensor& ref, const char* ref_name) {
  LLMCHAT_CHECK(t.scalar_type() == ref.scalar_type(), op, name, " must have the dtype of ", ref_name, " (",
                ref.scalar_type(), "), got ", t.scalar_type());
}

// A norm weight in x's dtype, or fp32 (Gemma's 1 + w, see kernels.h rms_norm); returns whether it is fp32.
inline bool norm_weight_is_f32(const char* op, const at::Tensor& weight, const at::Tensor& x) {
  if (weight.scalar_type() == at::kFloat) return true;
  check_same_dtype(op, weight, "weight", x, "x");
  return false;
}

inline void check_contiguous(const char* op, const at::Tensor& t, const char* name) {
  LLMCHAT_CHECK(t.is_contiguous(), op, name, " must be contiguous (shape ", t.sizes(), ", strides ", t.strides(), ")");
}

inline void check_last_dim_contiguous(const char* op, const at::Tensor& t, const char* name) {
  LLMCHAT_CHECK(t.size(-1) <= 1 || t.stride(-1) == 1, op, name, " must be contiguous in its last dimension, got strides ",
                t.strides());
}

inline void check_shape(const char* op, const at::Tensor& t, const char* name, at::IntArrayRef want) {
  LLMCHAT_CHECK(t.sizes() == want, op, name, " must have shape ", want, ", got ", t.sizes());
}

// [min, max] of a contiguous int64 tensor by a plain loop: a torch reduction plus .item() costs several
// microseconds per call, and these checks run on every op of every layer.
inline std::pair<int64_t, int64_t> int64_range(const at::Tensor& t) {
  const int64_t* p = t.data_ptr<int64_t>();
  int64_t lo = p[0], hi = p[0];
  for (int64_t i = 1, n = t.numel(); i < n; ++i) lo = std::min(lo, p[i]), hi = std::max(hi, p[i]);
  return {lo, hi};
}

// As many threads as torch uses (torch.set_num_threads), from the kernels' own pool (worker_pool.h says why
// not at::parallel_for). Torch ops and kernels run one after another on the engine thread, so the two
// pools take turns on the same cores.
inline Runtime torch_runtime() {
  Runtime rt;
  rt.num_threads = at::get_num_threads();
  rt.parallel_for = [threads = rt.num_threads](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    worker_pool().run(n, grain, threads, fn);
  };
  return rt;
}

}  // namespace llmchat::binding
