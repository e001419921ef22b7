// Bindings of the paged-KV ops: attention, cache write, block copy. Metadata (query offsets, lengths,
// block ids) is validated here once, so a bad batch is a clear error instead of a wild read.
#pragma once
#include "checks.h"

namespace llmchat::binding {

// A K/V cache pair's geometry: plain [num_blocks, Hkv, block_size, D] or grouped
// [num_groups, Hkv, blocks_per_group, block_size, D] (see KvCacheLayout).
struct CacheGeometry {
  int64_t num_blocks = 0, num_kv_heads = 0, blocks_per_group = 1, block_size = 0, head_size = 0;
  KvCacheLayout layout() const { return {int(num_kv_heads), int(block_size), int(head_size), int(blocks_per_group)}; }
};

inline CacheGeometry check_cache_pair(const char* op, const at::Tensor& kc, const at::Tensor& vc) {
  check_cpu(op, kc, "key_cache");
  check_cpu(op, vc, "value_cache");
  LLMCHAT_CHECK(kc.dim() == 4 || kc.dim() == 5, op, "key_cache must be [num_blocks, Hkv, block_size, D] or "
                "[num_groups, Hkv, blocks_per_group, block_size, D], got shape ", kc.sizes());
  check_contiguous(op, kc, "key_cache");
  check_contiguous(op, vc, "value_cache");
  check_same_dtype(op, vc, "value_cache", kc, "key_cache");
  check_shape(op, vc, "value_cache", kc.sizes());
  CacheGeometry g;
  g.blocks_per_group = kc.dim() == 5 ? kc.size(2) : 1;
  g.num_blocks = kc.size(0) * g.blocks_per_group, g.num_kv_heads = kc.size(1);
  g.block_size = kc.size(-2), g.head_size = kc.size(-1);
  LLMCHAT_CHECK(g.block_size > 0 && g.blocks_per_group > 0, op, "block_size and blocks_per_group must be positive, got cache shape ",
                kc.sizes());
  return g;
}

inline void check_metadata(const char* op, const at::Tensor& bt, const at::Tensor& seq_lens, const at::Tensor& qsl,
                           int64_t num_tokens, int64_t num_blocks, int64_t block_size) {
  for (auto [t, name] : {std::pair{&bt, "block_tables"}, {&seq_lens, "seq_lens"}, {&qsl, "query_start_loc"}}) {
    check_cpu(op, *t, name);
    check_dtype(op, *t, name, at::kInt);
  }
  check_dim(op, bt, "block_tables", 2);
  check_last_dim_contiguous(op, bt, "block_tables");
  check_dim(op, seq_lens, "seq_lens", 1);
  check_contiguous(op, seq_lens, "seq_lens");
  const int64_t S = seq_lens.size(0);
  check_shape(op, qsl, "query_start_loc", {S + 1});
  check_contiguous(op, qsl, "query_start_loc");
  LLMCHAT_CHECK(bt.size(0) == S, op, "block_tables must have one row per sequence (", S, "), got shape ", bt.sizes());
  const int32_t* q = qsl.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  LLMCHAT_CHECK(q[0] == 0 && q[S] == num_tokens, op, "query_start_loc must start at 0 and end at the number of query tokens (",
                num_tokens, "), got ", q[0], " ... ", q[S]);
  const int64_t max_blocks = bt.size(1);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t q_len = q[s + 1] - q[s];
    LLMCHAT_CHECK(q_len >= 0, op, "query_start_loc must be non-decreasing, got ", q[s], " then ", q[s + 1]);
    LLMCHAT_CHECK(lens[s] >= q_len, op, "seq_lens[", s, "] = ", lens[s], " is smaller than its ", q_len, " query tokens");
    const int64_t used = (int64_t(lens[s]) + block_size - 1) / block_size;
    LLMCHAT_CHECK(used <= max_blocks, op, "seq_lens[", s, "] = ", lens[s], " needs ", used, " blocks but block_tables has ",
                  max_blocks, " columns");
    if (q_len == 0) continue;
    const int32_t* row = bt.data_ptr<int32_t>() + s * bt.stride(0);
    for (int64_t b = 0; b < used; ++b)
      LLMCHAT_CHECK(row[b] >= 0 && row[b] < num_blocks, op, "block_tables[", s, ", ", b, "] = ", row[b],
                    " is not a block of the cache (", num_blocks, " blocks)");
  }
}

inline void paged_attention_op(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                               const at::Tensor& block_tables, const at::Tensor& seq_lens, const at::Tensor& query_start_loc,
                               double scale, int64_t sliding_window, at::Tensor& out) {
  const char* op = "paged_attention";
  check_cpu(op, query, "query");
  check_dim(op, query, "query", 3);
  check_last_dim_contiguous(op, query, "query");
  const DType dt = kernel_dtype(op, query, "query");
  const CacheGeometry cache = check_cache_pair(op, key_cache, value_cache);
  check_same_dtype(op, key_cache, "key_cache", query, "query");
  const int64_t T = query.size(0), Hq = query.size(1), D = query.size(2);
  const int64_t nb = cache.num_blocks, Hkv = cache.num_kv_heads, bs = cache.block_size;
  LLMCHAT_CHECK(D > 0 && D % 16 == 0, op, "head size must be a positive multiple of 16, got ", D);
  LLMCHAT_CHECK(cache.head_size == D, op, "key_cache has head size (last dim) ", cache.head_size,
                " but query has head size ", D);
  LLMCHAT_CHECK(Hkv > 0 && Hq % Hkv == 0, op, "query heads (", Hq, ") must be a multiple of kv heads (", Hkv, ")");
  LLMCHAT_CHECK(scale > 0, op, "scale must be positive, got ", scale);
  LLMCHAT_CHECK(sliding_window == -1 || sliding_window > 0, op, "sliding_window must be -1 (off) or positive, got ",
                sliding_window);
  check_cpu(op, out, "out");
  check_same_dtype(op, out, "out", query, "query");
  check_shape(op, out, "out", query.sizes());
  check_last_dim_contiguous(op, out, "out");
  check_metadata(op, block_tables, seq_lens, query_start_loc, T, nb, bs);

  PagedAttentionArgs a;
  a.dtype = dt;
  a.query = query.data_ptr();
  a.q_stride_token = query.stride(0), a.q_stride_head = query.stride(1);
  a.key_cache = key_cache.data_ptr(), a.value_cache = value_cache.data_ptr();
  a.out = out.data_ptr();
  a.o_stride_token = out.stride(0), a.o_stride_head = out.stride(1);
  a.block_tables = block_tables.data_ptr<int32_t>(), a.bt_stride = block_tables.stride(0);
  a.seq_lens = seq_lens.data_ptr<int32_t>(), a.query_start_loc = query_start_loc.data_ptr<int32_t>();
  a.num_seqs = int(seq_lens.size(0)), a.num_q_heads = int(Hq), a.num_kv_heads = int(Hkv);
  a.head_size = int(D), a.block_size = int(bs), a.blocks_per_group = int(cache.blocks_per_group);
  a.scale = float(scale), a.sliding_window = int(sliding_window);
  paged_attention(a, torch_runtime());
}

inline void write_kv_cache_op(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                              const at::Tensor& slot_mapping) {
  const char* op = "write_kv_cache";
  const CacheGeometry cache = check_cache_pair(op, key_cache, value_cache);
  kernel_dtype(op, key_cache, "key_cache");
  const int64_t nb = cache.num_blocks, Hkv = cache.num_kv_heads, bs = cache.block_size, D = cache.head_size;
  for (auto [t, name] : {std::pair{&key, "key"}, {&value, "value"}}) {
    check_cpu(op, *t, name);
    check_dim(op, *t, name, 3);
    check_last_dim_contiguous(op, *t, name);
    check_same_dtype(op, *t, name, key_cache, "key_cache");
    LLMCHAT_CHECK(t->size(1) == Hkv && t->size(2) == D, op, name, " must be [T, ", Hkv, ", ", D,
                  "] to match the cache, got ", t->sizes());
  }
  check_shape(op, value, "value", key.sizes());
  check_cpu(op, slot_mapping, "slot_mapping");
  check_dtype(op, slot_mapping, "slot_mapping", at::kLong);
  check_shape(op, slot_mapping, "slot_mapping", {key.size(0)});
  check_contiguous(op, slot_mapping, "slot_mapping");
  if (key.size(0) > 0) {
    const auto [lo, hi] = int64_range(slot_mapping);
    LLMCHAT_CHECK(hi < nb * bs && lo >= -1, op, "slot_mapping values must be -1 or in [0, ", nb * bs, "), got [", lo, ", ",
                  hi, "]");
  }
  WriteKvArgs a;
  a.elem_size = int(key.element_size());
  a.key = key.data_ptr(), a.k_stride_token = key.stride(0), a.k_stride_head = key.stride(1);
  a.value = value.data_ptr(), a.v_stride_token = value.stride(0), a.v_stride_head = value.stride(1);
  a.key_cache = key_cache.data_ptr(), a.value_cache = value_cache.data_ptr();
  a.slot_mapping = slot_mapping.data_ptr<int64_t>();
  a.num_tokens = key.size(0), a.num_kv_heads = int(Hkv), a.head_size = int(D), a.block_size = int(bs);
  a.blocks_per_group = int(cache.blocks_per_group);
  write_kv_cache(a, torch_runtime());
}

inline void copy_blocks_op(at::TensorList key_caches, at::TensorList value_caches, const at::Tensor& block_mapping) {
  const char* op = "copy_blocks";
  LLMCHAT_CHECK(key_caches.size() == value_caches.size(), op, "key_caches and value_caches must have the same length, got ",
                key_caches.size(), " and ", value_caches.size());
  check_cpu(op, block_mapping, "block_mapping");
  check_dtype(op, block_mapping, "block_mapping", at::kLong);
  check_dim(op, block_mapping, "block_mapping", 2);
  LLMCHAT_CHECK(block_mapping.size(1) == 2, op, "block_mapping must be [N, 2] (src, dst), got ", block_mapping.sizes());
  if (key_caches.empty() || block_mapping.size(0) == 0) return;
  const at::Tensor mapping = block_mapping.contiguous();
  std::vector<void*> kptr, vptr;
  CacheGeometry cache;
  for (size_t i = 0; i < key_caches.size(); ++i) {
    const CacheGeometry geometry = check_cache_pair(op, key_caches[i], value_caches[i]);
    if (i == 0) cache = geometry;
    check_shape(op, key_caches[i], "every cache", key_caches[0].sizes());
    check_same_dtype(op, key_caches[i], "every cache", key_caches[0], "key_caches[0]");
    kptr.push_back(key_caches[i].data_ptr());
    vptr.push_back(value_caches[i].data_ptr());
  }
  const int64_t nb = cache.num_blocks;
  const auto [lo, hi] = int64_range(mapping);
  LLMCHAT_CHECK(lo >= 0 && hi < nb, op, "block_mapping values must be in [0, ", nb, "), got [", lo, ", ", hi, "]");
  copy_blocks(kptr.data(), vptr.data(), int(kptr.size()), cache.layout(), int(key_caches[0].element_size()),
              mapping.data_ptr<int64_t>(), mapping.size(0), torch_runtime());
}

}  // namespace llmchat::binding
