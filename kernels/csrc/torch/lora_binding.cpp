// Torch layer of the multi-adapter LoRA op: schema, input checks (including every index the core will
// follow: slots, rank ranges, slice columns, token segments), pointers. Its own library fragment.
#include <torch/library.h>

#include <string>

#include "lora_checks.h"

namespace llmchat::binding {
namespace {

void lora_apply_op(const at::Tensor& x, at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                   const at::Tensor& rank_offsets, const at::Tensor& slice_offsets, const at::Tensor& slice_ranks,
                   const at::Tensor& segments) {
  const char* op = "lora_apply";
  for (auto [t, name] : {std::pair{&x, "x"}, {&out, "out"}}) check_cpu(op, *t, name);
  check_dim(op, x, "x", 2);
  check_last_dim_contiguous(op, x, "x");
  kernel_dtype(op, x, "x");
  check_same_dtype(op, out, "out", x, "x");
  check_dim(op, out, "out", 2);
  check_last_dim_contiguous(op, out, "out");
  LLMCHAT_CHECK(out.size(0) == x.size(0), op, "out must have one row per row of x ", x.sizes(), ", got ", out.sizes());
  LoraArgs args = checked_lora_args(op, x, x.size(0), x.size(1), out.size(1), a, b, rank_offsets, slice_offsets,
                                    slice_ranks, segments);
  args.x = x.data_ptr(), args.x_stride = x.stride(0);
  args.out = out.data_ptr(), args.out_stride = out.stride(0);
  lora_apply(args, torch_runtime());
}

std::string lora_path_op() { return lora_path_name(); }

}  // namespace
}  // namespace llmchat::binding

TORCH_LIBRARY_FRAGMENT(llmchat, m) {
  m.def("lora_apply(Tensor x, Tensor(a!) out, Tensor a, Tensor b, Tensor rank_offsets, Tensor slice_offsets, "
        "Tensor slice_ranks, Tensor segments) -> ()");
  m.def("lora_path() -> str", &llmchat::binding::lora_path_op);
}

TORCH_LIBRARY_IMPL(llmchat, CPU, m) { m.impl("lora_apply", &llmchat::binding::lora_apply_op); }
