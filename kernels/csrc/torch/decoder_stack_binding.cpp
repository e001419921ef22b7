// Torch layer of decoder_stack: one set of input checks per step (not per op per layer), scratch buffers,
// pointers. Weights come as 12 tensors per layer, in DecoderLayerWeights order; a missing bias or head
// norm is an empty tensor. LoRA (optional): 5 tensors per projection (a, b, rank_offsets, slice_offsets,
// slice_ranks; an empty `a` = no LoRA there), 20 per layer, and the step's token segments.
#include <torch/library.h>

#include "../core/decoder_stack.h"
#include "attention_binding.h"
#include "lora_checks.h"

namespace llmchat::binding {
namespace {

constexpr int64_t kPerLayer = 12;  // input_norm, post_norm, qkv, o, gate_up, down, their 4 biases, q/k norms
constexpr int64_t kLoraPerProjection = 5;

// A projection weight [N, K] or its bf16 panels; returns whether it is packed.
bool check_projection(const char* op, const at::Tensor& w, const char* name, int64_t n, int64_t k, const at::Tensor& x) {
  check_cpu(op, w, name);
  check_same_dtype(op, w, name, x, "x");
  check_contiguous(op, w, name);
  if (w.dim() == 3) {
    check_shape(op, w, name, {(n + 15) / 16, (k + 1) / 2, 32});
    return true;
  }
  check_shape(op, w, name, {n, k});
  return false;
}

const void* optional_vector(const char* op, const at::Tensor& b, const char* name, int64_t n, const at::Tensor& x) {
  if (b.numel() == 0) return nullptr;
  check_cpu(op, b, name);
  check_same_dtype(op, b, name, x, "x");
  check_shape(op, b, name, {n});
  check_contiguous(op, b, name);
  return b.data_ptr();
}

void decoder_stack_op(at::Tensor& x, at::Tensor& residual, at::TensorList weights, at::IntArrayRef sliding_windows,
                      at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& positions,
                      const at::Tensor& slot_mapping, const at::Tensor& block_tables, const at::Tensor& seq_lens,
                      const at::Tensor& query_start_loc, const at::Tensor& cos_sin_cache, int64_t num_q_heads,
                      int64_t head_size, int64_t intermediate, double eps, double scale, at::TensorList lora,
                      const at::Tensor& lora_segments) {
  const char* op = "decoder_stack";
  check_cpu(op, x, "x");
  check_dim(op, x, "x", 2);
  check_contiguous(op, x, "x");
  const DType dt = kernel_dtype(op, x, "x");
  check_same_dtype(op, residual, "residual", x, "x");
  check_shape(op, residual, "residual", x.sizes());
  check_contiguous(op, residual, "residual");
  const int64_t L = int64_t(key_caches.size()), T = x.size(0), H = x.size(1), D = head_size, I = intermediate;
  LLMCHAT_CHECK(L > 0 && int64_t(value_caches.size()) == L && int64_t(sliding_windows.size()) == L &&
                    int64_t(weights.size()) == kPerLayer * L,
                op, "expected per layer one key cache, one value cache, one sliding window and ", kPerLayer,
                " weights; got ", key_caches.size(), ", ", value_caches.size(), ", ", sliding_windows.size(), " and ",
                weights.size());
  const at::Tensor& kc0 = key_caches[0];
  check_cache_pair(op, kc0, value_caches[0]);
  check_same_dtype(op, kc0, "key_caches[0]", x, "x");
  const int64_t nb = kc0.size(0), Hkv = kc0.size(1), bs = kc0.size(2);
  LLMCHAT_CHECK(kc0.size(3) == D && D % 16 == 0, op, "head_size must be a multiple of 16 matching the caches' last "
                "dimension ", kc0.size(3), ", got ", D);
  LLMCHAT_CHECK(num_q_heads > 0 && num_q_heads % Hkv == 0, op, "num_q_heads (", num_q_heads,
                ") must be a positive multiple of the caches' kv heads (", Hkv, ")");
  LLMCHAT_CHECK(I > 0 && scale > 0 && eps > 0, op, "intermediate, scale and eps must be positive");
  const int64_t q_size = num_q_heads * D, kv_size = Hkv * D;
  LLMCHAT_CHECK(lora.empty() || int64_t(lora.size()) == 4 * kLoraPerProjection * L, op, "lora must be empty or hold ",
                4 * kLoraPerProjection, " tensors per layer, got ", lora.size());

  DecoderStackArgs a;
  a.dtype = dt;
  for (int64_t i = 0; i < L; ++i) {
    check_cache_pair(op, key_caches[i], value_caches[i]);
    check_shape(op, key_caches[i], "every key cache", kc0.sizes());
    check_same_dtype(op, key_caches[i], "every key cache", x, "x");
    const int64_t win = sliding_windows[i];
    LLMCHAT_CHECK(win == -1 || win > 0, op, "sliding windows must be -1 (off) or positive, got ", win);
    const at::Tensor* w = weights.data() + kPerLayer * i;
    for (int j : {0, 1}) {
      check_cpu(op, w[j], "a norm weight");
      check_same_dtype(op, w[j], "a norm weight", x, "x");
      check_shape(op, w[j], "a norm weight", {H});
      check_contiguous(op, w[j], "a norm weight");
    }
    const bool packed = check_projection(op, w[2], "qkv weight", q_size + 2 * kv_size, H, x);
    LLMCHAT_CHECK(check_projection(op, w[3], "o weight", H, q_size, x) == packed &&
                      check_projection(op, w[4], "gate_up weight", 2 * I, H, x) == packed &&
                      check_projection(op, w[5], "down weight", H, I, x) == packed && (i == 0 || packed == a.packed),
                  op, "projection weights must be all packed (bf16 panels) or all plain");
    LLMCHAT_CHECK(!packed || dt == DType::BF16, op, "packed weights need bfloat16 activations");
    a.packed = packed;
    DecoderLayerWeights lw;
    lw.input_norm = w[0].data_ptr(), lw.post_norm = w[1].data_ptr();
    lw.qkv = w[2].data_ptr(), lw.o = w[3].data_ptr(), lw.gate_up = w[4].data_ptr(), lw.down = w[5].data_ptr();
    lw.qkv_bias = optional_vector(op, w[6], "qkv bias", q_size + 2 * kv_size, x);
    lw.o_bias = optional_vector(op, w[7], "o bias", H, x);
    lw.gate_up_bias = optional_vector(op, w[8], "gate_up bias", 2 * I, x);
    lw.down_bias = optional_vector(op, w[9], "down bias", H, x);
    lw.q_norm = optional_vector(op, w[10], "q_norm weight", D, x);
    lw.k_norm = optional_vector(op, w[11], "k_norm weight", D, x);
    LLMCHAT_CHECK((lw.q_norm == nullptr) == (lw.k_norm == nullptr) &&
                      (i == 0 || (lw.q_norm == nullptr) == (a.layers.front().q_norm == nullptr)),
                  op, "q and k head norms must be given together, for every layer or none");
    lw.key_cache = key_caches[i].data_ptr(), lw.value_cache = value_caches[i].data_ptr();
    lw.sliding_window = int(win);
    const int64_t widths[4][2] = {{H, q_size + 2 * kv_size}, {q_size, H}, {H, 2 * I}, {I, H}};  // (in, out)
    for (int p = 0; !lora.empty() && p < 4; ++p) {
      const at::Tensor* l = lora.data() + (4 * i + p) * kLoraPerProjection;
      if (l[0].numel() == 0) continue;
      lw.lora[p] = checked_lora_args(op, x, T, widths[p][0], widths[p][1], l[0], l[1], l[2], l[3], l[4], lora_segments);
      lw.has_lora[p] = true;
    }
    a.layers.push_back(lw);
  }
  check_metadata(op, block_tables, seq_lens, query_start_loc, T, nb, bs);
  for (auto [t, name] : {std::pair{&positions, "positions"}, {&slot_mapping, "slot_mapping"}}) {
    check_cpu(op, *t, name);
    check_dtype(op, *t, name, at::kLong);
    check_shape(op, *t, name, {T});
    check_contiguous(op, *t, name);
  }
  check_cpu(op, cos_sin_cache, "cos_sin_cache");
  check_dim(op, cos_sin_cache, "cos_sin_cache", 2);
  check_dtype(op, cos_sin_cache, "cos_sin_cache", at::kFloat);
  check_contiguous(op, cos_sin_cache, "cos_sin_cache");
  const int64_t rot_dim = cos_sin_cache.size(1);
  LLMCHAT_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= D, op, "cos_sin_cache rot_dim must be even and <= head_size");
  if (T > 0) {
    const auto [plo, phi] = int64_range(positions);
    LLMCHAT_CHECK(plo >= 0 && phi < cos_sin_cache.size(0), op, "positions must be in [0, ", cos_sin_cache.size(0), "), got [",
                  plo, ", ", phi, "]");
    const auto [slo, shi] = int64_range(slot_mapping);
    LLMCHAT_CHECK(slo >= -1 && shi < nb * bs, op, "slot_mapping values must be -1 or in [0, ", nb * bs, "), got [", slo,
                  ", ", shi, "]");
  }

  const auto opts = x.options();
  at::Tensor qkv = at::empty({T, q_size + 2 * kv_size}, opts), attn = at::empty({T, q_size}, opts);
  at::Tensor gate_up = at::empty({T, 2 * I}, opts), act = at::empty({T, I}, opts);
  const bool head_norms = a.layers.front().q_norm != nullptr;
  at::Tensor q_normed = at::empty({head_norms ? T : 0, q_size}, opts), k_normed = at::empty({head_norms ? T : 0, kv_size}, opts);
  a.q_normed = q_normed.data_ptr(), a.k_normed = k_normed.data_ptr();
  a.num_tokens = T, a.hidden = H, a.intermediate = I;
  a.num_q_heads = int(num_q_heads), a.num_kv_heads = int(Hkv), a.head_size = int(D);
  a.eps = float(eps), a.scale = float(scale);
  a.x = x.data_ptr(), a.residual = residual.data_ptr();
  a.qkv = qkv.data_ptr(), a.attn = attn.data_ptr(), a.gate_up = gate_up.data_ptr(), a.act = act.data_ptr();
  a.positions = positions.data_ptr<int64_t>(), a.slot_mapping = slot_mapping.data_ptr<int64_t>();
  a.block_tables = block_tables.data_ptr<int32_t>(), a.bt_stride = block_tables.stride(0);
  a.seq_lens = seq_lens.data_ptr<int32_t>(), a.query_start_loc = query_start_loc.data_ptr<int32_t>();
  a.num_seqs = int(seq_lens.size(0)), a.block_size = int(bs);
  a.cos_sin_cache = cos_sin_cache.data_ptr<float>(), a.rot_dim = int(rot_dim);
  decoder_stack(a, torch_runtime());
}

}  // namespace
}  // namespace llmchat::binding

TORCH_LIBRARY_FRAGMENT(llmchat, m) {
  m.def("decoder_stack(Tensor(a!) x, Tensor(b!) residual, Tensor[] weights, int[] sliding_windows, "
        "Tensor(c!)[] key_caches, Tensor(d!)[] value_caches, Tensor positions, Tensor slot_mapping, Tensor block_tables, "
        "Tensor seq_lens, Tensor query_start_loc, Tensor cos_sin_cache, int num_q_heads, int head_size, int intermediate, "
        "float eps, float scale, Tensor[] lora, Tensor lora_segments) -> ()");
}

TORCH_LIBRARY_IMPL(llmchat, CPU, m) { m.impl("decoder_stack", &llmchat::binding::decoder_stack_op); }
