// GGUF blocks -> a tile layout in one pass (gguf_tiles.h has the orders). Plain scalar byte work: it runs once
// per load, bound by reading the file, on every thread of the pool.
#include "gguf_tiles.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "../vec/dtypes.h"

namespace llmchat {
namespace {

constexpr int64_t kRows = 16;   // a tile group
constexpr int64_t kBlock = 32;  // elements of a block of the layouts
constexpr int64_t kSuper = 256;

struct TypeInfo {
  int64_t elems, bytes;  // a file block
  bool k_quant, nibbles, high, mins;
};

TypeInfo info(GgufType t, bool q6_wide) {
  switch (t) {
    case GgufType::Q8_0: return {32, 34, false, false, false, false};
    case GgufType::Q4_0: return {32, 18, false, true, false, false};
    case GgufType::Q4_1: return {32, 20, false, true, false, true};
    case GgufType::Q5_0: return {32, 22, false, true, true, false};
    case GgufType::Q5_1: return {32, 24, false, true, true, true};
    case GgufType::Q4_K: return {256, 144, true, true, false, true};
    case GgufType::Q5_K: return {256, 176, true, true, true, true};
    case GgufType::Q6_K: return {256, 210, true, !q6_wide, !q6_wide, false};
  }
  return {0, 0, false, false, false, false};
}

inline uint16_t half_bits(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// One group's decoded rows, each in the row layout: values as nibble bytes (byte m of a block: element m low,
// m + 16 high) or int8, high bits as a 32-bit mask per block and plane (bit j: element j), and the file's factors.
struct Group {
  int64_t cols, subs, supers, blocks, row_values;
  std::vector<uint8_t> values;   // [16][row_values]
  std::vector<uint32_t> masks;   // [16][blocks][2]
  std::vector<uint8_t> sc, mn;   // K-quants: [16][subs] (Q6_K: i8 sc per 16, subs = cols / 16)
  std::vector<uint16_t> d, dm;   // K-quants: fp16 bits [16][supers] (dm = -dmin); else [16][blocks] scale, min
  Group(int64_t c, GgufType t, bool nibbles)
      : cols(c), subs(t == GgufType::Q6_K ? c / 16 : c / kBlock), supers(c / kSuper), blocks(c / kBlock),
        row_values(nibbles ? c / 2 : c), values(kRows * row_values), masks(kRows * blocks * 2), sc(kRows * subs),
        mn(kRows * subs), d(kRows * blocks), dm(kRows * blocks) {}
};

void k_scales(const uint8_t* s, uint8_t* sc, uint8_t* mn) {  // 12 bytes -> 8 six-bit scales and mins
  for (int i = 0; i < 4; ++i) {
    sc[i] = s[i] & 63;
    mn[i] = s[4 + i] & 63;
    sc[4 + i] = (s[8 + i] & 15) | ((s[i] >> 2) & 0x30);
    mn[4 + i] = (s[8 + i] >> 4) | ((s[4 + i] >> 2) & 0x30);
  }
}

// A sub-block of 32 nibbles given as 32 bytes whose nibble `shift` (0 or 4) holds element j -> 16 nibble bytes.
inline void nibble_pairs(const uint8_t* q, int shift, uint8_t* out) {
  if (shift == 0) {   // two constant-shift loops: each one vector instruction stream, where a variable shift is not
    for (int m = 0; m < 16; ++m) out[m] = uint8_t((q[m] & 15) | (q[m + 16] << 4));
  } else {
    for (int m = 0; m < 16; ++m) out[m] = uint8_t((q[m] >> 4) | (q[m + 16] & 0xF0));
  }
}

void decode_row(GgufType t, bool nibbles, const uint8_t* p, Group& g, int64_t n) {
  uint8_t* v = g.values.data() + n * g.row_values;
  uint32_t* mask = g.masks.data() + n * g.blocks * 2;
  const TypeInfo ti = info(t, false);
  for (int64_t blk = 0; blk < g.cols / ti.elems; ++blk, p += ti.bytes) {
    switch (t) {
      case GgufType::Q8_0:
        std::memcpy(v, p + 2, 32), v += 32, mask += 2;
        break;
      case GgufType::Q4_0: case GgufType::Q4_1: case GgufType::Q5_0: case GgufType::Q5_1: {
        const int qs_at = t == GgufType::Q4_0 ? 2 : t == GgufType::Q4_1 ? 4 : t == GgufType::Q5_0 ? 6 : 8;
        if (t == GgufType::Q5_0 || t == GgufType::Q5_1) std::memcpy(mask, p + qs_at - 4, 4);
        std::memcpy(v, p + qs_at, 16), v += 16, mask += 2;
        break;
      }
      case GgufType::Q4_K: case GgufType::Q5_K: {
        const bool five = t == GgufType::Q5_K;
        const uint8_t* qs = p + (five ? 48 : 16);
        for (int s = 0; s < 8; ++s, v += 16, mask += 2) {
          nibble_pairs(qs + 32 * (s / 2), 4 * (s % 2), v);
          if (five) {
            uint32_t bits = 0;
            for (int j = 0; j < 32; ++j) bits |= uint32_t(p[16 + j] >> s & 1) << j;
            mask[0] = bits;
          }
        }
        break;
      }
      case GgufType::Q6_K:
        for (int s = 0; s < 8; ++s, mask += 2) {
          const int half = s / 4, part = s % 4;
          const uint8_t* ql = p + 64 * half + 32 * (part % 2);
          const uint8_t* qh = p + 128 + 32 * half;
          if (nibbles) {
            nibble_pairs(ql, 4 * (part / 2), v);
            uint32_t bit4 = 0, bit5 = 0;
            for (int j = 0; j < 32; ++j) {
              bit4 |= uint32_t(qh[j] >> (2 * part) & 1) << j;
              bit5 |= uint32_t(qh[j] >> (2 * part + 1) & 1) << j;
            }
            mask[0] = bit4, mask[1] = bit5, v += 16;
          } else {   // int8 values w = q - 32 (Q8Halves)
            for (int j = 0; j < 32; ++j)
              v[j] = uint8_t(int(((ql[j] >> (4 * (part / 2))) & 15) | ((qh[j] >> (2 * part) & 3) << 4)) - 32);
            v += 32;
          }
        }
        break;
    }
    // the factors
    if (!ti.k_quant) {
      g.d[n * g.blocks + blk] = half_bits(p);
      if (ti.mins) g.dm[n * g.blocks + blk] = half_bits(p + 2);
    } else if (t == GgufType::Q6_K) {
      std::memcpy(g.sc.data() + n * g.subs + 16 * blk, p + 192, 16);
      g.d[n * g.supers + blk] = half_bits(p + 208);
    } else {
      k_scales(p + 4, g.sc.data() + n * g.subs + 8 * blk, g.mn.data() + n * g.subs + 8 * blk);
      g.d[n * g.supers + blk] = half_bits(p);
      g.dm[n * g.supers + blk] = half_bits(p + 2) ^ 0x8000;   // -(dmin m) = m (-dmin)
    }
  }
}

// x86: a block's row chunks of 4 bytes, 16 rows side by side ([b][r][n][4 bytes]); int8 values biased by 128.
void values_x86(const Group& g, bool nibbles, uint8_t* out) {
  const int64_t words = g.row_values / 4;   // 4-byte words a row
  const uint32_t bias = nibbles ? 0 : 0x80808080u;
  for (int64_t w = 0; w < words; ++w)
    for (int n = 0; n < kRows; ++n, out += 4) {
      uint32_t x;
      std::memcpy(&x, &g.values[n * g.row_values + 4 * w], 4);
      x ^= bias;
      std::memcpy(out, &x, 4);
    }
}

// ARM: per block and row pair p, chunk c of 8 bytes of row 2p, then of row 2p + 1 ([b][p][c][h][8 bytes]).
void values_arm(const Group& g, bool nibbles, uint8_t* out) {
  const int64_t block_bytes = nibbles ? 16 : 32, chunks = block_bytes / 8;
  for (int64_t b = 0; b < g.blocks; ++b)
    for (int p = 0; p < 8; ++p)
      for (int64_t c = 0; c < chunks; ++c)
        for (int h = 0; h < 2; ++h, out += 8)
          std::memcpy(out, &g.values[(2 * p + h) * g.row_values + b * block_bytes + 8 * c], 8);
}

inline uint32_t mask_of(const Group& g, int row, int64_t b, int plane) { return g.masks[(row * g.blocks + b) * 2 + plane]; }

void high_x86(const Group& g, int planes, uint8_t* out) {
  for (int64_t b = 0; b < g.blocks; ++b)
    for (int plane = 0; plane < planes; ++plane)
      for (int r = 0; r < 8; ++r) {
        uint64_t word = 0;
        for (int n = 0; n < kRows; ++n) word |= uint64_t(mask_of(g, n, b, plane) >> (4 * r) & 15) << (4 * n);
        std::memcpy(out, &word, 8);
        out += 8;
      }
}

void high_arm(const Group& g, int planes, uint8_t* out) {
  for (int64_t b = 0; b < g.blocks; ++b) {
    if (planes == 2) {
      for (int p = 0; p < 8; ++p)
        for (int h = 0; h < 2; ++h) {
          const uint32_t m4 = mask_of(g, 2 * p + h, b, 0), m5 = mask_of(g, 2 * p + h, b, 1);
          for (int j = 0; j < 8; ++j) {
            uint8_t byte = 0;
            for (int c = 0; c < 4; ++c) byte |= (m4 >> (8 * c + j) & 1) << (2 * c) | (m5 >> (8 * c + j) & 1) << (2 * c + 1);
            *out++ = byte;
          }
        }
    } else {
      for (int q = 0; q < 4; ++q)
        for (int h = 0; h < 2; ++h) {
          const uint32_t even = mask_of(g, 4 * q + h, b, 0), odd = mask_of(g, 4 * q + 2 + h, b, 0);
          for (int j = 0; j < 8; ++j) {
            uint8_t byte = 0;
            for (int c = 0; c < 4; ++c) byte |= (even >> (8 * c + j) & 1) << c | (odd >> (8 * c + j) & 1) << (4 + c);
            *out++ = byte;
          }
        }
    }
  }
}

// fp16 bits [16][count] row order -> [count][16]
uint8_t* halves_group_major(const std::vector<uint16_t>& bits, int64_t count, uint8_t* out) {
  for (int64_t i = 0; i < count; ++i)
    for (int n = 0; n < kRows; ++n, out += 2) std::memcpy(out, &bits[n * count + i], 2);
  return out;
}

// u6 integers [16][8 supers] -> per super-block [4][16] nibble pairs (j, j + 4), [2][16] four 2-bit highs
uint8_t* pack_six_bits(const std::vector<uint8_t>& ints, int64_t supers, uint8_t* out) {
  const int64_t subs = 8 * supers;
  for (int64_t s = 0; s < supers; ++s) {
    for (int j = 0; j < 4; ++j)
      for (int n = 0; n < kRows; ++n) {
        const uint8_t* x = &ints[n * subs + 8 * s];
        *out++ = (x[j] & 15) | (x[j + 4] & 15) << 4;
      }
    for (int h = 0; h < 2; ++h)
      for (int n = 0; n < kRows; ++n) {
        const uint8_t* x = &ints[n * subs + 8 * s + 4 * h];
        uint8_t byte = 0;
        for (int i = 0; i < 4; ++i) byte |= (x[i] >> 4 & 3) << (2 * i);
        *out++ = byte;
      }
  }
  return out;
}

void factors(GgufType t, const Group& g, uint8_t* scales, uint8_t* mins) {
  if (t == GgufType::Q6_K) {   // i8 sc [subs][16], then d [supers][16]
    for (int64_t s = 0; s < g.subs; ++s)
      for (int n = 0; n < kRows; ++n) *scales++ = g.sc[n * g.subs + s];
    halves_group_major(g.d, g.supers, scales);   // K-quants fill [16][supers] of d and dm
  } else if (t == GgufType::Q4_K || t == GgufType::Q5_K) {
    halves_group_major(g.d, g.supers, pack_six_bits(g.sc, g.supers, scales));
    halves_group_major(g.dm, g.supers, pack_six_bits(g.mn, g.supers, mins));
  } else {
    halves_group_major(g.d, g.blocks, scales);
    if (mins != nullptr) halves_group_major(g.dm, g.blocks, mins);
  }
}

}  // namespace

int64_t gguf_row_bytes(GgufType type, int64_t cols) {
  const TypeInfo ti = info(type, false);
  if (ti.elems == 0 || cols <= 0 || cols % ti.elems) return 0;
  return cols / ti.elems * ti.bytes;
}

// The row layout of rows [first, first + count) of a group.
void emit_rows(GgufType t, const TypeInfo& ti, const Group& g, int64_t first, int count, int planes,
               const GgufTileArgs& a) {
  const int64_t blocks = g.blocks, factor_count = t == GgufType::Q6_K ? g.subs : blocks;
  for (int n = 0; n < count; ++n) {
    const int64_t r = first + n;
    std::memcpy(a.values + r * g.row_values, &g.values[n * g.row_values], size_t(g.row_values));
    if (ti.high) {
      uint8_t* high = a.high + r * planes * blocks * 4;
      for (int64_t b = 0; b < blocks; ++b) std::memcpy(high + b * planes * 4, &g.masks[(n * blocks + b) * 2], size_t(planes * 4));
    }
    if (!ti.k_quant) {
      std::memcpy(a.scales + r * blocks * 2, &g.d[n * blocks], size_t(blocks * 2));
      if (ti.mins) std::memcpy(a.mins + r * blocks * 2, &g.dm[n * blocks], size_t(blocks * 2));
      continue;
    }
    float* scales = reinterpret_cast<float*>(a.scales) + r * factor_count;
    const int64_t per_super = factor_count / g.supers;
    for (int64_t s = 0; s < factor_count; ++s) {
      const float d = to_float(fp16_t{g.d[n * g.supers + s / per_super]});
      const uint8_t sc = g.sc[n * g.subs + s];
      scales[s] = t == GgufType::Q6_K ? float(int8_t(sc)) * d : d * float(sc);
    }
    if (ti.mins) {
      float* mins = reinterpret_cast<float*>(a.mins) + r * factor_count;
      for (int64_t s = 0; s < factor_count; ++s)
        mins[s] = to_float(fp16_t{g.dm[n * g.supers + s / per_super]}) * float(g.mn[n * g.subs + s]);   // -(dmin m)
    }
  }
}

void gguf_to_tiles(const GgufTileArgs& a, const Runtime& rt) {
  const TypeInfo ti = info(a.type, a.q6_wide);
  const int64_t row_bytes = gguf_row_bytes(a.type, a.cols);
  const int64_t groups = (a.rows + kRows - 1) / kRows;
  const bool arm = a.layout == GgufLayout::ArmTiles;
  // bytes one group takes in each output of the tiles
  const int64_t blocks = a.cols / kBlock, supers = a.cols / kSuper;
  const int64_t value_bytes = kRows * (ti.nibbles ? a.cols / 2 : a.cols);
  const int64_t planes = a.type == GgufType::Q6_K ? 2 : 1;
  const int64_t high_bytes = ti.high ? kRows * planes * blocks * 4 : 0;
  const int64_t factor_bytes = a.type == GgufType::Q6_K ? kRows * 18 * supers
                               : ti.k_quant ? kRows * 8 * supers : kRows * blocks * 2;
  rt.parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
    Group g(a.cols, a.type, ti.nibbles);
    for (int64_t gi = g0; gi < g1; ++gi) {
      const int count = int(std::min<int64_t>(kRows, a.rows - gi * kRows));   // the row layout's last group may be short
      for (int64_t n = 0; n < count; ++n) {
        const int64_t row = a.order ? a.order[gi * kRows + n] : gi * kRows + n;
        decode_row(a.type, ti.nibbles, a.raw + row * row_bytes, g, n);
      }
      if (a.layout == GgufLayout::Rows) {
        emit_rows(a.type, ti, g, gi * kRows, count, int(planes), a);
        continue;
      }
      uint8_t* values = a.values + gi * value_bytes;
      if (arm) values_arm(g, ti.nibbles, values); else values_x86(g, ti.nibbles, values);
      if (ti.high) {
        uint8_t* high = a.high + gi * high_bytes;
        if (arm) high_arm(g, int(planes), high); else high_x86(g, int(planes), high);
      }
      factors(a.type, g, a.scales + gi * factor_bytes, ti.mins ? a.mins + gi * factor_bytes : nullptr);
    }
  });
}

}  // namespace llmchat
