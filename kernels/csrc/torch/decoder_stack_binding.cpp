// Torch layer of decoder_stack: one set of input checks per step (not per op per layer), scratch buffers,
// pointers. Weights come as 14 tensors per layer, in DecoderLayerWeights order; a missing bias or norm is an
// empty tensor. One RoPE cache per layer (an empty tensor: a NoPE layer; layers may share one). LoRA (optional): 5 tensors per projection (a, b, rank_offsets, slice_offsets,
// slice_ranks; an empty `a` = no LoRA there), 20 per layer, and the step's token segments.
#include <torch/library.h>

#include "../core/decoder_stack.h"
#include "attention_binding.h"
#include "lora_checks.h"
#include "quant_checks.h"

namespace llmchat::binding {
namespace {

constexpr const char* kOp = "decoder_stack";
constexpr int64_t kPerLayer = 14;  // input_norm, post_norm, qkv, o, gate_up, down, 4 biases, q/k norms, 2 output norms
constexpr int64_t kLoraPerProjection = 5;
constexpr int64_t kQuantPerRun = 5;  // values, high, scales, mins, [start, kind, min_offset] (int64)

struct Widths {
  int64_t tokens, hidden, intermediate, head_size, q_size, kv_size;
  int64_t qkv() const { return q_size + 2 * kv_size; }
};

// A projection weight [N, K] or its bf16 panels; returns whether it is packed.
bool check_projection(const at::Tensor& w, const char* name, int64_t n, int64_t k, const at::Tensor& x) {
  check_cpu(kOp, w, name);
  check_same_dtype(kOp, w, name, x, "x");
  check_contiguous(kOp, w, name);
  if (w.dim() == 3) {
    check_shape(kOp, w, name, {(n + 15) / 16, (k + 1) / 2, 32});
    return true;
  }
  check_shape(kOp, w, name, {n, k});
  return false;
}

// A [n] vector in x's dtype (a bias, a norm weight; `x` names the dtype), or null for an empty tensor when optional.
const void* vector_of(const at::Tensor& v, const char* name, int64_t n, const at::Tensor& x, bool optional = true) {
  if (optional && v.numel() == 0) return nullptr;
  check_cpu(kOp, v, name);
  check_same_dtype(kOp, v, name, x, "x");
  check_shape(kOp, v, name, {n});
  check_contiguous(kOp, v, name);
  return v.data_ptr();
}

// A layer's quantized runs of projection p ([N, K] = (out, in)), from `count` runs of 5 tensors at `t`.
void add_quant(DecoderLayerWeights& lw, int p, const at::Tensor* t, int64_t count, int64_t n, int64_t k) {
  int64_t covered = 0;
  for (int64_t r = 0; r < count; ++r, t += kQuantPerRun) {
    const at::Tensor& meta = t[4];
    check_dtype(kOp, meta, "quant run meta", at::kLong);
    check_shape(kOp, meta, "quant run meta", {3});
    DecoderLayerWeights::QuantRun run;
    const int64_t* m = meta.data_ptr<int64_t>();
    run.start = m[0];
    run.w = quant_weight_view(kOp, t[0], t[1], t[2], t[3], m[1], m[2]);
    LLMCHAT_CHECK(run.start == covered && run.w.k == k, kOp, "quantized runs must cover the projection's ", n,
                  " outputs in order, each with K = ", k);
    covered += run.w.n;
    lw.quant[p].push_back(run);
  }
  LLMCHAT_CHECK(covered == n, kOp, "quantized runs cover ", covered, " of the projection's ", n, " outputs");
}

// One layer's 14 weights; `packed` says whether its projections are bf16 panels (all or none). A quantized
// projection (runs in lw.quant) passes an empty dense weight.
DecoderLayerWeights layer_weights(DecoderLayerWeights lw, const at::Tensor* w, const at::Tensor& x, const Widths& s,
                                  bool& packed) {
  // Norm weights: all in x's dtype, or all fp32 (Gemma's 1 + w, see kernels.h rms_norm)
  lw.f32_norms = w[0].scalar_type() == at::kFloat;
  const at::Tensor& norm_dtype = lw.f32_norms ? w[0] : x;
  lw.input_norm = vector_of(w[0], "input norm weight", s.hidden, norm_dtype, false);
  lw.post_norm = vector_of(w[1], "post-attention norm weight", s.hidden, norm_dtype, false);
  const int64_t shapes[4][2] = {{s.qkv(), s.hidden}, {s.hidden, s.q_size}, {2 * s.intermediate, s.hidden},
                                {s.hidden, s.intermediate}};
  const char* names[4] = {"qkv weight", "o weight", "gate_up weight", "down weight"};
  int dense = 0, panels = 0;
  for (int p = 0; p < 4; ++p) {
    if (!lw.quant[p].empty()) continue;
    ++dense;
    panels += check_projection(w[2 + p], names[p], shapes[p][0], shapes[p][1], x) ? 1 : 0;
  }
  LLMCHAT_CHECK(panels == 0 || panels == dense, kOp, "projection weights must be all packed (bf16 panels) or all plain");
  packed = panels > 0;
  lw.qkv = w[2].data_ptr(), lw.o = w[3].data_ptr(), lw.gate_up = w[4].data_ptr(), lw.down = w[5].data_ptr();
  lw.qkv_bias = vector_of(w[6], "qkv bias", s.qkv(), x);
  lw.o_bias = vector_of(w[7], "o bias", s.hidden, x);
  lw.gate_up_bias = vector_of(w[8], "gate_up bias", 2 * s.intermediate, x);
  lw.down_bias = vector_of(w[9], "down bias", s.hidden, x);
  lw.q_norm = vector_of(w[10], "q_norm weight", s.head_size, norm_dtype);
  lw.k_norm = vector_of(w[11], "k_norm weight", s.head_size, norm_dtype);
  lw.attn_out_norm = vector_of(w[12], "attention output norm weight", s.hidden, norm_dtype);
  lw.mlp_out_norm = vector_of(w[13], "MLP output norm weight", s.hidden, norm_dtype);
  return lw;
}

// The LoRA of a layer's four projections (5 tensors each), for the step's token segments.
void add_lora(DecoderLayerWeights& lw, const at::Tensor* l, const at::Tensor& segments, const at::Tensor& x,
              const Widths& s) {
  const int64_t widths[4][2] = {{s.hidden, s.qkv()}, {s.q_size, s.hidden}, {s.hidden, 2 * s.intermediate},
                                {s.intermediate, s.hidden}};  // (in, out) of qkv, o, gate_up, down
  for (int p = 0; p < 4; ++p, l += kLoraPerProjection) {
    if (l[0].numel() == 0) continue;
    lw.lora[p] = checked_lora_args(kOp, x, s.tokens, widths[p][0], widths[p][1], l[0], l[1], l[2], l[3], l[4], segments);
    lw.has_lora[p] = true;
  }
}

// A layer's RoPE table [max_pos, rot_dim] fp32 (checked against the positions), or null for an empty tensor.
const float* rotary_of(const at::Tensor& cache, int64_t head_size, int64_t max_position, int& rot_dim) {
  rot_dim = 0;
  if (cache.numel() == 0) return nullptr;
  check_cpu(kOp, cache, "cos_sin_cache");
  check_dim(kOp, cache, "cos_sin_cache", 2);
  check_dtype(kOp, cache, "cos_sin_cache", at::kFloat);
  check_contiguous(kOp, cache, "cos_sin_cache");
  rot_dim = int(cache.size(1));
  LLMCHAT_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_size, kOp,
                "cos_sin_cache rot_dim must be even and <= head_size, got ", rot_dim);
  LLMCHAT_CHECK(max_position < cache.size(0), kOp, "positions must be in [0, ", cache.size(0), "), got up to ",
                max_position);
  return cache.data_ptr<float>();
}

// Positions and slots of the step's tokens against the cache; returns the largest position (-1 when none).
int64_t check_token_metadata(const at::Tensor& positions, const at::Tensor& slot_mapping, int64_t T, int64_t num_slots) {
  for (auto [t, name] : {std::pair{&positions, "positions"}, {&slot_mapping, "slot_mapping"}}) {
    check_cpu(kOp, *t, name);
    check_dtype(kOp, *t, name, at::kLong);
    check_shape(kOp, *t, name, {T});
    check_contiguous(kOp, *t, name);
  }
  if (T == 0) return -1;
  const auto [plo, phi] = int64_range(positions);
  LLMCHAT_CHECK(plo >= 0, kOp, "positions must be in [0, max_pos), got [", plo, ", ", phi, "]");
  const auto [slo, shi] = int64_range(slot_mapping);
  LLMCHAT_CHECK(slo >= -1 && shi < num_slots, kOp, "slot_mapping values must be -1 or in [0, ", num_slots, "), got [",
                slo, ", ", shi, "]");
  return phi;
}

void decoder_stack_op(at::Tensor& x, at::Tensor& residual, at::TensorList weights, at::IntArrayRef sliding_windows,
                      at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& positions,
                      const at::Tensor& slot_mapping, const at::Tensor& block_tables, const at::Tensor& seq_lens,
                      const at::Tensor& query_start_loc, at::TensorList cos_sin_caches, int64_t num_q_heads,
                      int64_t head_size, int64_t intermediate, double eps, double scale, double residual_scale,
                      bool gelu, at::TensorList lora,
                      const at::Tensor& lora_segments, at::TensorList quant, at::IntArrayRef quant_runs,
                      const std::optional<at::Tensor>& window_slot_mapping,
                      const std::optional<at::Tensor>& window_block_tables) {
  check_cpu(kOp, x, "x");
  check_dim(kOp, x, "x", 2);
  check_contiguous(kOp, x, "x");
  const DType dt = kernel_dtype(kOp, x, "x");
  check_same_dtype(kOp, residual, "residual", x, "x");
  check_shape(kOp, residual, "residual", x.sizes());
  check_contiguous(kOp, residual, "residual");
  const int64_t L = int64_t(key_caches.size()), T = x.size(0);
  LLMCHAT_CHECK(L > 0 && int64_t(value_caches.size()) == L && int64_t(sliding_windows.size()) == L &&
                    int64_t(cos_sin_caches.size()) == L && int64_t(weights.size()) == kPerLayer * L,
                kOp, "expected per layer one key cache, one value cache, one sliding window, one RoPE cache and ",
                kPerLayer, " weights; got ", key_caches.size(), ", ", value_caches.size(), ", ", sliding_windows.size(),
                ", ", cos_sin_caches.size(), " and ", weights.size());
  LLMCHAT_CHECK(lora.empty() || int64_t(lora.size()) == 4 * kLoraPerProjection * L, kOp, "lora must be empty or hold ",
                4 * kLoraPerProjection, " tensors per layer, got ", lora.size());
  // With window paging, the sliding-window layers' caches form a pool of their own (engine/hybrid_blocks.py),
  // paged by window_block_tables and window_slot_mapping; the other layers by block_tables and slot_mapping.
  const bool split = window_block_tables.has_value();
  LLMCHAT_CHECK(split == window_slot_mapping.has_value(), kOp,
                "window_block_tables and window_slot_mapping must be given together");
  auto in_window_pool = [&](int64_t i) { return split && sliding_windows[i] > 0; };
  int64_t first_full = -1, first_window = -1;
  for (int64_t i = 0; i < L; ++i) {
    int64_t& first = in_window_pool(i) ? first_window : first_full;
    if (first == -1) first = i;
  }
  LLMCHAT_CHECK(first_full >= 0, kOp, "window paging needs a layer without a sliding window");
  const at::Tensor& kc0 = key_caches[first_full];
  const CacheGeometry cache = check_cache_pair(kOp, kc0, value_caches[first_full]);
  const int64_t nb = cache.num_blocks, Hkv = cache.num_kv_heads, bs = cache.block_size;
  LLMCHAT_CHECK(cache.head_size == head_size && head_size % 16 == 0, kOp, "head_size must be a multiple of 16 matching the "
                "caches' last dimension ", cache.head_size, ", got ", head_size);
  LLMCHAT_CHECK(num_q_heads > 0 && num_q_heads % Hkv == 0, kOp, "num_q_heads (", num_q_heads,
                ") must be a positive multiple of the caches' kv heads (", Hkv, ")");
  LLMCHAT_CHECK(intermediate > 0 && scale > 0 && eps > 0 && residual_scale > 0, kOp,
                "intermediate, scale, eps and residual_scale must be positive");
  const Widths s{T, x.size(1), intermediate, head_size, num_q_heads * head_size, Hkv * head_size};

  LLMCHAT_CHECK(quant_runs.empty() || int64_t(quant_runs.size()) == 4 * L, kOp,
                "quant_runs must be empty or hold 4 counts per layer, got ", quant_runs.size());
  int64_t runs_total = 0;
  for (int64_t c : quant_runs) runs_total += c;
  LLMCHAT_CHECK(int64_t(quant.size()) == kQuantPerRun * runs_total, kOp, "quant must hold ", kQuantPerRun,
                " tensors per run, got ", quant.size());
  const int64_t shapes[4][2] = {{s.qkv(), s.hidden}, {s.hidden, s.q_size}, {2 * s.intermediate, s.hidden},
                                {s.hidden, s.intermediate}};
  const at::Tensor* next_run = quant.data();
  check_metadata(kOp, block_tables, seq_lens, query_start_loc, T, nb, bs);
  const int64_t max_position = check_token_metadata(positions, slot_mapping, T, nb * bs);
  if (split && first_window >= 0) {
    const CacheGeometry wc = check_cache_pair(kOp, key_caches[first_window], value_caches[first_window]);
    LLMCHAT_CHECK(wc.num_kv_heads == Hkv && wc.block_size == bs && wc.head_size == cache.head_size &&
                      wc.blocks_per_group == cache.blocks_per_group,
                  kOp, "the window layers' caches must differ from the others in their number of blocks only");
    check_metadata(kOp, *window_block_tables, seq_lens, query_start_loc, T, wc.num_blocks, bs);
    check_token_metadata(positions, *window_slot_mapping, T, wc.num_blocks * bs);
  }
  DecoderStackArgs a;
  a.dtype = dt;
  for (int64_t i = 0; i < L; ++i) {
    check_cache_pair(kOp, key_caches[i], value_caches[i]);
    check_shape(kOp, key_caches[i], "every key cache of a pool", key_caches[in_window_pool(i) ? first_window : first_full].sizes());
    check_same_dtype(kOp, key_caches[i], "every key cache", x, "x");
    const int64_t win = sliding_windows[i];
    LLMCHAT_CHECK(win == -1 || win > 0, kOp, "sliding windows must be -1 (off) or positive, got ", win);
    bool packed = false;
    DecoderLayerWeights quantized;
    for (int p = 0; !quant_runs.empty() && p < 4; ++p) {
      add_quant(quantized, p, next_run, quant_runs[4 * i + p], shapes[p][0], shapes[p][1]);
      next_run += kQuantPerRun * quant_runs[4 * i + p];
    }
    DecoderLayerWeights lw = layer_weights(quantized, weights.data() + kPerLayer * i, x, s, packed);
    LLMCHAT_CHECK(i == 0 || packed == a.packed, kOp, "projection weights must be all packed or all plain");
    LLMCHAT_CHECK(!packed || dt == DType::BF16, kOp, "packed weights need bfloat16 activations");
    LLMCHAT_CHECK((lw.q_norm == nullptr) == (lw.k_norm == nullptr) &&
                      (i == 0 || (lw.q_norm == nullptr) == (a.layers.front().q_norm == nullptr)),
                  kOp, "q and k head norms must be given together, for every layer or none");
    a.packed = packed;
    lw.key_cache = key_caches[i].data_ptr(), lw.value_cache = value_caches[i].data_ptr();
    lw.sliding_window = int(win);
    if (in_window_pool(i)) {
      lw.slot_mapping = window_slot_mapping->data_ptr<int64_t>();
      lw.block_tables = window_block_tables->data_ptr<int32_t>(), lw.bt_stride = window_block_tables->stride(0);
    }
    lw.cos_sin_cache = rotary_of(cos_sin_caches[i], head_size, max_position, lw.rot_dim);
    LLMCHAT_CHECK((lw.attn_out_norm == nullptr) == (lw.mlp_out_norm == nullptr) &&
                      (i == 0 || (lw.attn_out_norm == nullptr) == (a.layers.front().attn_out_norm == nullptr)),
                  kOp, "attention and MLP output norms must be given together, for every layer or none");
    if (!lora.empty()) add_lora(lw, lora.data() + 4 * kLoraPerProjection * i, lora_segments, x, s);
    a.layers.push_back(lw);
  }

  const auto opts = x.options();
  const bool head_norms = a.layers.front().q_norm != nullptr;
  at::Tensor qkv = at::empty({T, s.qkv()}, opts), attn = at::empty({T, s.q_size}, opts);
  at::Tensor gate_up = at::empty({T, 2 * intermediate}, opts), act = at::empty({T, intermediate}, opts);
  at::Tensor q_normed = at::empty({head_norms ? T : 0, s.q_size}, opts);
  at::Tensor k_normed = at::empty({head_norms ? T : 0, s.kv_size}, opts);
  at::Tensor branch = at::empty({a.layers.front().attn_out_norm != nullptr ? T : 0, s.hidden}, opts);
  a.num_tokens = T, a.hidden = s.hidden, a.intermediate = intermediate;
  a.num_q_heads = int(num_q_heads), a.num_kv_heads = int(Hkv), a.head_size = int(head_size);
  a.eps = float(eps), a.scale = float(scale), a.residual_scale = float(residual_scale), a.gelu = gelu;
  a.x = x.data_ptr(), a.residual = residual.data_ptr();
  a.qkv = qkv.data_ptr(), a.attn = attn.data_ptr(), a.gate_up = gate_up.data_ptr(), a.act = act.data_ptr();
  a.q_normed = q_normed.data_ptr(), a.k_normed = k_normed.data_ptr(), a.branch = branch.data_ptr();
  a.positions = positions.data_ptr<int64_t>(), a.slot_mapping = slot_mapping.data_ptr<int64_t>();
  a.block_tables = block_tables.data_ptr<int32_t>(), a.bt_stride = block_tables.stride(0);
  a.seq_lens = seq_lens.data_ptr<int32_t>(), a.query_start_loc = query_start_loc.data_ptr<int32_t>();
  a.num_seqs = int(seq_lens.size(0)), a.block_size = int(bs), a.blocks_per_group = int(cache.blocks_per_group);
  decoder_stack(a, torch_runtime());
}

}  // namespace
}  // namespace llmchat::binding

TORCH_LIBRARY_FRAGMENT(llmchat, m) {
  m.def("decoder_stack(Tensor(a!) x, Tensor(b!) residual, Tensor[] weights, int[] sliding_windows, "
        "Tensor(c!)[] key_caches, Tensor(d!)[] value_caches, Tensor positions, Tensor slot_mapping, Tensor block_tables, "
        "Tensor seq_lens, Tensor query_start_loc, Tensor[] cos_sin_caches, int num_q_heads, int head_size, "
        "int intermediate, float eps, float scale, float residual_scale, bool gelu, Tensor[] lora, Tensor lora_segments, "
        "Tensor[] quant, int[] quant_runs, Tensor? window_slot_mapping=None, Tensor? window_block_tables=None) -> ()");
}

TORCH_LIBRARY_IMPL(llmchat, CPU, m) { m.impl("decoder_stack", &llmchat::binding::decoder_stack_op); }
