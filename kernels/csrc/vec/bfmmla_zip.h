// Operand and result shuffles BFMMLA kernels share (ARM with bf16): two rows' 4-element halves zipped into one
// 2x4 operand, and a 2x2 result's rows taken from two results side by side.
#pragma once
#include <arm_neon.h>

namespace llmchat::bfmmla {

inline bfloat16x8_t low_halves(uint16x8_t a, uint16x8_t b) {  // [a 0..3, b 0..3]
  return vreinterpretq_bf16_u64(vzip1q_u64(vreinterpretq_u64_u16(a), vreinterpretq_u64_u16(b)));
}
inline bfloat16x8_t high_halves(uint16x8_t a, uint16x8_t b) {  // [a 4..7, b 4..7]
  return vreinterpretq_bf16_u64(vzip2q_u64(vreinterpretq_u64_u16(a), vreinterpretq_u64_u16(b)));
}
inline float32x4_t first_rows(float32x4_t a, float32x4_t b) {  // row 0 of two 2x2 results side by side
  return vreinterpretq_f32_u64(vzip1q_u64(vreinterpretq_u64_f32(a), vreinterpretq_u64_f32(b)));
}
inline float32x4_t second_rows(float32x4_t a, float32x4_t b) {
  return vreinterpretq_f32_u64(vzip2q_u64(vreinterpretq_u64_f32(a), vreinterpretq_u64_f32(b)));
}

}  // namespace llmchat::bfmmla
