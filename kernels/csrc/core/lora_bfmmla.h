// LoRA's shrink and expand on BFMMLA tiles (ARM with bf16): see lora_tiles.h for the contract.
//   BFMMLA d += a b^T: a, b 2x4 bf16 (2 rows x 4 k), d 2x2 fp32, d[2i + j] += a row i . b row j, each output
//   BFDotAdd(BFDotAdd(d, k0, k1), k2, k3) (Arm ARM): it depends on its own a row and b row only.
// shrink: a = a token pair, b = a pair of A's rank rows; d = [t0 r, t0 r+1, t1 r, t1 r+1], so each token's two
//   ranks leave as one 64-bit half, contiguous in h. Every h[t, r] starts from +0 and adds x[t] . A[r] one k-quad
//   at a time in k order, ceil(in / 8) * 2 quads (the missing k zero in both operands): the chain depends on `in`
//   only (a zero quad may turn an accumulated -0 into +0 or flush a denormal, the same for every token).
//   x: Tokens packs every LoRA segment's tokens into pairs once per call, [t0 k0..3, t1 k0..3] per k-quad, the
//   lone last token beside a zero row, k zero padded to a whole 8. x is read by every rank block of every
//   targeted slice (rank / kRows x slices times), so zipping it once takes the token zips off the hot loop and
//   handles the lone token and the k tail in one place; A's rows are zipped as they lie (two rows, 8 k, zip by 64
//   bits: the two k-quads), the last partial 8 k from a zero-padded copy, never read past the row.
//   Blocking: 4 token pairs x 4 rank pairs (kRows = 8), 16 accumulators + 8 A operands + 2 token operands.
//   llvm-mca -mcpu=neoverse-v1 (clang / gcc, cycles per MAC): 0.020 / 0.027 (N2 0.039 / 0.049). A lone token pair
//   (decode) is latency-bound: 4 chains of two BFMMLAs per 8 k, 10 / 14 cycles per 8 k for 8 rank rows; more
//   chains would need more rank rows per call (kRows 16: half the fine plan's shrink tasks) or a k split
//   (2 chains per output in every block, 32 accumulators at 4 x 4).
// expand: a = a token pair x 4 ranks of bf16(h) (BFCVTN: round to nearest even), b = a column pair x 4 ranks of
//   B, packed per call (4x8 transposes: bfmmla::store_column_pairs, vec/bfmmla_zip.h): quad g, column pair e =
//   [B(4g..4g+3)[2e], B(4g..4g+3)[2e + 1]], ranks past r1 - r0 zero (so are their h: the scratch past r1 may hold
//   anything, it is never read). Each delta starts from +0, adds its rank quads in order, then out + delta in
//   fp32, rounded once. Blocking: 2 token pairs x 8 column pairs, a lone pair 1 x 16; only columns < c1 stored.
//   llvm-mca -mcpu=neoverse-v1: 0.020 (2 x 8) and 0.022 (1 x 16) cycles per MAC with either compiler (N2 0.031).
// A lone token's partner (zero in x, zero in h) or a lone rank row's partner (the row itself again, in bounds)
// only reaches outputs that are never stored.
#pragma once
#include "../vec/vec.h"

#if defined(LLMCHAT_NEON_BF16) && !defined(LLMCHAT_LORA_TILES)
#define LLMCHAT_LORA_TILES 1
#include <arm_neon.h>

#include "../vec/bfmmla_zip.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lora.h"

namespace llmchat::lora_tiles {

inline constexpr int64_t kRows = 8;                 // rank rows per shrink call: 4 rank pairs
inline constexpr int kShrinkPairs = 4;              // token pairs per shrink block
inline constexpr int kExpandPairs = 2, kExpandCols = 8, kExpandLoneCols = 16;  // token pairs x column pairs

inline bool ready() { return true; }  // FEAT_BF16 is a property of the build on ARM
inline const char* name() { return "bfmmla"; }

namespace detail {
inline uint16x8_t load8(const void* p) { return vld1q_u16(static_cast<const uint16_t*>(p)); }
inline bfloat16x8_t bf(uint16x8_t v) { return vreinterpretq_bf16_u16(v); }
using bfmmla::first_rows, bfmmla::high_halves, bfmmla::low_halves, bfmmla::second_rows;
// The first n (0..4) floats of v to p.
inline void store_floats(float* p, float32x4_t v, int n) {
  if (n >= 4) return vst1q_f32(p, v);
  float u[4];
  vst1q_f32(u, v);
  std::memcpy(p, u, size_t(n > 0 ? n : 0) * sizeof(float));
}
// out[0, n) (n <= 4 bf16) += v in fp32, rounded to bf16 once.
inline void add_out(bf16_t* out, float32x4_t v, int n) {
  uint16_t* o = reinterpret_cast<uint16_t*>(out);
  if (n >= 4) {
    const float32x4_t cur = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(o), 16));
    return vst1_u16(o, vreinterpret_u16_bf16(vcvt_bf16_f32(vaddq_f32(cur, v))));
  }
  if (n <= 0) return;
  uint16_t u[4] = {0, 0, 0, 0};
  std::memcpy(u, o, size_t(n) * 2);
  const float32x4_t cur = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(u), 16));
  vst1_u16(u, vreinterpret_u16_bf16(vcvt_bf16_f32(vaddq_f32(cur, v))));
  std::memcpy(o, u, size_t(n) * 2);
}
inline bool has_lora(const LoraArgs& a, int64_t slot) {
  const int32_t* ro = a.rank_offsets + slot * (a.num_slices + 1);
  return ro[a.num_slices] > ro[0];
}
// Reused per thread, so a call allocates nothing once warm.
struct ExpandScratch {
  std::vector<uint16_t> b;  // [quad][32 column pairs][8]
  std::vector<uint16_t> h;  // [token pair][quad][8]
};
inline ExpandScratch& expand_scratch() {
  thread_local ExpandScratch s;
  return s;
}
}  // namespace detail

// x of every LoRA segment as token pairs: pair p of segment s at data + base[s] + p * stride, stride = 16 per
// 8 k (two k-quads, each [t0 k0..3, t1 k0..3]), the lone last token's partner and k past `in` zero. The buffer
// is the calling thread's, reused across calls (workers only read it while the call runs).
struct Tokens {
  const uint16_t* data = nullptr;
  std::vector<int64_t> base;
  int64_t octets = 0, stride = 0;

  explicit Tokens(const LoraArgs& a) {
    thread_local std::vector<uint16_t> buffer;
    octets = (a.in + 7) / 8, stride = 16 * octets;
    base.assign(size_t(std::max<int64_t>(a.num_segments, 0)), 0);
    int64_t total = 0;
    for (int64_t s = 0; s < a.num_segments; ++s) {
      const int32_t* sg = a.segments + 3 * s;
      base[size_t(s)] = total;
      if (sg[2] > sg[1] && detail::has_lora(a, sg[0])) total += (sg[2] - sg[1] + 1) / 2 * stride;
    }
    if (buffer.size() < size_t(total)) buffer.resize(size_t(total));
    const int64_t full = a.in / 8, rest = a.in % 8;
    const uint16_t* x = static_cast<const uint16_t*>(a.x);
    for (int64_t s = 0; s < a.num_segments; ++s) {
      const int32_t* sg = a.segments + 3 * s;
      if (!(sg[2] > sg[1] && detail::has_lora(a, sg[0]))) continue;
      uint16_t* seg = buffer.data() + base[size_t(s)];
      const int64_t n = sg[2] - sg[1];
      for (int64_t t = 0; t < n; ++t) {
        const uint16_t* row = x + (sg[1] + t) * a.x_stride;
        uint16_t* dst = seg + (t / 2) * stride + 4 * (t % 2);
        for (int64_t o = 0; o < full; ++o) {
          const uint16x8_t v = vld1q_u16(row + 8 * o);
          vst1_u16(dst + 16 * o, vget_low_u16(v));
          vst1_u16(dst + 16 * o + 8, vget_high_u16(v));
        }
        if (rest) {
          uint16_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          std::memcpy(tail, row + 8 * full, size_t(rest) * 2);
          std::memcpy(dst + 16 * full, tail, 8);
          std::memcpy(dst + 16 * full + 8, tail + 4, 8);
        }
      }
      if (n % 2) {  // the lone last token's partner: zero
        uint16_t* dst = seg + (n / 2) * stride + 4;
        for (int64_t o = 0; o < 2 * octets; ++o) std::memset(dst + 8 * o, 0, 8);
      }
    }
    data = buffer.data();
  }
};

namespace detail {

// h rows of RP token pairs (xp: their packed pairs, stride apart) x NP rank pairs (rows[2q], rows[2q + 1]: A's
// rows, as they lie; tail[q]: the last partial 8 k of pair q, zero padded), written to h (token 2p's row at
// h + 2p * ld) for rank rows [0, nr) and tokens < valid.
template <int RP, int NP>
inline void shrink_block(const uint16_t* xp, int64_t stride, const uint16_t* const* rows, const bfloat16x8_t (*tail)[2],
                         int64_t full, bool has_tail, float* h, int64_t ld, int nr, int valid) {
  float32x4_t acc[RP][NP];
  LLMCHAT_UNROLL for (int p = 0; p < RP; ++p) LLMCHAT_UNROLL for (int q = 0; q < NP; ++q) acc[p][q] = vdupq_n_f32(0.f);
  const uint16_t* row[2 * NP];
  LLMCHAT_UNROLL for (int r = 0; r < 2 * NP; ++r) row[r] = rows[r];
  LLMCHAT_NO_UNROLL for (int64_t o = 0; o < full; ++o) {
    bfloat16x8_t lo[NP], hi[NP];  // rank pair q, k [8o, 8o + 4) and [8o + 4, 8o + 8)
    LLMCHAT_UNROLL for (int q = 0; q < NP; ++q) {
      const uint16x8_t u = load8(row[2 * q] + 8 * o), v = load8(row[2 * q + 1] + 8 * o);
      lo[q] = low_halves(u, v), hi[q] = high_halves(u, v);
    }
    LLMCHAT_UNROLL for (int p = 0; p < RP; ++p) {
      const bfloat16x8_t x0 = bf(load8(xp + p * stride + 16 * o)), x1 = bf(load8(xp + p * stride + 16 * o + 8));
      LLMCHAT_UNROLL for (int q = 0; q < NP; ++q) acc[p][q] = vbfmmlaq_f32(vbfmmlaq_f32(acc[p][q], x0, lo[q]), x1, hi[q]);
    }
  }
  if (has_tail) {
    LLMCHAT_UNROLL for (int p = 0; p < RP; ++p) {
      const bfloat16x8_t x0 = bf(load8(xp + p * stride + 16 * full)), x1 = bf(load8(xp + p * stride + 16 * full + 8));
      LLMCHAT_UNROLL for (int q = 0; q < NP; ++q)
        acc[p][q] = vbfmmlaq_f32(vbfmmlaq_f32(acc[p][q], x0, tail[q][0]), x1, tail[q][1]);
    }
  }
  LLMCHAT_UNROLL for (int p = 0; p < RP; ++p) {
    float* h0 = h + 2 * p * ld;
    LLMCHAT_UNROLL for (int q = 0; q < NP; q += 2) {
      const float32x4_t b = q + 1 < NP ? acc[p][q + 1 < NP ? q + 1 : q] : vdupq_n_f32(0.f);
      store_floats(h0 + 2 * q, first_rows(acc[p][q], b), nr - 2 * q);
      if (2 * p + 1 < valid) store_floats(h0 + ld + 2 * q, second_rows(acc[p][q], b), nr - 2 * q);
    }
  }
}

template <int NP>
inline void shrink_rows(const Tokens& x, const uint16_t* xp, int64_t pairs, const uint16_t* const* rows,
                        const bfloat16x8_t (*tail)[2], int64_t full, bool has_tail, float* h, int64_t ld, int nr,
                        int64_t tokens) {
  int64_t p = 0;
  for (; p + kShrinkPairs <= pairs; p += kShrinkPairs)
    shrink_block<kShrinkPairs, NP>(xp + p * x.stride, x.stride, rows, tail, full, has_tail, h + 2 * p * ld, ld, nr,
                                   int(std::min<int64_t>(tokens - 2 * p, 2 * kShrinkPairs)));
  static_assert(kShrinkPairs == 4, "the remainders below");
  const int valid = int(tokens - 2 * p);
  const uint16_t* xr = xp + p * x.stride;
  float* hr = h + 2 * p * ld;
  switch (pairs - p) {
    case 3: return shrink_block<3, NP>(xr, x.stride, rows, tail, full, has_tail, hr, ld, nr, valid);
    case 2: return shrink_block<2, NP>(xr, x.stride, rows, tail, full, has_tail, hr, ld, nr, valid);
    case 1: return shrink_block<1, NP>(xr, x.stride, rows, tail, full, has_tail, hr, ld, nr, valid);
    default: return;
  }
}

}  // namespace detail

// h[t * a.rank + r] = x[t] . A[slot, r] in fp32 for the tokens of segment seg and rank rows [r0, r1), r1 - r0 <= kRows.
inline void shrink(const LoraArgs& a, const Tokens& x, int64_t seg, int64_t r0, int64_t r1, float* h) {
  const int32_t* sg = a.segments + 3 * seg;
  const int64_t slot = sg[0], start = sg[1], tokens = sg[2] - sg[1];
  const int nr = int(std::min<int64_t>(r1 - r0, kRows));
  if (tokens <= 0 || nr <= 0) return;
  const uint16_t* A = static_cast<const uint16_t*>(a.a) + (slot * a.rank + r0) * a.in;
  const int np = (nr + 1) / 2;
  const uint16_t* rows[kRows];
  for (int r = 0; r < 2 * np; ++r) rows[r] = A + std::min(r, nr - 1) * a.in;  // a lone row's partner: itself
  const int64_t full = a.in / 8, rest = a.in % 8;
  bfloat16x8_t tail[kRows / 2][2];
  for (int q = 0; q < np; ++q) {
    uint16_t u[8] = {0, 0, 0, 0, 0, 0, 0, 0}, v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (rest) {
      std::memcpy(u, rows[2 * q] + 8 * full, size_t(rest) * 2);
      std::memcpy(v, rows[2 * q + 1] + 8 * full, size_t(rest) * 2);
    }
    tail[q][0] = detail::low_halves(vld1q_u16(u), vld1q_u16(v));
    tail[q][1] = detail::high_halves(vld1q_u16(u), vld1q_u16(v));
  }
  const uint16_t* xp = x.data + x.base[size_t(seg)];
  const int64_t pairs = (tokens + 1) / 2;
  float* hp = h + start * a.rank + r0;
  static_assert(kRows == 8, "the rank pair counts below");
  switch (np) {
    case 4: return detail::shrink_rows<4>(x, xp, pairs, rows, tail, full, rest != 0, hp, a.rank, nr, tokens);
    case 3: return detail::shrink_rows<3>(x, xp, pairs, rows, tail, full, rest != 0, hp, a.rank, nr, tokens);
    case 2: return detail::shrink_rows<2>(x, xp, pairs, rows, tail, full, rest != 0, hp, a.rank, nr, tokens);
    default: return detail::shrink_rows<1>(x, xp, pairs, rows, tail, full, rest != 0, hp, a.rank, nr, tokens);
  }
}

namespace detail {

// B's rows [0, nr) of one panel (64 columns each) as b operands: quad g, column pair e at b + (32 g + e) * 8,
// ranks past nr zero.
inline void pack_panel(const bf16_t* B, int64_t nr, uint16_t* b) {
  static_assert(kLoraPanel == 64, "32 column pairs per quad");
  const uint16_t* src = reinterpret_cast<const uint16_t*>(B);
  const uint16x8_t z = vdupq_n_u16(0);
  for (int64_t g = 0; 4 * g < nr; ++g) {
    const uint16_t* v[4];
    for (int i = 0; i < 4; ++i) v[i] = 4 * g + i < nr ? src + (4 * g + i) * kLoraPanel : nullptr;
    uint16_t* dst = b + g * 32 * 8;
    for (int c = 0; c < kLoraPanel; c += 8) {  // 4 ranks x 8 columns: four column pairs
      const uint16x8_t x0 = v[0] ? load8(v[0] + c) : z, x1 = v[1] ? load8(v[1] + c) : z;
      const uint16x8_t x2 = v[2] ? load8(v[2] + c) : z, x3 = v[3] ? load8(v[3] + c) : z;
      bfmmla::store_column_pairs(x0, x1, x2, x3, dst + 4 * c);  // column pair c / 2 on
    }
  }
}

// bf16(h) of tokens [0, n) and rank rows [0, nr) (h rows ld apart) as a operands: pair p, quad g at
// dst + (p * quads + g) * 8; ranks past nr and a lone token's partner zero, never read from h.
inline void pack_h(const float* h, int64_t ld, int64_t n, int64_t nr, int64_t quads, uint16_t* dst) {
  const int64_t whole = nr / 4;
  for (int64_t p = 0; 2 * p < n; ++p) {
    const float* h0 = h + 2 * p * ld;
    const float* h1 = 2 * p + 1 < n ? h0 + ld : nullptr;
    uint16_t* d = dst + p * quads * 8;
    for (int64_t g = 0; g < quads; ++g) {
      float32x4_t f0, f1 = vdupq_n_f32(0.f);
      if (g < whole) {
        f0 = vld1q_f32(h0 + 4 * g);
        if (h1) f1 = vld1q_f32(h1 + 4 * g);
      } else {  // the last partial quad: only ranks < nr read
        float u[4] = {0.f, 0.f, 0.f, 0.f}, v[4] = {0.f, 0.f, 0.f, 0.f};
        std::memcpy(u, h0 + 4 * g, size_t(nr - 4 * g) * sizeof(float));
        if (h1) std::memcpy(v, h1 + 4 * g, size_t(nr - 4 * g) * sizeof(float));
        f0 = vld1q_f32(u), f1 = vld1q_f32(v);
      }
      const bfloat16x8_t r = vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(f0), f1);  // [t0 ranks, t1 ranks]
      vst1q_u16(d + 8 * g, vreinterpretq_u16_bf16(r));
    }
  }
}

// out rows of RP token pairs (hp: their packed h, quads * 8 apart) x CP column pairs from pair e0 (b: the packed
// panel), for columns < ncols (relative to the panel's c0, e0 included) and tokens < valid.
template <int RP, int CP>
inline void expand_block(const uint16_t* hp, int64_t quads, const uint16_t* b, int e0, bf16_t* out, int64_t ld,
                         int ncols, int valid) {
  static_assert(CP % 2 == 0, "outputs leave in 4-column groups");
  float32x4_t acc[RP][CP];
  LLMCHAT_UNROLL for (int p = 0; p < RP; ++p) LLMCHAT_UNROLL for (int e = 0; e < CP; ++e) acc[p][e] = vdupq_n_f32(0.f);
  LLMCHAT_NO_UNROLL for (int64_t g = 0; g < quads; ++g) {
    bfloat16x8_t x[RP];
    LLMCHAT_UNROLL for (int p = 0; p < RP; ++p) x[p] = bf(load8(hp + (p * quads + g) * 8));
    const uint16_t* bg = b + (g * 32 + e0) * 8;
    LLMCHAT_UNROLL for (int e = 0; e < CP; ++e) {
      const bfloat16x8_t be = bf(load8(bg + 8 * e));
      LLMCHAT_UNROLL for (int p = 0; p < RP; ++p) acc[p][e] = vbfmmlaq_f32(acc[p][e], x[p], be);
    }
  }
  LLMCHAT_UNROLL for (int p = 0; p < RP; ++p)
    LLMCHAT_UNROLL for (int e = 0; e < CP; e += 2) {
      const int c = 2 * (e0 + e);  // the 4 columns' first
      bf16_t* o = out + 2 * p * ld + c;
      add_out(o, first_rows(acc[p][e], acc[p][e + 1]), ncols - c);
      if (2 * p + 1 < valid) add_out(o + ld, second_rows(acc[p][e], acc[p][e + 1]), ncols - c);
    }
}

// Column blocks of CP pairs for RP token pairs, then a narrower last block for the ragged columns.
template <int RP, int CP>
inline void expand_cols(const uint16_t* hp, int64_t quads, const uint16_t* b, bf16_t* out, int64_t ld, int ncols,
                        int valid) {
  const int pairs = (ncols + 1) / 2;
  int e = 0;
  for (; e + CP <= pairs; e += CP) expand_block<RP, CP>(hp, quads, b, e, out, ld, ncols, valid);
  // 1..CP-1 pairs left: 4 at a time (the last of 3 past ncols, still inside the packed 32), then 2
  while (e < pairs) {
    if (pairs - e > 2) expand_block<RP, 4>(hp, quads, b, e, out, ld, ncols, valid), e += 4;
    else expand_block<RP, 2>(hp, quads, b, e, out, ld, ncols, valid), e += 2;
  }
}

}  // namespace detail

// out[t, c] += sum over r in [r0, r1) of bf16(h[t * a.rank + r]) * B[(r - r0) * kLoraPanel + c - c0], tokens
// [start, end), columns [c0, c1) of one panel.
inline void expand(const LoraArgs& a, int64_t start, int64_t end, const bf16_t* B, int64_t r0, int64_t r1, int64_t c0,
                   int64_t c1, const float* h) {
  const int64_t nr = r1 - r0, tokens = end - start;
  const int ncols = int(std::min<int64_t>(c1 - c0, kLoraPanel));
  if (nr <= 0 || tokens <= 0 || ncols <= 0) return;
  const int64_t quads = (nr + 3) / 4;
  detail::ExpandScratch& s = detail::expand_scratch();
  if (s.b.size() < size_t(quads * 32 * 8)) s.b.resize(size_t(quads * 32 * 8));
  if (s.h.size() < size_t(kExpandPairs * quads * 8)) s.h.resize(size_t(kExpandPairs * quads * 8));
  detail::pack_panel(B, nr, s.b.data());
  bf16_t* out = static_cast<bf16_t*>(a.out) + start * a.out_stride + c0;
  const float* hs = h + start * a.rank + r0;
  int64_t t = 0;
  for (; t + 2 * kExpandPairs <= tokens; t += 2 * kExpandPairs) {
    detail::pack_h(hs + t * a.rank, a.rank, 2 * kExpandPairs, nr, quads, s.h.data());
    detail::expand_cols<kExpandPairs, kExpandCols>(s.h.data(), quads, s.b.data(), out + t * a.out_stride,
                                                   a.out_stride, ncols, 2 * kExpandPairs);
  }
  static_assert(kExpandPairs == 2, "one remainder pair");
  for (; t < tokens; t += 2) {
    const int valid = int(std::min<int64_t>(tokens - t, 2));
    detail::pack_h(hs + t * a.rank, a.rank, valid, nr, quads, s.h.data());
    detail::expand_cols<1, kExpandLoneCols>(s.h.data(), quads, s.b.data(), out + t * a.out_stride, a.out_stride,
                                            ncols, valid);
  }
}

}  // namespace llmchat::lora_tiles
#endif
