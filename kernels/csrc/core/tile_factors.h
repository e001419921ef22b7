// The per-block factors of the tile layouts (x86's quant_tiles.h, and the ARM layout of quant_tiles_neon.h,
// which keeps the same order): 16 rows side by side per sub-block, [g][s][16], as fp32 or fp16; or compact
// (K-quants: the file's small integers, u6 packed as quant_tiles.h says or i8, then one fp16 per 256
// elements). A compact factor is float(int) * float(fp16): exact (at most 19 significant bits), the fp32
// factor the file means: row dequantization and ARM's tiles give the same bits from either store (x86's tiles
// run compact K-quants' super-blocks in integers, quant_tiles.h).
#pragma once
#include <cstdint>
#include <cstring>

#include "../vec/dtypes.h"
#include "quant_linear.h"
#include "quant_tiles.h"

namespace llmchat {

enum Factors : int { kF32 = 0, kF16 = 1, kCompactU6 = 2, kCompactI8 = 3 };

// How w stores its factors: compact ones are u6 for Q4/Q5 (sc and m), i8 for Q8Halves/Q6 (Q6_K's sc).
inline Factors factors_of(const QuantWeightView& w) {
  if (!w.compact_factors) return w.half_factors ? kF16 : kF32;
  return w.kind == QuantKind::Q4 || w.kind == QuantKind::Q5 ? kCompactU6 : kCompactI8;
}

// Where group g's compact bytes start: u6 take 8 bytes a row per super-block (6 of integers, 2 of fp16),
// i8 one byte a sub-block and 2 a super-block.
inline const uint8_t* compact_group(Factors f, const void* p, int64_t g, int64_t subs, int64_t supers) {
  const int64_t per_row = f == kCompactU6 ? 8 * supers : subs + 2 * supers;
  return static_cast<const uint8_t*>(p) + g * kTileRows * per_row;
}

// The fp16 super-factor of row n for sub-block s.
inline float compact_super(Factors f, const uint8_t* group, int64_t s, int64_t subs, int64_t supers, int64_t n) {
  const int64_t ints = f == kCompactU6 ? supers * kCompact6Bytes : subs * kTileRows;
  uint16_t bits;
  std::memcpy(&bits, group + ints + (s / (subs / supers) * kTileRows + n) * 2, 2);
  return to_float(fp16_t{bits});
}

// The u6 integer of row n, sub-block j (0..7) of a super-block's 96 bytes.
inline int compact_u6(const uint8_t* ints, int64_t j, int64_t n) {
  const int low = ints[kTileRows * (j % 4) + n] >> (4 * (j / 4)) & 15;
  const int high = ints[4 * kTileRows + kTileRows * (j / 4) + n] >> (2 * (j % 4)) & 3;
  return low | high << 4;
}

// Row n's factor for sub-block s of group g (`subs` sub-blocks and `supers` super-blocks a row): the scalar
// form every vector path must agree with.
inline float tile_factor(Factors f, const void* p, int64_t g, int64_t s, int64_t subs, int64_t supers, int64_t n) {
  if (f == kF32) return static_cast<const float*>(p)[(g * subs + s) * kTileRows + n];
  if (f == kF16) return to_float(fp16_t{static_cast<const uint16_t*>(p)[(g * subs + s) * kTileRows + n]});
  const uint8_t* group = compact_group(f, p, g, subs, supers);
  const int integer = f == kCompactU6 ? compact_u6(group + s / 8 * kCompact6Bytes, s % 8, n)
                                      : int(int8_t(group[s * kTileRows + n]));
  return float(integer) * compact_super(f, group, s, subs, supers, n);
}

}  // namespace llmchat
