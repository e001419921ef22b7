// RMSNorm and fused residual-add RMSNorm. Like HF: the norm is computed in fp32, the normalized value is
// rounded to the model dtype, then multiplied by the weight (rounded again), so bf16 results match torch. An fp32
// weight with bf16/fp16 rows is Gemma's norm: fp32 throughout, one rounding at the end.
#include <cmath>

#include "../vec/vec.h"
#include "dispatch.h"

namespace llmchat {
namespace {

using vec::VecF;

template <typename T>
float sum_squares(const T* x, int64_t H) {
  VecF acc = VecF::zero();
  int64_t i = 0;
  for (; i + 16 <= H; i += 16) {
    VecF v = VecF::load(x + i);
    acc = vec::fma(v, v, acc);
  }
  float s = vec::reduce_add(acc);
  for (; i < H; ++i) s += to_float(x[i]) * to_float(x[i]);
  return s;
}

template <typename T>
void normalize_row(const T* x, const T* w, T* out, int64_t H, float eps) {
  const float inv = 1.0f / std::sqrt(sum_squares(x, H) / float(H) + eps);
  const VecF iv = VecF::set1(inv);
  int64_t i = 0;
  for (; i + 16 <= H; i += 16) {
    VecF h = vec::round_to<T>(VecF::load(x + i) * iv);
    (VecF::load(w + i) * h).store(out + i);
  }
  for (; i < H; ++i) {
    const float h = to_float(from_float<T>(to_float(x[i]) * inv));
    out[i] = from_float<T>(to_float(w[i]) * h);
  }
}

// Gemma (transformers' Gemma3RMSNorm): the weight 1 + w is fp32 and the row is rounded once, after it.
template <typename T>
void normalize_row_f32_weight(const T* x, const float* w, T* out, int64_t H, float eps) {
  const float inv = 1.0f / std::sqrt(sum_squares(x, H) / float(H) + eps);
  const VecF iv = VecF::set1(inv);
  int64_t i = 0;
  for (; i + 16 <= H; i += 16) (VecF::load(x + i) * iv * VecF::load(w + i)).store(out + i);
  for (; i < H; ++i) out[i] = from_float<T>(to_float(x[i]) * inv * w[i]);
}

template <typename T>
void normalize(const T* x, const void* w, bool f32_weight, T* out, int64_t H, float eps) {
  if (f32_weight)
    normalize_row_f32_weight(x, static_cast<const float*>(w), out, H, eps);
  else
    normalize_row(x, static_cast<const T*>(w), out, H, eps);
}

template <typename T>
void add_into(const T* x, T* residual, int64_t H) {
  int64_t i = 0;
  for (; i + 16 <= H; i += 16) (VecF::load(x + i) + VecF::load(residual + i)).store(residual + i);
  for (; i < H; ++i) residual[i] = from_float<T>(to_float(x[i]) + to_float(residual[i]));
}

}  // namespace

void rms_norm(DType dt, const void* x, int64_t x_stride, const void* weight, void* out, int64_t out_stride,
              int64_t num_tokens, int64_t hidden, float eps, const Runtime& rt, bool f32_weight) {
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    rt.parallel_for(num_tokens, grain_for(hidden), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        normalize(static_cast<const T*>(x) + t * x_stride, weight, f32_weight, static_cast<T*>(out) + t * out_stride,
                  hidden, eps);
    });
  });
}

void fused_add_rms_norm(DType dt, void* x, int64_t x_stride, void* residual, int64_t r_stride, const void* weight,
                        int64_t num_tokens, int64_t hidden, float eps, const Runtime& rt, bool f32_weight) {
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    rt.parallel_for(num_tokens, grain_for(hidden), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        T* xr = static_cast<T*>(x) + t * x_stride;
        T* rr = static_cast<T*>(residual) + t * r_stride;
        add_into(xr, rr, hidden);  // rounded to T, as torch's `residual + x` is
        normalize(rr, weight, f32_weight, xr, hidden, eps);
      }
    });
  });
}

}  // namespace llmchat
