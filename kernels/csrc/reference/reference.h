// Scalar reference for every kernel of the core: plain loops, no vector types, no threads, written
// for clarity. The standalone test driver checks each ISA path of the core against these.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../core/kernels.h"
#include "../core/lora.h"

namespace llmchat::reference {

template <typename T> inline float ld(const void* p, int64_t i) { return to_float(static_cast<const T*>(p)[i]); }
template <typename T> inline void st(void* p, int64_t i, float v) { static_cast<T*>(p)[i] = from_float<T>(v); }
template <typename T> inline float rnd(float v) { return to_float(from_float<T>(v)); }

// Element offset of token slot `offset` of `block` for kv head h in a [groups, Hkv, blocks_per_group, bs, D] cache.
inline int64_t cache_row(int64_t block, int64_t offset, int h, int Hkv, int bpg, int bs, int D) {
  const int64_t group = block / bpg, in_group = block % bpg;
  return (((group * Hkv + h) * bpg + in_group) * bs + offset) * D;
}

// Two-pass softmax over every visible key of each query row (uses seq-len scratch: fine for a reference).
template <typename T>
void paged_attention(const PagedAttentionArgs& a) {
  const int G = a.num_q_heads / a.num_kv_heads, D = a.head_size, bs = a.block_size;
  for (int s = 0; s < a.num_seqs; ++s) {
    const int q0 = a.query_start_loc[s], q_len = a.query_start_loc[s + 1] - q0, ctx = a.seq_lens[s];
    for (int i = 0; i < q_len; ++i) {
      const int pos = ctx - q_len + i;
      for (int h = 0; h < a.num_q_heads; ++h) {
        const int kvh = h / G;
        std::vector<float> scores(pos + 1, -INFINITY);
        float mx = -INFINITY;
        for (int k = 0; k <= pos; ++k) {
          if (a.sliding_window > 0 && pos - k >= a.sliding_window) continue;
          const int64_t row = cache_row(a.block_tables[s * a.bt_stride + k / bs], k % bs, kvh, a.num_kv_heads, a.blocks_per_group, bs, D);
          float dot = 0.f;
          for (int d = 0; d < D; ++d)
            dot += ld<T>(a.query, (q0 + i) * a.q_stride_token + h * a.q_stride_head + d) * ld<T>(a.key_cache, row + d);
          scores[k] = dot * a.scale;
          mx = std::max(mx, scores[k]);
        }
        std::vector<float> acc(D, 0.f);
        float sum = 0.f;
        for (int k = 0; k <= pos; ++k) {
          if (scores[k] == -INFINITY) continue;
          const float p = std::exp(scores[k] - mx);
          sum += p;
          const int64_t row = cache_row(a.block_tables[s * a.bt_stride + k / bs], k % bs, kvh, a.num_kv_heads, a.blocks_per_group, bs, D);
          for (int d = 0; d < D; ++d) acc[d] += p * ld<T>(a.value_cache, row + d);
        }
        for (int d = 0; d < D; ++d) st<T>(a.out, (q0 + i) * a.o_stride_token + h * a.o_stride_head + d, acc[d] / sum);
      }
    }
  }
}

template <typename T>
void rms_norm(const void* x, int64_t xs, const void* w, void* out, int64_t os, int64_t n, int64_t H, float eps) {
  for (int64_t t = 0; t < n; ++t) {
    float ss = 0.f;
    for (int64_t i = 0; i < H; ++i) ss += ld<T>(x, t * xs + i) * ld<T>(x, t * xs + i);
    const float inv = 1.0f / std::sqrt(ss / float(H) + eps);
    for (int64_t i = 0; i < H; ++i) st<T>(out, t * os + i, ld<T>(w, i) * rnd<T>(ld<T>(x, t * xs + i) * inv));
  }
}

template <typename T>
void fused_add_rms_norm(void* x, int64_t xs, void* r, int64_t rs, const void* w, int64_t n, int64_t H, float eps) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < H; ++i) st<T>(r, t * rs + i, ld<T>(x, t * xs + i) + ld<T>(r, t * rs + i));
  rms_norm<T>(r, rs, w, x, xs, n, H, eps);
}

template <typename T>
void rotary_embedding(const RotaryArgs& a) {
  const int half = a.rot_dim / 2;
  auto rotate = [&](void* base, int64_t off, const float* cos, const float* sin) {
    for (int i = 0; i < half; ++i) {
      const int64_t i1 = a.is_neox ? i : 2 * i, i2 = a.is_neox ? i + half : 2 * i + 1;
      const float x1 = ld<T>(base, off + i1), x2 = ld<T>(base, off + i2);
      st<T>(base, off + i1, x1 * cos[i] - x2 * sin[i]);
      st<T>(base, off + i2, x2 * cos[i] + x1 * sin[i]);
    }
  };
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const float* cos = a.cos_sin_cache + a.positions[t] * a.rot_dim;
    for (int h = 0; h < a.num_q_heads; ++h) rotate(a.query, t * a.q_stride_token + h * a.q_stride_head, cos, cos + half);
    for (int h = 0; a.key && h < a.num_kv_heads; ++h) rotate(a.key, t * a.k_stride_token + h * a.k_stride_head, cos, cos + half);
  }
}

template <typename T>
void silu_and_mul(const void* x, int64_t xs, void* out, int64_t os, int64_t n, int64_t I) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < I; ++i) {
      const float g = ld<T>(x, t * xs + i);
      st<T>(out, t * os + i, rnd<T>(g / (1.0f + std::exp(-g))) * ld<T>(x, t * xs + I + i));
    }
}

inline void write_kv_cache(const WriteKvArgs& a) {
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    if (a.slot_mapping[t] < 0) continue;
    const int64_t b = a.slot_mapping[t] / a.block_size, o = a.slot_mapping[t] % a.block_size, bytes = int64_t(a.head_size) * a.elem_size;
    for (int h = 0; h < a.num_kv_heads; ++h) {
      const int64_t dst = cache_row(b, o, h, a.num_kv_heads, a.blocks_per_group, a.block_size, a.head_size) * a.elem_size;
      std::memcpy(static_cast<char*>(a.key_cache) + dst, static_cast<const char*>(a.key) + (t * a.k_stride_token + h * a.k_stride_head) * a.elem_size, bytes);
      std::memcpy(static_cast<char*>(a.value_cache) + dst, static_cast<const char*>(a.value) + (t * a.v_stride_token + h * a.v_stride_head) * a.elem_size, bytes);
    }
  }
}

inline void copy_blocks(void* const* kc, void* const* vc, int layers, const KvCacheLayout& l, int elem_size, const int64_t* map, int64_t pairs) {
  const int64_t bytes = int64_t(l.block_size) * l.head_size * elem_size;
  for (int n = 0; n < layers; ++n)
    for (int64_t p = 0; p < pairs; ++p)
      for (void* const* c : {kc, vc})
        for (int h = 0; h < l.num_kv_heads; ++h)
          std::memmove(static_cast<char*>(c[n]) + cache_row(map[2 * p + 1], 0, h, l.num_kv_heads, l.blocks_per_group, l.block_size, l.head_size) * elem_size,
                       static_cast<char*>(c[n]) + cache_row(map[2 * p], 0, h, l.num_kv_heads, l.blocks_per_group, l.block_size, l.head_size) * elem_size, bytes);
}

// Per token: h = A_slot x (fp32), then each targeted slice's columns get h[slice ranks] . B column, added
// to out in fp32 and rounded once. round_h: h rounded to T first (the tile paths' bf16 expand operand).
template <typename T>
void lora_apply(const LoraArgs& a, bool round_h = false) {
  std::vector<float> h(size_t(a.rank));
  for (int64_t s = 0; s < a.num_segments; ++s) {
    const int64_t slot = a.segments[3 * s], start = a.segments[3 * s + 1], end = a.segments[3 * s + 2];
    const int32_t* ro = a.rank_offsets + slot * (a.num_slices + 1);
    for (int64_t t = start; t < end; ++t) {
      for (int64_t r = ro[0]; r < ro[a.num_slices]; ++r) {
        float dot = 0.f;
        for (int64_t k = 0; k < a.in; ++k) dot += ld<T>(a.x, t * a.x_stride + k) * ld<T>(a.a, (slot * a.rank + r) * a.in + k);
        h[size_t(r)] = round_h ? rnd<T>(dot) : dot;
      }
      for (int i = 0; i < a.num_slices; ++i) {
        if (ro[i + 1] <= ro[i]) continue;
        for (int64_t c = a.slice_offsets[i]; c < a.slice_offsets[i + 1]; ++c) {
          float d = 0.f;
          const int64_t col = c - a.slice_offsets[i];  // column inside the slice
          const int64_t base = slot * lora_b_offset(a.slice_offsets, a.slice_ranks, a.num_slices) +
                               lora_b_offset(a.slice_offsets, a.slice_ranks, i) + (col / kLoraPanel) * a.slice_ranks[i] * kLoraPanel;
          for (int64_t r = ro[i]; r < ro[i + 1]; ++r) d += h[size_t(r)] * ld<T>(a.b, base + (r - ro[i]) * kLoraPanel + col % kLoraPanel);
          st<T>(a.out, t * a.out_stride + c, ld<T>(a.out, t * a.out_stride + c) + d);
        }
      }
    }
  }
}

}  // namespace llmchat::reference
