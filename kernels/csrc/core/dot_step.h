// One step of a row-times-row dot product over element type T, shared by the GEMV-shaped kernels
// (linear_small_m, lora_apply): bf16 goes through the pair-dot, 32 elements a step; other types widen
// to fp32 and use FMAs, 16 elements a step. The caller reduces the accumulator horizontally.
#pragma once
#include <cstdint>
#include <type_traits>

#include "../vec/vec.h"

namespace llmchat {

template <typename T> constexpr int64_t dot_step_elems() { return std::is_same_v<T, bf16_t> ? 32 : 16; }

template <typename T>
inline vec::VecF dot_step(vec::VecF acc, const T* w, const T* x) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    return vec::dot_bf16(acc, vec::VecB::load(w), vec::VecB::load(x));
  } else {
    return vec::fma(vec::VecF::load(w), vec::VecF::load(x), acc);
  }
}

}  // namespace llmchat
