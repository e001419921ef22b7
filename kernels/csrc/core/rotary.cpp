// Rotary position embedding in place on query and key heads, in fp32 from an fp32 cos/sin cache.
// NeoX style (HF rotate_half): pairs (x[i], x[i + rot/2]); GPT-J style: pairs (x[2i], x[2i+1]).
#include "../vec/vec.h"
#include "dispatch.h"

namespace llmchat {
namespace {

using vec::VecF;

template <typename T>
void rotate_neox(T* x, const float* cos, const float* sin, int half) {
  T* y = x + half;
  int i = 0;
  for (; i + 16 <= half; i += 16) {
    VecF a = VecF::load(x + i), b = VecF::load(y + i), c = VecF::load(cos + i), s = VecF::load(sin + i);
    (a * c - b * s).store(x + i);
    vec::fma(b, c, a * s).store(y + i);
  }
  for (; i < half; ++i) {
    const float a = to_float(x[i]), b = to_float(y[i]);
    x[i] = from_float<T>(a * cos[i] - b * sin[i]);
    y[i] = from_float<T>(b * cos[i] + a * sin[i]);
  }
}

template <typename T>
void rotate_gptj(T* x, const float* cos, const float* sin, int half) {
  for (int i = 0; i < half; ++i) {
    const float a = to_float(x[2 * i]), b = to_float(x[2 * i + 1]);
    x[2 * i] = from_float<T>(a * cos[i] - b * sin[i]);
    x[2 * i + 1] = from_float<T>(b * cos[i] + a * sin[i]);
  }
}

template <typename T>
void rotate_heads(T* base, int64_t stride_head, int num_heads, const float* cos, const float* sin, int half, bool neox) {
  for (int h = 0; h < num_heads; ++h) {
    T* x = base + h * stride_head;
    if (neox) rotate_neox(x, cos, sin, half);
    else rotate_gptj(x, cos, sin, half);
  }
}

}  // namespace

void rotary_embedding(const RotaryArgs& a, const Runtime& rt) {
  const int half = a.rot_dim / 2;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t row = int64_t(a.num_q_heads + a.num_kv_heads) * a.head_size;
    rt.parallel_for(a.num_tokens, grain_for(row), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const float* cos = a.cos_sin_cache + a.positions[t] * a.rot_dim;
        const float* sin = cos + half;
        rotate_heads(static_cast<T*>(a.query) + t * a.q_stride_token, a.q_stride_head, a.num_q_heads, cos, sin, half, a.is_neox);
        if (a.key)
          rotate_heads(static_cast<T*>(a.key) + t * a.k_stride_token, a.k_stride_head, a.num_kv_heads, cos, sin, half, a.is_neox);
      }
    });
  });
}

}  // namespace llmchat
