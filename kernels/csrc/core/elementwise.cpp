// SiLU-and-mul and GELU(tanh)-and-mul (the gated MLP activations), a row scale, the KV cache copies, plus the
// core's runtime helpers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../vec/vec.h"
#include "dispatch.h"

namespace llmchat {
namespace {

using vec::VecF;

// Like torch on bf16: silu(gate) is rounded to T before the multiply, the product rounded again.
template <typename T>
void silu_mul_row(const T* gate, const T* up, T* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    VecF s = vec::round_to<T>(vec::silu(VecF::load(gate + i)));
    (s * VecF::load(up + i)).store(out + i);
  }
  for (; i < n; ++i) {
    const float g = to_float(gate[i]);
    const float s = to_float(from_float<T>(g / (1.0f + std::exp(-g))));
    out[i] = from_float<T>(s * to_float(up[i]));
  }
}

// Gemma's GeGLU: gelu with torch's tanh approximation, in fp32, rounded to T before the multiply (like torch
// on bf16). Scalar: the MLP's matmuls dominate, and std::tanh keeps it close to torch's (the oracle).
template <typename T>
void gelu_tanh_mul_row(const T* gate, const T* up, T* out, int64_t n) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = to_float(gate[i]);
    const float s = to_float(from_float<T>(0.5f * g * (1.0f + std::tanh(kBeta * (g + kKappa * g * g * g)))));
    out[i] = from_float<T>(s * to_float(up[i]));
  }
}

}  // namespace

const char* isa_name() { return vec::kIsa; }

Runtime serial_runtime() {
  Runtime rt;
  rt.num_threads = 1;
  rt.parallel_for = [](int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& fn) {
    if (n > 0) fn(0, n);
  };
  return rt;
}

namespace {
// Sum of p[0, len) with vector loads: four chains, so the adds never wait on each other.
float sum_span(const float* p, int64_t len) {
  VecF a0 = VecF::zero(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= len; i += 64) {
    a0 = a0 + VecF::load(p + i), a1 = a1 + VecF::load(p + i + 16);
    a2 = a2 + VecF::load(p + i + 32), a3 = a3 + VecF::load(p + i + 48);
  }
  float tail = 0.f;
  for (; i < len; ++i) tail += p[i];
  return vec::reduce_add((a0 + a1) + (a2 + a3)) + tail;
}
}  // namespace

float read_sum(const float* x, int64_t n, const Runtime& rt) {
  constexpr int64_t kChunk = 1 << 16;  // floats per task (256 KB): long sequential streams per thread
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> partial(chunks, 0.f);
  rt.parallel_for(chunks, std::max<int64_t>(1, chunks / std::max(1, rt.num_threads)), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) partial[c] = sum_span(x + c * kChunk, std::min(kChunk, n - c * kChunk));
  });
  float sum = 0.f;
  for (float v : partial) sum += v;
  return sum;
}

float read_runs_sum(const float* x, int64_t run_floats, const int64_t* run_starts, int64_t num_runs, const Runtime& rt) {
  // Prefetched like paged attention's K/V: into L2, a fixed distance ahead in the read order.
  constexpr int64_t kAheadLines = (16 << 10) / 64;
  const int64_t run_lines = (run_floats * 4 + 63) / 64, threads = std::max(1, rt.num_threads);
  std::vector<float> partial(threads, 0.f);
  rt.parallel_for(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t r0 = num_runs * t / threads, r1 = num_runs * (t + 1) / threads;
      int64_t ahead_run = r0, ahead_line = 0;  // the next line to request, in this thread's read order
      auto request = [&](int64_t lines) {
        for (; lines > 0 && ahead_run < r1; --lines) {
          __builtin_prefetch(reinterpret_cast<const char*>(x + run_starts[ahead_run]) + ahead_line * 64, 0, 1);
          if (++ahead_line == run_lines) ahead_line = 0, ++ahead_run;
        }
      };
      request(kAheadLines);
      float sum = 0.f;
      for (int64_t r = r0; r < r1; ++r) {
        const float* p = x + run_starts[r];
        for (int64_t f = 0; f < run_floats; f += 256) {  // 1 KB read, 16 lines requested: spread over the run
          request(16);
          sum += sum_span(p + f, std::min<int64_t>(256, run_floats - f));
        }
      }
      partial[t] = sum;
    }
  });
  float sum = 0.f;
  for (float v : partial) sum += v;
  return sum;
}

void silu_and_mul(DType dt, const void* x, int64_t x_stride, void* out, int64_t out_stride, int64_t num_tokens,
                  int64_t inter, const Runtime& rt) {
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    rt.parallel_for(num_tokens, grain_for(2 * inter), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const T* row = static_cast<const T*>(x) + t * x_stride;
        silu_mul_row(row, row + inter, static_cast<T*>(out) + t * out_stride, inter);
      }
    });
  });
}

void gelu_tanh_and_mul(DType dt, const void* x, int64_t x_stride, void* out, int64_t out_stride, int64_t num_tokens,
                       int64_t inter, const Runtime& rt) {
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    rt.parallel_for(num_tokens, grain_for(8 * inter), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const T* row = static_cast<const T*>(x) + t * x_stride;
        gelu_tanh_mul_row(row, row + inter, static_cast<T*>(out) + t * out_stride, inter);
      }
    });
  });
}

void scale_rows(DType dt, void* x, int64_t x_stride, int64_t num_tokens, int64_t width, float s, const Runtime& rt) {
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    rt.parallel_for(num_tokens, grain_for(width), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        T* row = static_cast<T*>(x) + t * x_stride;
        for (int64_t i = 0; i < width; ++i) row[i] = from_float<T>(to_float(row[i]) * s);
      }
    });
  });
}

void write_kv_cache(const WriteKvArgs& a, const Runtime& rt) {
  const int64_t es = a.elem_size, row_bytes = int64_t(a.head_size) * es;
  const char* key = static_cast<const char*>(a.key);
  const char* value = static_cast<const char*>(a.value);
  char* kc = static_cast<char*>(a.key_cache);
  char* vc = static_cast<char*>(a.value_cache);
  const KvCacheLayout layout{a.num_kv_heads, a.block_size, a.head_size, a.blocks_per_group};
  rt.parallel_for(a.num_tokens, grain_for(2 * int64_t(a.num_kv_heads) * a.head_size), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t slot = a.slot_mapping[t];
      if (slot < 0) continue;  // padding token: nothing to store
      const int64_t block = slot / a.block_size, offset = slot % a.block_size;
      for (int h = 0; h < a.num_kv_heads; ++h) {
        const int64_t dst = (layout.block_offset(block, h) + offset * a.head_size) * es;
        std::memcpy(kc + dst, key + (t * a.k_stride_token + h * a.k_stride_head) * es, row_bytes);
        std::memcpy(vc + dst, value + (t * a.v_stride_token + h * a.v_stride_head) * es, row_bytes);
      }
    }
  });
}

void copy_blocks(void* const* key_caches, void* const* value_caches, int num_layers, const KvCacheLayout& layout,
                 int elem_size, const int64_t* mapping, int64_t num_pairs, const Runtime& rt) {
  const int64_t piece_bytes = int64_t(layout.block_size) * layout.head_size * elem_size;  // one head of one block
  rt.parallel_for(int64_t(num_layers) * num_pairs, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t layer = i / num_pairs, src = mapping[2 * (i % num_pairs)], dst = mapping[2 * (i % num_pairs) + 1];
      for (void* const* caches : {key_caches, value_caches}) {
        char* base = static_cast<char*>(caches[layer]);
        for (int h = 0; h < layout.num_kv_heads; ++h)
          std::memmove(base + layout.block_offset(dst, h) * elem_size, base + layout.block_offset(src, h) * elem_size,
                       piece_bytes);
      }
    }
  });
}

}  // namespace llmchat
