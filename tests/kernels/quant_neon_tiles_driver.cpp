// Standalone test of the ARM tile layout (core/quant_tiles_neon.h), built natively (its scalar loop) and
// cross-compiled for aarch64 plain NEON, dotprod and i8mm by test_quant_neon_tiles_builds.py.
// For every kind (Q8, Q8Halves, Q4 / Q5 with stored mins, Q4_0 / Q5_0's implied min, none; Q6), fp32, fp16 and compact factors
// (K-quants: the file's integers and fp16 super-factors, in quant_tiles.h's order), dtypes f32 / bf16 / f16, it
//   - tiles a random row-layout weight with neon_tile_values / neon_tile_factors and checks the bytes against
//     the header's formula;
//   - checks quant_tiles_neon_linear bit for bit against the header's float steps written out here on the row
//     layout (exact int32 block sums, fma(float(isum), scale * d, acc), fma(min, dsum, acc), + bias), and
//     within 1e-5 / 1e-2 / 2e-3 of the same math in double;
//   - checks that each row of an M-row call is bit-identical to M = 1 calls (the decode path), to a call on
//     the rows after the first and to another thread split; quant_tiles_neon_rows against scale * q + min.
// Prints "isa=<quant_tiles_neon_isa()>", "digest=<every output's bits>" (the same on every build) and
// "ok <n> checks, <f> failed"; exit 1 on failure.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/quant_tiles_neon.h"
#include "driver_util.h"
// last: the random inputs too are computed as written (gcc fuses `a + b * c` into an FMA at -O2 and clang at any
// level, gcc -O1 does not), so every build and level tiles the same weights and the digests can agree
#include "core/exact_float.h"

using namespace llmchat;
using namespace llmchat::test;

namespace {

uint64_t digest = 14695981039346656037ull;
template <typename T> uint32_t bits_of(T v) {
  uint32_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
void fail(const char* what, const char* detail) {
  ++failures;
  std::printf("FAIL %s: %s\n", what, detail);
}

// A random row-layout weight and its tiled copy.
struct Weight {
  QuantKind kind;
  int64_t n, k, nb;
  bool half, with_mins;
  int min_offset;
  bool compact;                                    // K-quant factors: integers (u6 or i8) and fp16 per 256
  std::vector<uint8_t> values, tiled_values;
  std::vector<uint32_t> high, tiled_high;          // Q5 (one plane), Q6 (two)
  std::vector<float> scales, mins;                 // as the kernel sees them (fp16-rounded with half)
  std::vector<uint16_t> scales_h, mins_h;
  std::vector<uint8_t> tiled_scales, tiled_mins;   // bytes, fp32, fp16 or compact

  Weight(QuantKind kind_, int64_t n_, int64_t k_, bool half_, int mins_mode, bool compact_ = false)
      : kind(kind_), n(n_), k(k_), nb(k_ / 32), half(half_ && !compact_),
        with_mins(nibbles() && (mins_mode == 1 || compact_)),
        min_offset(nibbles() && mins_mode == 2 && !compact_ ? (kind_ == QuantKind::Q5 ? -16 : -8) : 0),
        compact(compact_) {
    const int64_t bytes = nibble_values() ? n * k / 2 : n * k;
    values.resize(size_t(bytes));
    for (auto& v : values) v = uint8_t(next_u64() >> 56);  // every nibble, every int8
    scales.resize(size_t(n * nb * sub()));
    for (auto& s : scales) s = 0.002f + 0.01f * std::fabs(uniform());
    if (with_mins) {
      mins.resize(size_t(n * nb));
      for (auto& m : mins) m = -0.05f * std::fabs(uniform());
    }
    if (half)
      for (auto* v : {&scales, &mins}) {
        auto& h = v == &scales ? scales_h : mins_h;
        for (auto& f : *v) h.push_back(from_float<fp16_t>(f).bits), f = to_float(fp16_t{h.back()});
      }
    if (planes()) {
      high.resize(size_t(n * nb * planes())), tiled_high.resize(high.size());
      for (auto& h : high) h = uint32_t(next_u64() >> 32);
      neon_tile_high(n, k, high.data(), tiled_high.data(), planes());
    }
    tiled_values.resize(values.size());
    neon_tile_values(kind, n, k, values.data(), tiled_values.data());
    if (compact) {
      compact_factors(scales, tiled_scales, 1.f);
      if (with_mins) compact_factors(mins, tiled_mins, -1.f);
      return;
    }
    const int eb = half ? 2 : 4;
    auto tile = [&](const void* src, size_t count, std::vector<uint8_t>& dst) {
      dst.resize(count * eb);
      if (count) neon_tile_factors(n, int64_t(count) / n, eb, src, dst.data());
    };
    tile(half ? static_cast<const void*>(scales_h.data()) : scales.data(), scales.size(), tiled_scales);
    tile(half ? static_cast<const void*>(mins_h.data()) : mins.data(), mins.size(), tiled_mins);
  }
  // Random compact factors, written in quant_tiles.h's order, and the fp32 numbers they mean into `factors`
  // (as the kernel sees them): integer * fp16, exact. sign: the super-factors' sign (-dmin for mins).
  void compact_factors(std::vector<float>& factors, std::vector<uint8_t>& tiled, float sign) {
    const int64_t per_row = int64_t(factors.size()) / n, supers = k / 256, per_super = per_row / supers;
    std::vector<int> ints(factors.size());
    std::vector<uint16_t> halves(size_t(n * supers));
    for (auto& i : ints) i = nibbles() ? int(next_u64() >> 58) : int(int8_t(next_u64() >> 56));  // u6, or i8
    for (auto& h : halves) h = from_float<fp16_t>(sign * (1e-4f + 4e-4f * std::fabs(uniform()))).bits;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s < per_row; ++s)
        factors[size_t(r * per_row + s)] = float(ints[size_t(r * per_row + s)]) * to_float(fp16_t{halves[size_t(r * supers + s / per_super)]});
    const int64_t int_bytes = nibbles() ? 6 * supers : per_row;  // a row's, per group: [.][16]
    tiled.assign(size_t(n * (int_bytes + 2 * supers)), 0);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t g = r / 16, row = r % 16;
      uint8_t* group = tiled.data() + g * 16 * (int_bytes + 2 * supers);
      for (int64_t s = 0; s < per_row; ++s) {
        const int v = ints[size_t(r * per_row + s)];
        if (!nibbles()) {
          group[s * 16 + row] = uint8_t(v);
          continue;
        }
        uint8_t* super = group + s / 8 * 96;  // nibbles of j and j + 4, then 2-bit parts of j = 4h + i
        const int64_t j = s % 8;
        super[16 * (j % 4) + row] |= uint8_t((v & 15) << (4 * (j / 4)));
        super[64 + 16 * (j / 4) + row] |= uint8_t((v >> 4 & 3) << (2 * (j % 4)));
      }
      for (int64_t sp = 0; sp < supers; ++sp)
        std::memcpy(group + 16 * int_bytes + (sp * 16 + row) * 2, &halves[size_t(r * supers + sp)], 2);
    }
  }
  bool nibbles() const { return kind == QuantKind::Q4 || kind == QuantKind::Q5; }  // mins or offsets
  bool nibble_values() const { return nibbles() || kind == QuantKind::Q6; }
  int planes() const { return kind == QuantKind::Q5 ? 1 : kind == QuantKind::Q6 ? 2 : 0; }
  int sub() const { return kind == QuantKind::Q8Halves || kind == QuantKind::Q6 ? 2 : 1; }
  int q(int64_t r, int64_t e) const {  // stored: s8, or the 4/5-bit value 0..31; Q6: the weight, u - 32
    if (!nibble_values()) return int8_t(values[size_t(r * k + e)]);
    const uint8_t byte = values[size_t((r * nb + e / 32) * 16 + e % 16)];
    int u = e % 32 < 16 ? byte & 15 : byte >> 4;
    for (int plane = 0; plane < planes(); ++plane)
      u |= int(high[size_t((r * nb + e / 32) * planes() + plane)] >> (e % 32) & 1) << (4 + plane);
    return kind == QuantKind::Q6 ? u - 32 : u;
  }
  QuantWeightView view() const {
    QuantWeightView w;
    w.kind = kind, w.n = n, w.k = k, w.tiled = true, w.half_factors = half, w.min_offset = min_offset;
    w.compact_factors = compact;
    w.values = tiled_values.data(), w.scales = tiled_scales.data();
    w.mins = with_mins ? tiled_mins.data() : nullptr;
    w.high = planes() ? tiled_high.data() : nullptr;
    return w;
  }
};

void check_bytes(const Weight& w) {
  ++checks;
  int bad = 0;
  const int64_t row_block = w.nibble_values() ? 16 : 32;
  for (int64_t r = 0; r < w.n; ++r)
    for (int64_t b = 0; b < w.nb; ++b)
      for (int64_t i = 0; i < row_block; ++i) {  // the header: [g][b][p][c][h][j], c = i / 8, j = i % 8
        const int64_t g = r / 16, p = r % 16 / 2, h = r % 2;
        const int64_t at = (g * w.nb + b) * 16 * row_block + p * 2 * row_block + (i / 8) * 16 + h * 8 + i % 8;
        if (w.tiled_values[size_t(at)] != w.values[size_t((r * w.nb + b) * row_block + i)]) ++bad;
      }
  if (bad) fail("neon_tile_values", "bytes not where the header puts them");
}

template <typename T>
void check_linear(QuantKind kind, int64_t m, int64_t n, int64_t k, bool half, int mins_mode, bool bias, int threads,
                  bool compact = false) {
  Weight w(kind, n, k, half, mins_mode, compact);
  check_bytes(w);
  const int64_t xs = k + 3, os = n + 5, nb = k / 32;
  auto x = random_vec<T>(size_t(m * xs), 2.f);
  if (m > 1)
    for (int j = 0; j < 32; ++j) x[size_t(xs + j)] = from_float<T>(0.f);  // a block with d = 0
  const auto bv = random_vec<T>(size_t(n));
  auto call = [&](int64_t rows, const T* xp, T* op, int th) {
    QuantLinearArgs a;
    a.dtype = dtype_of<T>(), a.x = xp, a.x_stride = xs, a.w = w.view();
    a.bias = bias ? bv.data() : nullptr, a.out = op, a.out_stride = os, a.m = rows;
    quant_tiles_neon_linear(a, chunked(th));
  };
  const T fill = from_float<T>(7.f);
  std::vector<T> out(size_t(m * os), fill);
  call(m, x.data(), out.data(), threads);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < n; ++r) digest = (digest ^ bits_of(out[t * os + r])) * 1099511628211ull;

  std::vector<int8_t> q(size_t(m * k));
  std::vector<float> d(size_t(m * nb)), dsum(size_t(m * nb));
  quantize_activations(dtype_of<T>(), x.data(), xs, m, k, q.data(), d.data(), dsum.data(), serial_runtime());
  char msg[160];
  int inexact = 0, outside = 0, untouched = 0;
  const float tol = sizeof(T) == 4 ? 1e-5f : (std::is_same_v<T, bf16_t> ? 1e-2f : 2e-3f);
  const int32_t offset = -w.min_offset;
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = 0; r < n; ++r) {
      float acc = 0.f;
      double s = 0.0, mag = 0.0;
      for (int64_t b = 0; b < nb; ++b) {
        for (int hf = 0; hf < w.sub(); ++hf) {  // Q8Halves: a sum and a scale per 16 elements
          const int size = 32 / w.sub();
          int32_t isum = 0, qs = 0;
          int64_t iabs = 0;
          for (int e = size * hf; e < size * (hf + 1); ++e) {
            const int32_t p = w.q(r, 32 * b + e) * q[t * k + 32 * b + e];
            isum += p, qs += q[t * k + 32 * b + e], iabs += std::abs(p);
          }
          isum -= offset * qs;
          const float sc = w.scales[size_t((r * nb + b) * w.sub() + hf)], dd = d[t * nb + b];
          acc = std::fma(float(isum), sc * dd, acc);
          s += double(isum) * sc * dd, mag += double(iabs + std::abs(offset * qs)) * std::fabs(sc * dd);  // Q6_K's sc may be < 0
        }
        if (w.with_mins) {
          acc = std::fma(w.mins[size_t(r * nb + b)], dsum[t * nb + b], acc);
          s += double(w.mins[size_t(r * nb + b)]) * dsum[t * nb + b], mag += std::fabs(double(w.mins[size_t(r * nb + b)]) * dsum[t * nb + b]);
        }
      }
      if (bias) acc = acc + to_float(bv[r]), s += to_float(bv[r]), mag += std::fabs(to_float(bv[r]));
      const T got = out[t * os + r];
      if (bits_of(got) != bits_of(from_float<T>(acc))) ++inexact;
      if (!(std::fabs(to_float(got) - s) <= tol * (mag + 1e-30) + (sizeof(T) == 4 ? 0.0 : tol * std::fabs(s)))) ++outside;
    }
    for (int64_t c = n; c < os; ++c) untouched += bits_of(out[t * os + c]) != bits_of(fill);
  }
  ++checks;
  if (inexact || outside || untouched) {
    std::snprintf(msg, sizeof msg, "kind=%d m=%lld n=%lld k=%lld half=%d mins=%d compact=%d: %d not the header's bits, %d off the math, %d written outside",
                  int(kind), (long long)m, (long long)n, (long long)k, int(half), mins_mode, int(compact), inexact, outside, untouched);
    fail("quant_tiles_neon_linear", msg);
  }
  // Determinism: M = 1 calls (decode), the rows after the first (other pairs and lanes), another split.
  ++checks;
  int differ = 0;
  std::vector<T> one(static_cast<size_t>(os));
  for (int64_t t = 0; t < m; ++t) {
    call(1, x.data() + t * xs, one.data(), 1);
    for (int64_t r = 0; r < n; ++r) differ += bits_of(one[r]) != bits_of(out[t * os + r]);
  }
  if (m > 1) {
    std::vector<T> rest(size_t((m - 1) * os));
    call(m - 1, x.data() + xs, rest.data(), threads % 3 + 1);
    for (int64_t t = 1; t < m; ++t)
      for (int64_t r = 0; r < n; ++r) differ += bits_of(rest[(t - 1) * os + r]) != bits_of(out[t * os + r]);
  }
  if (differ) {
    std::snprintf(msg, sizeof msg, "kind=%d m=%lld n=%lld k=%lld: %d outputs change with M or the split", int(kind),
                  (long long)m, (long long)n, (long long)k, differ);
    fail("determinism", msg);
  }
}

void check_rows(QuantKind kind, int64_t n, int64_t k, bool half, int mins_mode, bool compact = false) {
  Weight w(kind, n, k, half, mins_mode, compact);
  const std::vector<int64_t> ids = {0, n - 1, 17 % n, 5, 17 % n};
  std::vector<float> out(ids.size() * size_t(k));
  quant_tiles_neon_rows(w.view(), ids.data(), int64_t(ids.size()), DType::F32, out.data(), k, chunked(2));
  ++checks;
  int bad = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t e = 0; e < k; ++e) {
      const int64_t r = ids[i], b = e / 32;
      const float s = w.scales[size_t((r * w.nb + b) * w.sub() + (w.sub() == 2 ? e % 32 / 16 : 0))];
      float v = s * float(w.q(r, e));
      if (w.with_mins) v = v + w.mins[size_t(r * w.nb + b)];
      else if (w.min_offset) v = v + float(w.min_offset) * s;
      bad += bits_of(v) != bits_of(out[i * size_t(k) + e]);
    }
  if (bad) fail("quant_tiles_neon_rows", "values differ from scale * q + min");
}

}  // namespace

int main() {
  // M = 1 (decode), odd M (a lone last token in its pair), M across the 4-token tiles and the 64-token chunks
  const int64_t ms[] = {1, 2, 3, 7, 16, 17, 40, 64, 70};
  const int64_t ns[] = {16, 48, 32, 80};
  const int64_t ks[] = {32, 96, 576};
  int i = 0;
  for (QuantKind kind : {QuantKind::Q8, QuantKind::Q8Halves, QuantKind::Q4, QuantKind::Q5, QuantKind::Q6})
    for (int64_t k : ks)
      for (int64_t m : ms) {
        const int64_t n = ns[size_t(i) % 4];
        const bool half = i % 2 == 0, bias = (i / 2) % 2 == 1;
        const int mins = i % 3, threads = 1 + i % 3;
        check_linear<float>(kind, m, n, k, half, mins, bias, threads);
        check_linear<bf16_t>(kind, m, n, k, !half, (mins + 1) % 3, !bias, threads % 3 + 1);
        check_linear<fp16_t>(kind, m, n, k, half, (mins + 2) % 3, bias, (threads + 1) % 3 + 1);
        ++i;
      }
  // compact factors (K-quants: Q4_K / Q5_K's u6 sc and m, Q6_K held as Q8Halves with its i8 sc), K % 256 == 0
  for (QuantKind kind : {QuantKind::Q8Halves, QuantKind::Q4, QuantKind::Q5, QuantKind::Q6})
    for (int64_t k : {256, 768})
      for (int64_t m : {1, 3, 16, 17, 70}) {
        check_linear<float>(kind, m, ns[size_t(i) % 4], k, false, 1, i % 2 == 0, 1 + i % 3, true);
        check_linear<bf16_t>(kind, m, ns[size_t(i + 1) % 4], k, false, 1, i % 2 == 1, 1 + (i + 1) % 3, true);
        ++i;
      }
  for (QuantKind kind : {QuantKind::Q8, QuantKind::Q8Halves, QuantKind::Q4, QuantKind::Q5, QuantKind::Q6})
    for (int mins : {0, 1, 2}) check_rows(kind, 32, 96, mins == 1, mins);
  for (QuantKind kind : {QuantKind::Q8Halves, QuantKind::Q4, QuantKind::Q5, QuantKind::Q6}) check_rows(kind, 32, 512, false, 1, true);
  std::printf("digest=%016llx\n", (unsigned long long)digest);
  std::printf("isa=%s\n", quant_tiles_neon_isa());
  std::printf("ok %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
