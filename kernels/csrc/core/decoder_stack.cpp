// One pass over the decoder layers; see decoder_stack.h. Per layer, as DecoderLayer.forward does it:
// norm (fused with the residual add after layer 0), qkv, (q/k head norms), rotary (unless NoPE), KV write,
// attention, o, (its norm), (residual scale), add + norm, gate_up, SiLU or GELU * up, down, (its norm), (scale).
#include "decoder_stack.h"

#include <cstring>

namespace llmchat {

void decoder_stack(const DecoderStackArgs& a, const Runtime& rt) {
  const int64_t T = a.num_tokens, H = a.hidden, I = a.intermediate, D = a.head_size;
  if (T == 0) return;
  const int64_t q_size = a.num_q_heads * D, kv_size = a.num_kv_heads * D, qkv_width = q_size + 2 * kv_size;
  const int64_t es = dtype_size(a.dtype);
  auto at = [es](void* base, int64_t elements) { return static_cast<char*>(base) + elements * es; };
  // A projection, then its LoRA deltas added into its output (what Linear.forward does with a LoRA hook).
  auto linear = [&](const void* x, int64_t k, const void* w, const void* bias, void* out, int64_t n,
                    const DecoderLayerWeights& lw, int which) {
    for (const auto& run : lw.quant[which]) {  // quantized: each run writes its columns of out
      QuantLinearArgs q;
      q.dtype = a.dtype, q.x = x, q.x_stride = k, q.w = run.w, q.m = T;
      q.bias = bias ? static_cast<const char*>(bias) + run.start * es : nullptr;
      q.out = at(out, run.start), q.out_stride = n;
      quant_linear(q, rt);
    }
    if (lw.quant[which].empty()) {
      LinearArgs l;
      l.dtype = a.dtype, l.x = x, l.x_stride = k, l.weight = w, l.packed = a.packed, l.bias = bias;
      l.out = out, l.out_stride = n, l.m = T, l.n = n, l.k = k;
      linear_small_m(l, rt);
    }
    if (lw.has_lora[which]) {
      LoraArgs lora = lw.lora[which];
      lora.x = x, lora.x_stride = k, lora.out = out, lora.out_stride = n;
      lora_apply(lora, rt);
    }
  };

  // q and k stay views into the qkv rows, or, with head norms, become the contiguous normed copies
  // (as in the Python layer, where the norm's output replaces them).
  const bool head_norms = a.layers.front().q_norm != nullptr;
  void* q = head_norms ? a.q_normed : a.qkv;
  void* k = head_norms ? a.k_normed : at(a.qkv, q_size);
  const int64_t q_stride = head_norms ? q_size : qkv_width, k_stride = head_norms ? kv_size : qkv_width;
  RotaryArgs rope;
  rope.dtype = a.dtype, rope.positions = a.positions;
  rope.query = q, rope.q_stride_token = q_stride, rope.q_stride_head = D;
  rope.key = k, rope.k_stride_token = k_stride, rope.k_stride_head = D;
  rope.num_tokens = T;
  rope.num_q_heads = a.num_q_heads, rope.num_kv_heads = a.num_kv_heads, rope.head_size = a.head_size;
  rope.is_neox = true;
  // What the Python layer does to a block's output before the residual add: its norm (Gemma, out of place as
  // ops.rms_norm), then the residual multiplier (Granite, x.mul_ in fp32).
  auto finish_branch = [&](const void* norm, bool f32_norm) {
    if (norm != nullptr) {
      rms_norm(a.dtype, a.x, H, norm, a.branch, H, T, H, a.eps, rt, f32_norm);
      std::memcpy(a.x, a.branch, size_t(T * H * es));
    }
    if (a.residual_scale != 1.f) scale_rows(a.dtype, a.x, H, T, H, a.residual_scale, rt);
  };

  WriteKvArgs kv;
  kv.elem_size = int(es);
  kv.key = k, kv.k_stride_token = k_stride, kv.k_stride_head = D;
  kv.value = at(a.qkv, q_size + kv_size), kv.v_stride_token = qkv_width, kv.v_stride_head = D;
  kv.slot_mapping = a.slot_mapping, kv.num_tokens = T;
  kv.num_kv_heads = a.num_kv_heads, kv.head_size = a.head_size, kv.block_size = a.block_size;
  kv.blocks_per_group = a.blocks_per_group;

  PagedAttentionArgs pa;
  pa.dtype = a.dtype;
  pa.query = q, pa.q_stride_token = q_stride, pa.q_stride_head = D;
  pa.out = a.attn, pa.o_stride_token = q_size, pa.o_stride_head = D;
  pa.block_tables = a.block_tables, pa.bt_stride = a.bt_stride;
  pa.seq_lens = a.seq_lens, pa.query_start_loc = a.query_start_loc, pa.num_seqs = a.num_seqs;
  pa.num_q_heads = a.num_q_heads, pa.num_kv_heads = a.num_kv_heads, pa.head_size = a.head_size;
  pa.block_size = a.block_size, pa.blocks_per_group = a.blocks_per_group, pa.scale = a.scale;

  for (size_t i = 0; i < a.layers.size(); ++i) {
    const DecoderLayerWeights& w = a.layers[i];
    if (i == 0) {  // the embeddings become the residual stream; x their norm
      std::memcpy(a.residual, a.x, size_t(T * H * es));
      rms_norm(a.dtype, a.residual, H, w.input_norm, a.x, H, T, H, a.eps, rt, w.f32_norms);
    } else {
      fused_add_rms_norm(a.dtype, a.x, H, a.residual, H, w.input_norm, T, H, a.eps, rt, w.f32_norms);
    }
    linear(a.x, H, w.qkv, w.qkv_bias, a.qkv, qkv_width, w, 0);
    if (head_norms) {  // each head's q and k rows RMS-normed over head_size, token by token
      const Runtime serial = serial_runtime();
      rt.parallel_for(T, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          rms_norm(a.dtype, at(a.qkv, t * qkv_width), D, w.q_norm, at(q, t * q_size), D, a.num_q_heads, D, a.eps, serial,
                   w.f32_norms);
          rms_norm(a.dtype, at(a.qkv, t * qkv_width + q_size), D, w.k_norm, at(k, t * kv_size), D, a.num_kv_heads, D,
                   a.eps, serial, w.f32_norms);
        }
      });
    }
    if (w.cos_sin_cache != nullptr) {
      rope.cos_sin_cache = w.cos_sin_cache, rope.rot_dim = w.rot_dim;
      rotary_embedding(rope, rt);
    }
    const bool own_paging = w.block_tables != nullptr;
    kv.key_cache = w.key_cache, kv.value_cache = w.value_cache;
    kv.slot_mapping = own_paging ? w.slot_mapping : a.slot_mapping;
    write_kv_cache(kv, rt);
    pa.key_cache = w.key_cache, pa.value_cache = w.value_cache, pa.sliding_window = w.sliding_window;
    pa.block_tables = own_paging ? w.block_tables : a.block_tables;
    pa.bt_stride = own_paging ? w.bt_stride : a.bt_stride;
    paged_attention(pa, rt);
    linear(a.attn, q_size, w.o, w.o_bias, a.x, H, w, 1);
    finish_branch(w.attn_out_norm, w.f32_norms);
    fused_add_rms_norm(a.dtype, a.x, H, a.residual, H, w.post_norm, T, H, a.eps, rt, w.f32_norms);
    linear(a.x, H, w.gate_up, w.gate_up_bias, a.gate_up, 2 * I, w, 2);
    (a.gelu ? gelu_tanh_and_mul : silu_and_mul)(a.dtype, a.gate_up, 2 * I, a.act, I, T, I, rt);
    linear(a.act, I, w.down, w.down_bias, a.x, H, w, 3);
    finish_branch(w.mlp_out_norm, w.f32_norms);
  }
}

}  // namespace llmchat
