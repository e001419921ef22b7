// Torch-free kernel core: raw pointers + element strides, compiled without torch so the same code
// runs in the torch extension and in the standalone C++ test driver (native and cross-compiled).
#pragma once
#include <cstdint>
#include <functional>

#include "../vec/dtypes.h"

namespace llmchat {

// How the caller runs work in parallel: fn(begin, end) over [0, n) in chunks of at least `grain`.
// The torch binding passes its worker pool (torch/worker_pool.h); tests pass a plain loop.
using ParallelFor =
    std::function<void(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn)>;

struct Runtime {
  int num_threads = 1;
  ParallelFor parallel_for;
};

Runtime serial_runtime();  // one thread, plain loop
const char* isa_name();    // the vector path this core was compiled for

// Sum of x[0, n) read with vector loads on every thread: the benchmark's memory read probe, so a kernel's
// GB/s is compared with the fastest plain read this code can do, not only with torch's sum.
float read_sum(const float* x, int64_t n, const Runtime& rt);
// The same over runs of run_floats starting at x + run_starts[i], read in that order with software prefetch as
// paged attention does: the benchmark's view of scattered reads, which hardware prefetchers barely help.
float read_runs_sum(const float* x, int64_t run_floats, const int64_t* run_starts, int64_t num_runs, const Runtime& rt);

// KV caches are [num_groups, Hkv, blocks_per_group, block_size, D]: for each kv head, the blocks of one group
// lie next to each other, so a sequence holding consecutive blocks of a group is read in 64-token runs rather
// than 16-token pieces, while the prefix cache still shares single blocks. blocks_per_group 1 is the plain
// [num_blocks, Hkv, block_size, D]. Returns the element offset of block `block`'s first row for `kv_head`.
struct KvCacheLayout {
  int num_kv_heads = 0, block_size = 0, head_size = 0, blocks_per_group = 1;
  int64_t block_offset(int64_t block, int kv_head) const {
    const int64_t group = block / blocks_per_group, in_group = block - group * blocks_per_group;
    return ((group * num_kv_heads + kv_head) * blocks_per_group + in_group) * block_size * head_size;
  }
};

struct PagedAttentionArgs {
  DType dtype = DType::F32;
  const void* query = nullptr;  // [T, Hq, D]; last dim contiguous
  int64_t q_stride_token = 0, q_stride_head = 0;
  const void* key_cache = nullptr;    // contiguous, see KvCacheLayout
  const void* value_cache = nullptr;  // same
  void* out = nullptr;  // [T, Hq, D]; last dim contiguous
  int64_t o_stride_token = 0, o_stride_head = 0;
  const int32_t* block_tables = nullptr;  // [S, bt_stride]
  int64_t bt_stride = 0;
  const int32_t* seq_lens = nullptr;         // [S]
  const int32_t* query_start_loc = nullptr;  // [S + 1]
  int num_seqs = 0, num_q_heads = 0, num_kv_heads = 0, head_size = 0, block_size = 0, blocks_per_group = 1;
  float scale = 1.f;
  int sliding_window = -1;  // > 0: a query at p sees keys at k with p - k < sliding_window
};
void paged_attention(const PagedAttentionArgs& a, const Runtime& rt);
// What computes bf16 attention with head size % 32 == 0 here: "amx" (tiles, every row) or "vector".
const char* attention_path_name();

// x, out: [T, H] rows (row strides in elements); weight [H] in dt, or fp32 with f32_weight (Gemma's 1 + w:
// then rounded once, at the end, as transformers' Gemma3RMSNorm). fp32 math, rounding like HF.
void rms_norm(DType dt, const void* x, int64_t x_stride, const void* weight, void* out, int64_t out_stride,
              int64_t num_tokens, int64_t hidden, float eps, const Runtime& rt, bool f32_weight = false);
// residual += x; x = rms_norm(residual) * weight, both in place.
void fused_add_rms_norm(DType dt, void* x, int64_t x_stride, void* residual, int64_t r_stride,
                        const void* weight, int64_t num_tokens, int64_t hidden, float eps, const Runtime& rt,
                        bool f32_weight = false);

struct RotaryArgs {
  DType dtype = DType::F32;
  const int64_t* positions = nullptr;  // [T]
  void* query = nullptr;               // [T, Hq, D] by strides; last dim contiguous
  int64_t q_stride_token = 0, q_stride_head = 0;
  void* key = nullptr;  // [T, Hkv, D]; may be null
  int64_t k_stride_token = 0, k_stride_head = 0;
  const float* cos_sin_cache = nullptr;  // [max_pos, rot_dim] = cat(cos, sin)
  int64_t num_tokens = 0;
  int num_q_heads = 0, num_kv_heads = 0, head_size = 0, rot_dim = 0;
  bool is_neox = true;
};
void rotary_embedding(const RotaryArgs& a, const Runtime& rt);

// x [T, 2I] -> out [T, I] = silu(x[:, :I]) * x[:, I:]
void silu_and_mul(DType dt, const void* x, int64_t x_stride, void* out, int64_t out_stride, int64_t num_tokens,
                  int64_t inter, const Runtime& rt);
// x [T, 2I] -> out [T, I] = gelu_tanh(x[:, :I]) * x[:, I:] (Gemma's GeGLU)
void gelu_tanh_and_mul(DType dt, const void* x, int64_t x_stride, void* out, int64_t out_stride, int64_t num_tokens,
                       int64_t inter, const Runtime& rt);
// x [T, width] *= s in place, in fp32 and rounded to the dtype (Granite's residual multiplier)
void scale_rows(DType dt, void* x, int64_t x_stride, int64_t num_tokens, int64_t width, float s, const Runtime& rt);

struct WriteKvArgs {
  int elem_size = 4;
  const void* key = nullptr;  // [T, Hkv, D] by strides
  int64_t k_stride_token = 0, k_stride_head = 0;
  const void* value = nullptr;
  int64_t v_stride_token = 0, v_stride_head = 0;
  void* key_cache = nullptr;  // contiguous, see KvCacheLayout
  void* value_cache = nullptr;
  const int64_t* slot_mapping = nullptr;  // [T], -1 = skip
  int64_t num_tokens = 0;
  int num_kv_heads = 0, head_size = 0, block_size = 0, blocks_per_group = 1;
};
void write_kv_cache(const WriteKvArgs& a, const Runtime& rt);

// For each layer and each (src, dst) row of mapping [num_pairs, 2]: copy one block of K and of V
// (one piece per kv head; `layout` in elements of elem_size bytes).
void copy_blocks(void* const* key_caches, void* const* value_caches, int num_layers, const KvCacheLayout& layout,
                 int elem_size, const int64_t* mapping, int64_t num_pairs, const Runtime& rt);

}  // namespace llmchat
