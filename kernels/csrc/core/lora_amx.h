// LoRA's shrink and expand on AMX tiles (TDPBF16PS), for bf16 where the build has AMX-BF16 and this CPU and OS
// grant the tiles (amx_ready()); the contract is lora_tiles.h's.
//   shrink: C[rank row][token] = A rows . x, so the adapter's A rows are A tiles as they lie in the stack (16 rank
//           rows x 32 k, or a zero-padded copy for a short rank block, a ragged k or the stack's last rows) and x
//           is the B tile: Tokens lays each segment's tokens out once per call in groups of 16, k-pairs
//           interleaved per token (TDPBF16PS's B layout). Blocks of 16 rank rows x 2 token groups.
//   expand: C[token][column] += bf16(h) rows . B panel: h rows rounded to bf16 are the A tiles (16 tokens x 32
//           ranks), the panel's rank pairs interleaved per column (copied once per call) the B tiles. Blocks of 2
//           token groups x 2 column quarters of the 64-column panel.
// Every tile is 16 rows x 64 bytes (one configuration); padding rows, tokens and k are zero. A C element is its
// own chain of TDPBF16PS over k (or rank) chunks in order, from +0: it depends on its own two operand rows only.
#pragma once

#include "../vec/amx_tiles.h"
#include "amx_linear.h"
#include "lora.h"

#if defined(LLMCHAT_HAS_AMX) && !defined(LLMCHAT_LORA_TILES)
#define LLMCHAT_LORA_TILES 1
#include <algorithm>
#include <cstring>
#include <vector>

namespace llmchat::lora_tiles {

inline constexpr int kRows = 16;
inline constexpr int64_t kTok = 16, kPairs = 16, kChunk = 2 * kPairs;  // tokens per group, k-pairs per chunk
inline constexpr int64_t kBlockElems = kPairs * kTok * 2;               // one B tile of x: 16 pairs x 16 tokens

inline bool ready() { return amx_ready(); }
inline const char* name() {
#if defined(LLMCHAT_AMX_EMULATED)
  return "amx (emulated)";
#else
  return "amx";
#endif
}

// x of every segment as B tiles: segment s's token group g, k chunk c at block (first_[s] + g) * chunks + c,
// 16 rows (k-pairs) x 16 tokens x 2; tokens past the segment's end and k past in are zero.
class Tokens {
 public:
  explicit Tokens(const LoraArgs& a) : chunks_((a.in + kChunk - 1) / kChunk), first_(size_t(a.num_segments) + 1, 0) {
    for (int64_t s = 0; s < a.num_segments; ++s) {
      const int32_t* sg = a.segments + 3 * s;
      first_[size_t(s) + 1] = first_[size_t(s)] + (std::max(0, sg[2] - sg[1]) + kTok - 1) / kTok;
    }
    data_.assign(size_t(first_.back() * chunks_ * kBlockElems), bf16_t{});
    const bf16_t* x = static_cast<const bf16_t*>(a.x);
    for (int64_t s = 0; s < a.num_segments; ++s) {
      const int32_t* sg = a.segments + 3 * s;
      for (int64_t t = sg[1]; t < sg[2]; ++t) {
        const int64_t g = first_[size_t(s)] + (t - sg[1]) / kTok, j = (t - sg[1]) % kTok;
        const bf16_t* row = x + t * a.x_stride;
        bf16_t* dst = data_.data() + g * chunks_ * kBlockElems + 2 * j;
        for (int64_t k = 0; k < a.in; ++k) dst[(k / 2) * kTok * 2 + k % 2] = row[k];  // pair k/2 of chunk k/32
      }
    }
  }
  int64_t chunks() const { return chunks_; }
  int64_t groups(int64_t s) const { return first_[size_t(s) + 1] - first_[size_t(s)]; }
  const bf16_t* block(int64_t s, int64_t g, int64_t c) const {
    return data_.data() + ((first_[size_t(s)] + g) * chunks_ + c) * kBlockElems;
  }

 private:
  int64_t chunks_;
  std::vector<int64_t> first_;
  std::vector<bf16_t> data_;
};

namespace detail {

inline constexpr int64_t kRowBytes = 64;

// C tile T (16 x 16 fp32) into c.
template <int T> inline void store_c(float* c) { amx::store<T>(c, 16 * int64_t(sizeof(float))); }

// Shrink of token groups g, g + 1 (two = false: g only) against the A rows at `rows` (chunk c at rows + c * step
// elements, row stride `stride` bytes); h rows of the tokens, rank rows [r0, r0 + n).
template <bool Two>
void shrink_groups(const LoraArgs& a, const Tokens& x, int64_t s, int64_t g, const bf16_t* rows, int64_t step,
                   int64_t stride, int64_t r0, int64_t n, float* h) {
  amx::zero<0>();
  if constexpr (Two) amx::zero<1>();
  for (int64_t c = 0; c < x.chunks(); ++c) {
    amx::load<4>(rows + c * step, stride);
    amx::load<6>(x.block(s, g, c), kRowBytes);
    amx::dp_bf16<0, 4, 6>();
    if constexpr (Two) {
      amx::load<7>(x.block(s, g + 1, c), kRowBytes);
      amx::dp_bf16<1, 4, 7>();
    }
  }
  const int32_t* sg = a.segments + 3 * s;
  alignas(64) float cbuf[kTok * kTok];
  auto emit = [&](int64_t group) {
    const int64_t t0 = sg[1] + group * kTok, tokens = std::min<int64_t>(kTok, sg[2] - t0);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < n; ++r) h[(t0 + t) * a.rank + r0 + r] = cbuf[r * kTok + t];
  };
  store_c<0>(cbuf);
  emit(g);
  if constexpr (Two) {
    store_c<1>(cbuf);
    emit(g + 1);
  }
}

}  // namespace detail

inline void shrink(const LoraArgs& a, const Tokens& x, int64_t s, int64_t r0, int64_t r1, float* h) {
  const int64_t slot = a.segments[3 * s], n = r1 - r0, groups = x.groups(s);
  if (n <= 0 || groups == 0) return;
  const bf16_t* A = static_cast<const bf16_t*>(a.a) + (slot * a.rank + r0) * a.in;
  // A tiles straight from the stack when 16 whole rows of whole chunks lie there (rows past r1 give C rows that
  // are never stored); else the block's rows once into zero-padded tiles, [chunk][16 rows][32 k].
  const bool direct = a.in % kChunk == 0 && slot * a.rank + r0 + kRows <= a.slots * a.rank;
  thread_local std::vector<bf16_t> padded;
  const bf16_t* rows = A;
  int64_t step = kChunk, stride = a.in * int64_t(sizeof(bf16_t));
  if (!direct) {
    padded.assign(size_t(x.chunks() * kRows * kChunk), bf16_t{});
    for (int64_t r = 0; r < n; ++r)
      for (int64_t k = 0; k < a.in; ++k) padded[size_t(((k / kChunk) * kRows + r) * kChunk + k % kChunk)] = A[r * a.in + k];
    rows = padded.data(), step = kRows * kChunk, stride = detail::kRowBytes;
  }
  amx::configure(amx::full_tiles());
  int64_t g = 0;
  for (; g + 1 < groups; g += 2) detail::shrink_groups<true>(a, x, s, g, rows, step, stride, r0, n, h);
  if (g < groups) detail::shrink_groups<false>(a, x, s, g, rows, step, stride, r0, n, h);
  amx::release();
}

inline void expand(const LoraArgs& a, int64_t start, int64_t end, const bf16_t* B, int64_t r0, int64_t r1, int64_t c0,
                   int64_t c1, const float* h) {
  const int64_t n = r1 - r0, cols = c1 - c0, chunks = (n + kChunk - 1) / kChunk, quarters = (cols + 15) / 16;
  if (n <= 0 || cols <= 0 || end <= start) return;
  // The panel's rank pairs interleaved per column: chunk c, pair p, column j at ((c * 16 + p) * 64 + j) * 2.
  thread_local std::vector<bf16_t> panel, hrows;
  panel.assign(size_t(chunks * kPairs * kLoraPanel * 2), bf16_t{});
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < cols; ++j) panel[size_t(((r / 2) * kLoraPanel + j) * 2 + r % 2)] = B[r * kLoraPanel + j];
  // h rows of two token groups, rounded to bf16: group q, chunk c at ((q * chunks + c) * 16 + t) * 32.
  hrows.resize(size_t(2 * chunks * kTok * kChunk));
  alignas(64) float cbuf[kTok * 16];
  bf16_t* out = static_cast<bf16_t*>(a.out);
  amx::configure(amx::full_tiles());
  for (int64_t t0 = start; t0 < end; t0 += 2 * kTok) {
    std::fill(hrows.begin(), hrows.end(), bf16_t{});
    const int64_t tokens = std::min<int64_t>(2 * kTok, end - t0);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < n; ++r)
        hrows[size_t((((t / kTok) * chunks + r / kChunk) * kTok + t % kTok) * kChunk + r % kChunk)] =
            to_bf16(h[(t0 + t) * a.rank + r0 + r]);
    const bool two = tokens > kTok;
    for (int64_t q = 0; q < quarters; q += 2) {
      const bool pair = q + 1 < quarters;
      amx::zero<0>(), amx::zero<1>(), amx::zero<2>(), amx::zero<3>();
      for (int64_t c = 0; c < chunks; ++c) {
        amx::load<4>(hrows.data() + c * kTok * kChunk, detail::kRowBytes);
        amx::load<6>(panel.data() + (c * kPairs * kLoraPanel + 16 * q) * 2, kLoraPanel * 2 * int64_t(sizeof(bf16_t)));
        amx::dp_bf16<0, 4, 6>();
        if (pair) {
          amx::load<7>(panel.data() + (c * kPairs * kLoraPanel + 16 * (q + 1)) * 2, kLoraPanel * 2 * int64_t(sizeof(bf16_t)));
          amx::dp_bf16<1, 4, 7>();
        }
        if (two) {
          amx::load<5>(hrows.data() + (chunks + c) * kTok * kChunk, detail::kRowBytes);
          amx::dp_bf16<2, 5, 6>();
          if (pair) amx::dp_bf16<3, 5, 7>();
        }
      }
      // C tile (token group i, quarter q + j) = tile 2 i + j: out + delta in fp32, rounded once
      auto emit = [&](float* c, int64_t group, int64_t quarter) {
        const int64_t tg = t0 + group * kTok, rows = std::min<int64_t>(kTok, end - tg);
        const int64_t cq = c0 + 16 * quarter, valid = std::min<int64_t>(16, c1 - cq);
        for (int64_t t = 0; t < rows; ++t)
          for (int64_t j = 0; j < valid; ++j) {
            bf16_t& o = out[(tg + t) * a.out_stride + cq + j];
            o = to_bf16(to_float(o) + c[t * 16 + j]);
          }
      };
      detail::store_c<0>(cbuf), emit(cbuf, 0, q);
      if (pair) detail::store_c<1>(cbuf), emit(cbuf, 0, q + 1);
      if (two) {
        detail::store_c<2>(cbuf), emit(cbuf, 1, q);
        if (pair) detail::store_c<3>(cbuf), emit(cbuf, 1, q + 1);
      }
    }
  }
  amx::release();
}

}  // namespace llmchat::lora_tiles
#endif
