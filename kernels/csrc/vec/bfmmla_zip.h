// Operand and result shuffles BFMMLA kernels share (ARM with bf16): two rows' 4-element halves zipped into one
// 2x4 operand, a 2x2 result's rows taken from two results side by side, and the 4-row quad transpose that
// packs b operands (attention's value rows, LoRA's B panels).
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

// 4 rows x 8 columns (x0..x3: the rows' elements c..c+7) as four b operands at d: column pair e (0..3) is d[8e..8e+7]
// = [rows 0..3 of column c + 2e, rows 0..3 of column c + 2e + 1].
inline void store_column_pairs(uint16x8_t x0, uint16x8_t x1, uint16x8_t x2, uint16x8_t x3, uint16_t* d) {
  const uint32x4_t a = vreinterpretq_u32_u16(vzip1q_u16(x0, x1)), b = vreinterpretq_u32_u16(vzip1q_u16(x2, x3));
  const uint32x4_t e = vreinterpretq_u32_u16(vzip2q_u16(x0, x1)), f = vreinterpretq_u32_u16(vzip2q_u16(x2, x3));
  vst1q_u16(d, vreinterpretq_u16_u32(vzip1q_u32(a, b)));
  vst1q_u16(d + 8, vreinterpretq_u16_u32(vzip2q_u32(a, b)));
  vst1q_u16(d + 16, vreinterpretq_u16_u32(vzip1q_u32(e, f)));
  vst1q_u16(d + 24, vreinterpretq_u16_u32(vzip2q_u32(e, f)));
}

}  // namespace llmchat::bfmmla
