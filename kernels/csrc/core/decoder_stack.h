// The decoder layers of a Llama-family model (Llama, Mistral, Qwen2, Qwen3, Granite, Phi-3, SmolLM3, Gemma 3:
// pre-norm, fused qkv and gate_up, optional per-head q/k RMSNorm, neox rotary per layer or none, paged attention,
// optional norms on the attention and MLP outputs (Gemma), a residual multiplier (Granite), SwiGLU or GeGLU) in
// one call: the same core ops, in the same order and on the same buffers as the engine's Python layers
// (engine/models/llama.py, gemma3.py), so the result is bit for bit the same; what goes is the Python round trip
// and the input checks of every op of every layer (~1.5 ms of a 10 ms decode step).
#pragma once
#include <vector>

#include "gemv.h"
#include "kernels.h"
#include "lora.h"
#include "quant_linear.h"

namespace llmchat {

struct DecoderLayerWeights {
  const void *input_norm = nullptr, *post_norm = nullptr;  // [hidden]
  bool f32_norms = false;  // every norm weight of the layer is fp32 (Gemma's 1 + w), else in the model dtype
  const void *qkv = nullptr, *o = nullptr, *gate_up = nullptr, *down = nullptr;  // [N, K] or bf16 panels
  const void *qkv_bias = nullptr, *o_bias = nullptr, *gate_up_bias = nullptr, *down_bias = nullptr;  // or null
  const void *q_norm = nullptr, *k_norm = nullptr;  // [head_size] each (Qwen3, Gemma), or null
  // [hidden] norms of the attention output and of the MLP output before their residual adds (Gemma), or null
  const void *attn_out_norm = nullptr, *mlp_out_norm = nullptr;
  const float* cos_sin_cache = nullptr;  // [max_pos, rot_dim] this layer's RoPE; null: no rotary (a NoPE layer)
  int rot_dim = 0;
  void *key_cache = nullptr, *value_cache = nullptr;  // see KvCacheLayout
  int sliding_window = -1;
  // This layer's paging when it is not DecoderStackArgs' (a sliding-window layer's pool of its own), else null.
  const int64_t* slot_mapping = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t bt_stride = 0;
  // LoRA of qkv, o, gate_up, down for this step's token segments (x and out filled in per call), or none.
  LoraArgs lora[4];
  bool has_lora[4] = {false, false, false, false};
  // Quantized projections (GGUF files, --quantize): runs of output columns from `start`, each on its own block
  // weight (a fused projection may mix kinds); a projection with runs has no dense weight.
  struct QuantRun {
    int64_t start = 0;
    QuantWeightView w;
  };
  std::vector<QuantRun> quant[4];
};

struct DecoderStackArgs {
  DType dtype = DType::F32;  // activations, weights, caches
  bool packed = false;       // every projection weight is bf16 panels (pack_linear_weight)
  int64_t num_tokens = 0, hidden = 0, intermediate = 0;
  int num_q_heads = 0, num_kv_heads = 0, head_size = 0;
  float eps = 1e-6f, scale = 1.f;
  float residual_scale = 1.f;  // attention and MLP outputs are scaled by it before the residual add (Granite)
  bool gelu = false;           // the MLP gate: GELU (tanh) instead of SiLU
  void* x = nullptr;         // [T, hidden] contiguous: in, the embeddings; out, the last layer's output
  void* residual = nullptr;  // [T, hidden] contiguous: out, the residual stream
  // Scratch, contiguous: qkv [T, (Hq + 2 Hkv) D], attn [T, Hq D], gate_up [T, 2 I], act [T, I]; with q/k
  // norms also q_normed [T, Hq D] and k_normed [T, Hkv D]; with output norms branch [T, hidden].
  void *qkv = nullptr, *attn = nullptr, *gate_up = nullptr, *act = nullptr, *q_normed = nullptr, *k_normed = nullptr;
  void* branch = nullptr;
  const int64_t* positions = nullptr;     // [T]
  const int64_t* slot_mapping = nullptr;  // [T]
  const int32_t* block_tables = nullptr;  // [S, bt_stride]
  int64_t bt_stride = 0;
  const int32_t* seq_lens = nullptr;         // [S]
  const int32_t* query_start_loc = nullptr;  // [S + 1]
  int num_seqs = 0, block_size = 0, blocks_per_group = 1;
  std::vector<DecoderLayerWeights> layers;
};

void decoder_stack(const DecoderStackArgs& a, const Runtime& rt);

}  // namespace llmchat
