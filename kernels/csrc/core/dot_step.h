// One step of a row-times-row dot product over element type T, shared by the GEMV-shaped kernels
// (linear_small_m, lora_apply). The caller reduces the accumulator horizontally and does the last
// K % kElems elements itself. A step is kElems / kPart parts in order; a block of weight rows loads each
// token's part once (load_x) and multiplies every row into it (madd), so the token is widened once per part:
//   fp32, fp16: 16 elements, widened to fp32, one FMA;
//   bf16 with the native pair-dot (VDPBF16PS, BFDOT): 32 elements, one pair-dot on bf16 as loaded;
//   bf16 otherwise: 32 elements as two parts of 16 widened to fp32, the FMAs of vec_math.h's portable
//   dot_bf16 in its order (the low 16 products, then the high 16, into the same accumulator lanes).
#pragma once
#include <cstdint>
#include <type_traits>

#include "../vec/vec.h"

namespace llmchat {

template <typename T>
struct DotStep {  // widened to fp32
  static constexpr int64_t kElems = std::is_same_v<T, bf16_t> ? 32 : 16;
  static constexpr int64_t kPart = 16;
  using X = vec::VecF;
  static X load_x(const T* x) { return vec::VecF::load(x); }
  static vec::VecF madd(vec::VecF acc, const T* w, const X& x) { return vec::fma(vec::VecF::load(w), x, acc); }
};
#ifdef LLMCHAT_NATIVE_BF16_DOT
template <>
struct DotStep<bf16_t> {
  static constexpr int64_t kElems = 32, kPart = 32;
  using X = vec::VecB;
  static X load_x(const bf16_t* x) { return vec::VecB::load(x); }
  static vec::VecF madd(vec::VecF acc, const bf16_t* w, const X& x) { return vec::dot_bf16(acc, vec::VecB::load(w), x); }
};
#endif

template <typename T> constexpr int64_t dot_step_elems() { return DotStep<T>::kElems; }

template <typename T>
inline vec::VecF dot_step(vec::VecF acc, const T* w, const T* x) {
  using Step = DotStep<T>;
  for (int64_t p = 0; p < Step::kElems; p += Step::kPart) acc = Step::madd(acc, w + p, Step::load_x(x + p));
  return acc;
}

}  // namespace llmchat
