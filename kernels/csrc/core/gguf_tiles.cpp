// GGUF blocks -> a tile layout in one pass (gguf_tiles.h has the orders). Plain scalar byte work: it runs once
// per load, bound by reading the file, on every thread of the pool.
#include "gguf_tiles.h"

#include <cstring>
#include <vector>

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

// One group's decoded rows: an integer a weight and the file's factors, row by row.
struct Group {
  int64_t cols, subs, supers, blocks;
  std::vector<uint8_t> u;        // [16][cols]
  std::vector<uint8_t> sc, mn;   // K-quants: [16][subs] (Q6_K: i8 sc per 16, subs = cols / 16)
  std::vector<uint16_t> d, dm;   // K-quants: fp16 bits [16][supers] (dm = -dmin); else [16][blocks] scale, min
  Group(int64_t c, GgufType t)
      : cols(c), subs(t == GgufType::Q6_K ? c / 16 : c / kBlock), supers(c / kSuper), blocks(c / kBlock),
        u(kRows * c), sc(kRows * subs), mn(kRows * subs), d(kRows * blocks), dm(kRows * blocks) {}
};

void k_scales(const uint8_t* s, uint8_t* sc, uint8_t* mn) {  // 12 bytes -> 8 six-bit scales and mins
  for (int i = 0; i < 4; ++i) {
    sc[i] = s[i] & 63;
    mn[i] = s[4 + i] & 63;
    sc[4 + i] = (s[8 + i] & 15) | ((s[i] >> 2) & 0x30);
    mn[4 + i] = (s[8 + i] >> 4) | ((s[4 + i] >> 2) & 0x30);
  }
}

void decode_row(GgufType t, const uint8_t* p, Group& g, int64_t n) {
  uint8_t* u = g.u.data() + n * g.cols;
  const TypeInfo ti = info(t, false);
  for (int64_t blk = 0; blk < g.cols / ti.elems; ++blk, p += ti.bytes, u += ti.elems) {
    switch (t) {
      case GgufType::Q8_0:
        std::memcpy(u, p + 2, 32);
        break;
      case GgufType::Q4_0: case GgufType::Q4_1: case GgufType::Q5_0: case GgufType::Q5_1: {
        const int qs_at = t == GgufType::Q4_0 ? 2 : t == GgufType::Q4_1 ? 4 : t == GgufType::Q5_0 ? 6 : 8;
        uint32_t qh = 0;
        if (t == GgufType::Q5_0 || t == GgufType::Q5_1) std::memcpy(&qh, p + qs_at - 4, 4);
        for (int j = 0; j < 16; ++j) {
          u[j] = (p[qs_at + j] & 15) | ((qh >> j & 1) << 4);
          u[j + 16] = (p[qs_at + j] >> 4) | ((qh >> (j + 16) & 1) << 4);
        }
        break;
      }
      case GgufType::Q4_K: case GgufType::Q5_K: {
        const bool five = t == GgufType::Q5_K;
        const uint8_t* qs = p + (five ? 48 : 16);
        for (int s = 0; s < 8; ++s)
          for (int j = 0; j < 32; ++j) {
            const uint8_t q = (qs[32 * (s / 2) + j] >> (4 * (s % 2))) & 15;
            u[32 * s + j] = five ? q | ((p[16 + j] >> s & 1) << 4) : q;
          }
        break;
      }
      case GgufType::Q6_K:
        for (int s = 0; s < 8; ++s) {
          const int half = s / 4, part = s % 4;
          for (int j = 0; j < 32; ++j) {
            const uint8_t low = (p[64 * half + 32 * (part % 2) + j] >> (4 * (part / 2))) & 15;
            const uint8_t high = (p[128 + 32 * half + j] >> (2 * part)) & 3;
            u[32 * s + j] = low | high << 4;
          }
        }
        break;
    }
    // the factors
    const int64_t row_blocks = g.cols / ti.elems;
    if (!ti.k_quant) {
      g.d[n * g.blocks + blk] = half_bits(p);
      if (ti.mins) g.dm[n * g.blocks + blk] = half_bits(p + 2);
    } else if (t == GgufType::Q6_K) {
      std::memcpy(g.sc.data() + n * g.subs + 16 * blk, p + 192, 16);
      g.d[n * row_blocks + blk] = half_bits(p + 208);
    } else {
      k_scales(p + 4, g.sc.data() + n * g.subs + 8 * blk, g.mn.data() + n * g.subs + 8 * blk);
      g.d[n * row_blocks + blk] = half_bits(p);
      g.dm[n * row_blocks + blk] = half_bits(p + 2) ^ 0x8000;   // -(dmin m) = m (-dmin)
    }
  }
}

inline uint8_t nibble_byte(const uint8_t* block, int m) {  // the row layout's byte m of a block of 32
  return (block[m] & 15) | (block[m + 16] & 15) << 4;
}

void values_x86(const Group& g, bool nibbles, uint8_t* out) {
  for (int64_t b = 0; b < g.blocks; ++b)
    if (nibbles) {
      for (int r = 0; r < 4; ++r)
        for (int n = 0; n < kRows; ++n)
          for (int j = 0; j < 4; ++j) *out++ = nibble_byte(&g.u[n * g.cols + kBlock * b], 4 * r + j);
    } else {
      for (int r = 0; r < 8; ++r)
        for (int n = 0; n < kRows; ++n)
          for (int j = 0; j < 4; ++j) *out++ = g.u[n * g.cols + kBlock * b + 4 * r + j] ^ 0x80;
    }
}

void values_arm(const Group& g, bool nibbles, uint8_t* out) {
  const int chunks = nibbles ? 2 : 4;
  for (int64_t b = 0; b < g.blocks; ++b)
    for (int p = 0; p < 8; ++p)
      for (int c = 0; c < chunks; ++c)
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 8; ++j) {
            const uint8_t* block = &g.u[(2 * p + h) * g.cols + kBlock * b];
            *out++ = nibbles ? nibble_byte(block, 8 * c + j) : block[8 * c + j];
          }
}

void high_x86(const Group& g, int planes, uint8_t* out) {
  for (int64_t b = 0; b < g.blocks; ++b)
    for (int plane = 0; plane < planes; ++plane)
      for (int r = 0; r < 8; ++r) {
        uint64_t word = 0;
        for (int n = 0; n < kRows; ++n)
          for (int j = 0; j < 4; ++j)
            word |= uint64_t(g.u[n * g.cols + kBlock * b + 4 * r + j] >> (4 + plane) & 1) << (4 * n + j);
        std::memcpy(out, &word, 8);
        out += 8;
      }
}

void high_arm(const Group& g, int planes, uint8_t* out) {
  auto bit = [&](int row, int64_t b, int e, int plane) { return g.u[row * g.cols + kBlock * b + e] >> (4 + plane) & 1; };
  for (int64_t b = 0; b < g.blocks; ++b) {
    if (planes == 2) {
      for (int p = 0; p < 8; ++p)
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 8; ++j) {
            uint8_t byte = 0;
            for (int c = 0; c < 4; ++c)
              for (int plane = 0; plane < 2; ++plane) byte |= bit(2 * p + h, b, 8 * c + j, plane) << (2 * c + plane);
            *out++ = byte;
          }
    } else {
      for (int q = 0; q < 4; ++q)
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 8; ++j) {
            uint8_t byte = 0;
            for (int odd = 0; odd < 2; ++odd)
              for (int c = 0; c < 4; ++c) byte |= bit(2 * (2 * q + odd) + h, b, 8 * c + j, 0) << (4 * odd + c);
            *out++ = byte;
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
    std::vector<uint16_t> d(g.d.begin(), g.d.begin() + kRows * g.supers);
    halves_group_major(d, g.supers, scales);
  } else if (t == GgufType::Q4_K || t == GgufType::Q5_K) {
    std::vector<uint16_t> d(g.d.begin(), g.d.begin() + kRows * g.supers);
    std::vector<uint16_t> dm(g.dm.begin(), g.dm.begin() + kRows * g.supers);
    halves_group_major(d, g.supers, pack_six_bits(g.sc, g.supers, scales));
    halves_group_major(dm, g.supers, pack_six_bits(g.mn, g.supers, mins));
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

void gguf_to_tiles(const GgufTileArgs& a, const Runtime& rt) {
  const TypeInfo ti = info(a.type, a.q6_wide);
  const int64_t row_bytes = gguf_row_bytes(a.type, a.cols);
  const int64_t groups = a.rows / kRows;
  // bytes one group takes in each output
  const int64_t blocks = a.cols / kBlock, supers = a.cols / kSuper;
  const int64_t value_bytes = kRows * (ti.nibbles ? a.cols / 2 : a.cols);
  const int64_t planes = a.type == GgufType::Q6_K ? 2 : 1;
  const int64_t high_bytes = ti.high ? kRows * planes * blocks * 4 : 0;
  const int64_t factor_bytes = a.type == GgufType::Q6_K ? kRows * 18 * supers
                               : ti.k_quant ? kRows * 8 * supers : kRows * blocks * 2;
  rt.parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
    Group g(a.cols, a.type);
    for (int64_t gi = g0; gi < g1; ++gi) {
      for (int64_t n = 0; n < kRows; ++n) {
        const int64_t row = a.order ? a.order[gi * kRows + n] : gi * kRows + n;
        decode_row(a.type, a.raw + row * row_bytes, g, n);
      }
      if (a.type == GgufType::Q6_K && a.q6_wide)
        for (auto& x : g.u) x = uint8_t(int(x) - 32);   // the int8 values of Q8Halves
      uint8_t* values = a.values + gi * value_bytes;
      if (a.arm) values_arm(g, ti.nibbles, values); else values_x86(g, ti.nibbles, values);
      if (ti.high) {
        uint8_t* high = a.high + gi * high_bytes;
        if (a.arm) high_arm(g, int(planes), high); else high_x86(g, int(planes), high);
      }
      factors(a.type, g, a.scales + gi * factor_bytes, ti.mins ? a.mins + gi * factor_bytes : nullptr);
    }
  });
}

}  // namespace llmchat
