// Standalone test of the torch-free quantized linear (core/quant_linear.cpp) on the compiled block-dot path
// (vec/qdot.h), built natively and cross-compiled for aarch64 by test_quant_isa_builds.py.
// For every kind (Q8, Q8Halves, Q4, Q5, Q6) and dtype (f32, bf16, f16), with weights drawn over each kind's full
// value range, it checks
//   - quant_linear against a plain double loop of the same math: the activations quantize_activations gives
//     (q, d, dsum), exact integer block dots, out = sum_b isum * scale * d + sum_b min * dsum (+ bias), within
//     1e-5 (f32), 1e-2 (bf16), 2e-3 (f16) of the sum of the sizes of all the products (see check_linear);
//   - determinism: each row of an M-row call is bit-identical to the same row from M = 1 calls, from a call on
//     the rows after the first (every row in another tile position and lane) and from another thread split;
//   - the factors stored as fp32 or fp16 (half_factors), mins stored or implied (min_offset * scale);
//   - that nothing outside the [M, N] slice of a wider, strided output is written;
//   - quant_rows against scale * q + min rounded twice in float, exactly;
//   - the same for the tile layout (core/quant_tiles.h, built here from the row layout as that header
//     documents it) where the build has it: AMX tiles for whole 16-token tiles where granted, VNNI otherwise;
//     Q8 there also with 16-bit activations (quantize_activations_wide, q = 256 hi + lo).
// Prints "isa=<quant_isa_name()>", "tiles=<quant_tiles_isa()>", a digest of the tiled outputs (every build that
// has the layout must print the same: the AMX and VNNI paths give the same bits) and "ok <n> checks, <f> failed";
// exit 1 on failure.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/quant_linear.h"
#include "core/quant_tiles.h"
#include "driver_util.h"

using namespace llmchat;
using namespace llmchat::test;

namespace {

const char* kind_name(QuantKind k) {
  switch (k) {
    case QuantKind::Q8: return "q8";
    case QuantKind::Q8Halves: return "q8halves";
    case QuantKind::Q4: return "q4";
    case QuantKind::Q5: return "q5";
    case QuantKind::Q6: return "q6";
  }
  return "?";
}
template <typename T> const char* dtype_name() {
  return sizeof(T) == 4 ? "f32" : (std::is_same_v<T, bf16_t> ? "bf16" : "f16");
}
bool paired(QuantKind k) { return k == QuantKind::Q4 || k == QuantKind::Q5; }  // mins or an offset
bool nibble_values(QuantKind k) { return paired(k) || k == QuantKind::Q6; }
bool halves(QuantKind k) { return k == QuantKind::Q8Halves || k == QuantKind::Q6; }
template <typename T> uint32_t bits_of(T v) {
  uint32_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}

// A random weight in the kernel's layout, over the kind's whole value range.
struct Weight {
  QuantKind kind;
  int64_t n, k, nb;
  std::vector<uint8_t> values;  // stored one byte in: the kernel must not assume aligned weight bytes
  std::vector<uint32_t> high;
  std::vector<float> scales, mins;           // the values the kernel sees (fp16-rounded with half)
  std::vector<uint16_t> scales_h, mins_h;    // fp16 bits, as the file's Q8_0, Q4_0/1 and Q5_0/1 keep them
  bool with_mins, half;
  int min_offset;                            // without mins: min = min_offset * scale (Q4_0: -8, Q5_0: -16)
  // compact (K-quants, K % 256 == 0; the tile layout only): per row the file's integer factors of each sub-block
  // (u6 sc and m for Q4/Q5, i8 sc for the halves kinds) and fp16 super-factors per 256 (d; -dmin for mins)
  bool compact = false;
  std::vector<int> sc_ints, m_ints;
  std::vector<uint16_t> sc_supers, m_supers;

  Weight(QuantKind kind_, int64_t n_, int64_t k_, bool with_mins_, bool half_ = false, bool offset = false)
      : kind(kind_), n(n_), k(k_), nb(k_ / 32), with_mins(with_mins_ && paired(kind_)), half(half_),
        min_offset(offset && paired(kind_) && !with_mins ? (kind_ == QuantKind::Q5 ? -16 : -8) : 0) {
    const int64_t bytes = nibble_values(kind) ? n * k / 2 : n * k;
    values.resize(size_t(bytes + 1));
    for (auto& v : values) v = uint8_t(next_u64() >> 56);  // any byte: every nibble, every int8 -128..127
    if (kind == QuantKind::Q5 || kind == QuantKind::Q6) {
      high.resize(size_t(kind == QuantKind::Q6 ? 2 * n * nb : n * nb));
      for (auto& h : high) h = uint32_t(next_u64() >> 32);  // any high bits
    }
    scales.resize(size_t(halves(kind) ? 2 * n * nb : n * nb));
    for (auto& s : scales) s = 0.002f + 0.01f * std::fabs(uniform());  // positive, small
    if (with_mins) {
      mins.resize(size_t(n * nb));
      for (auto& m : mins) m = -0.05f * std::fabs(uniform());  // negative, small (zero allowed)
    }
    if (half) {
      for (auto* v : {&scales, &mins}) {
        auto& bits = v == &scales ? scales_h : mins_h;
        for (auto& f : *v) bits.push_back(from_float<fp16_t>(f).bits), f = to_float(fp16_t{bits.back()});
      }
    }
  }
  // Random compact factors (every integer of their range), and the fp32 factors they mean (integer * fp16).
  void make_compact() {
    compact = true, half = false, min_offset = 0, with_mins = paired(kind);
    auto draw = [&](std::vector<float>& factors, std::vector<int>& ints, std::vector<uint16_t>& supers, float sign) {
      const int64_t per_row = int64_t(factors.size()) / n, per_super = per_row / (k / 256);
      ints.resize(factors.size()), supers.resize(size_t(n * (k / 256)));
      for (auto& i : ints) i = paired(kind) ? int(next_u64() >> 58) : int(int8_t(next_u64() >> 56));
      for (auto& h : supers) h = from_float<fp16_t>(sign * (1e-4f + 4e-4f * std::fabs(uniform()))).bits;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < per_row; ++j)
          factors[size_t(r * per_row + j)] = float(ints[size_t(r * per_row + j)]) *
                                             to_float(fp16_t{supers[size_t(r * (k / 256) + j / per_super)]});
    };
    draw(scales, sc_ints, sc_supers, 1.f);
    if (with_mins) mins.resize(size_t(n * nb)), draw(mins, m_ints, m_supers, -1.f);
  }
  // The same weight in the tile layout (n % 16 == 0), made from q() and the factors by quant_tiles.h's rules.
  struct Tiles {
    std::vector<uint8_t> values;
    std::vector<uint64_t> high;
    std::vector<float> scales, mins;
    std::vector<uint16_t> scales_h, mins_h;
    std::vector<uint8_t> compact_scales, compact_mins;  // quant_tiles.h's compact order
  } tiles;
  void compact_tiles(const std::vector<int>& ints, const std::vector<uint16_t>& supers, std::vector<uint8_t>& out) const {
    const int64_t S = k / 256, per_row = int64_t(ints.size()) / n, int_bytes = paired(kind) ? 6 * S : per_row;
    out.assign(size_t(n * (int_bytes + 2 * S)), 0);
    for (int64_t r = 0; r < n; ++r) {
      uint8_t* group = out.data() + r / kTileRows * kTileRows * (int_bytes + 2 * S);
      const int64_t row = r % kTileRows;
      for (int64_t j = 0; j < per_row; ++j) {
        const int v = ints[size_t(r * per_row + j)];
        if (!paired(kind)) {
          group[j * kTileRows + row] = uint8_t(v);
          continue;
        }
        uint8_t* super = group + j / 8 * kCompact6Bytes;  // nibbles of i and i + 4, then 2-bit parts of i = 4h + l
        const int64_t i = j % 8;
        super[kTileRows * (i % 4) + row] |= uint8_t((v & 15) << (4 * (i / 4)));
        super[4 * kTileRows + kTileRows * (i / 4) + row] |= uint8_t((v >> 4 & 3) << (2 * (i % 4)));
      }
      for (int64_t sp = 0; sp < S; ++sp)
        std::memcpy(group + kTileRows * int_bytes + (sp * kTileRows + row) * 2, &supers[size_t(r * S + sp)], 2);
    }
  }
  void make_tiles() {
    const int64_t groups = n / kTileRows, block = nibble_values(kind) ? 256 : 512;
    // Q6 stores u = q + 32 (0..63): its nibbles as Q4's, bits 4 and 5 as two of Q5's masks (8 words each)
    const int bias6 = kind == QuantKind::Q6 ? 32 : 0;
    if (kind == QuantKind::Q5 || kind == QuantKind::Q6) tiles.high.assign(size_t(groups * nb * (bias6 ? 16 : 8)), 0);
    tiles.values.assign(size_t(groups * nb * block + 1), 0);
    uint8_t* v = tiles.values.data() + 1;  // unaligned, as the row layout's
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t b = 0; b < nb; ++b)
        for (int r = 0; r < 8; ++r)
          for (int c = 0; c < kTileRows; ++c)
            for (int j = 0; j < 4; ++j) {
              const int64_t row = g * kTileRows + c, e = 32 * b + 4 * r + j;
              const int u = q(row, e) + bias6;
              if (!nibble_values(kind)) {
                v[(g * nb + b) * 512 + 64 * r + 4 * c + j] = uint8_t(q(row, e) + 128);
              } else if (r < 4) {
                v[(g * nb + b) * 256 + 64 * r + 4 * c + j] = uint8_t((u & 15) | (((q(row, e + 16) + bias6) & 15) << 4));
              }
              if (kind == QuantKind::Q5) {
                if ((u >> 4) & 1) tiles.high[size_t((g * nb + b) * 8 + r)] |= 1ull << (4 * c + j);
              } else if (kind == QuantKind::Q6) {
                for (int bit = 0; bit < 2; ++bit)
                  if ((u >> (4 + bit)) & 1) tiles.high[size_t((g * nb + b) * 16 + 8 * bit + r)] |= 1ull << (4 * c + j);
              }
            }
    auto group_major = [&](const auto& src, auto& dst) {
      if (src.empty()) return;
      const int64_t per_row = int64_t(src.size()) / n;
      dst.resize(src.size());
      for (int64_t row = 0; row < n; ++row)
        for (int64_t i = 0; i < per_row; ++i)
          dst[size_t(((row / kTileRows) * per_row + i) * kTileRows + row % kTileRows)] = src[size_t(row * per_row + i)];
    };
    group_major(scales, tiles.scales), group_major(mins, tiles.mins);
    group_major(scales_h, tiles.scales_h), group_major(mins_h, tiles.mins_h);
    if (compact) {
      compact_tiles(sc_ints, sc_supers, tiles.compact_scales);
      if (with_mins) compact_tiles(m_ints, m_supers, tiles.compact_mins);
    }
  }
  QuantWeightView view(bool tiled = false, bool wide = false) const {
    QuantWeightView w;
    w.kind = kind, w.n = n, w.k = k;
    const auto& sc = tiled ? tiles.scales : scales;
    const auto& mn = tiled ? tiles.mins : mins;
    const auto& sc_h = tiled ? tiles.scales_h : scales_h;
    const auto& mn_h = tiled ? tiles.mins_h : mins_h;
    w.values = tiled ? tiles.values.data() + 1 : values.data() + 1;
    w.high = high.empty() ? nullptr : tiled ? reinterpret_cast<const uint32_t*>(tiles.high.data()) : high.data();
    w.scales = half ? static_cast<const void*>(sc_h.data()) : sc.data();
    w.mins = !with_mins ? nullptr : half ? static_cast<const void*>(mn_h.data()) : mn.data();
    w.half_factors = half;
    w.min_offset = min_offset;
    w.tiled = tiled;
    w.wide_activations = wide;
    if (compact && tiled) {
      w.compact_factors = true;
      w.scales = tiles.compact_scales.data();
      w.mins = with_mins ? tiles.compact_mins.data() : nullptr;
    }
    return w;
  }
  // The integer weight of row r, element c, decoded from the layout as quant_linear.h documents it.
  int q(int64_t r, int64_t c) const {
    const uint8_t* v = values.data() + 1;
    if (!nibble_values(kind)) return int(int8_t(v[r * k + c]));
    const int64_t b = c / 32;
    const int j = int(c % 32);
    const uint8_t byte = v[(r * nb + b) * 16 + (j % 16)];
    int value = j < 16 ? (byte & 15) : (byte >> 4);
    if (kind == QuantKind::Q5) value |= int((high[size_t(r * nb + b)] >> j) & 1u) << 4;
    if (kind == QuantKind::Q6) {
      value |= int((high[size_t(2 * (r * nb + b))] >> j) & 1u) << 4 | int((high[size_t(2 * (r * nb + b) + 1)] >> j) & 1u) << 5;
      value -= 32;
    }
    return value;
  }
  float scale(int64_t r, int64_t c) const {
    return halves(kind) ? scales[size_t(r * 2 * nb + c / 16)] : scales[size_t(r * nb + c / 32)];
  }
  float min(int64_t r, int64_t b) const {
    return with_mins ? mins[size_t(r * nb + b)] : float(min_offset) * scales[size_t(r * nb + b)];
  }
};

double worst_error[3] = {0, 0, 0};  // f32, bf16, f16: reported, so a loosening shows in the log
uint64_t digest = 14695981039346656037ull;  // of every checked output: paths that must agree bit for bit compare it
uint64_t tiles_digest = 14695981039346656037ull;  // of the tiled outputs alone

void fail(const char* what, QuantKind kind, const char* dt, int64_t m, int64_t n, int64_t k, bool bias,
          int threads, const char* detail) {
  ++failures;
  std::printf("FAIL %s kind=%s dtype=%s m=%lld n=%lld k=%lld bias=%d threads=%d: %s\n", what, kind_name(kind), dt,
              (long long)m, (long long)n, (long long)k, int(bias), threads, detail);
}

// K-quants with compact factors on the tile layout (quant_tiles.h): activations per 256 (the steps of
// quantize_activations over 256 elements), per super-block I = sum_j sc_j * (w . q over sub-block j) and
// Im = sum_j m_j * sum(q over j) in integers, out = sum_S I * d * dA + Im * (-dmin) * dA (+ bias), within 1e-5 (f32),
// 1e-2 (bf16), 2e-3 (f16) of the sum of the sizes of those terms.
template <typename T>
void check_super_blocks(const Weight& wt, const std::vector<T>& x, int64_t xs, int64_t m, const std::vector<T>& out,
                        int64_t os, const std::vector<T>* bias, T fill, const char* dt, int threads) {
  const int64_t k = wt.k, n = wt.n, supers = k / 256, sub = halves(wt.kind) ? 16 : 32, per_super = 256 / sub;
  std::vector<int> q(size_t(m * k));
  std::vector<float> d(size_t(m * supers));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t S = 0; S < supers; ++S) {
      float amax = 0.f;
      for (int64_t c = 256 * S; c < 256 * (S + 1); ++c) amax = std::max(amax, std::fabs(to_float(x[t * xs + c])));
      const float scale = amax / 127.f, inv = scale != 0.f ? 1.f / scale : 0.f;
      d[size_t(t * supers + S)] = scale;
      for (int64_t c = 256 * S; c < 256 * (S + 1); ++c)
        q[size_t(t * k + c)] = int(std::max(-127.f, std::min(127.f, std::nearbyint(to_float(x[t * xs + c]) * inv))));
    }
  ++checks;
  const float tol = sizeof(T) == 4 ? 1e-5f : (std::is_same_v<T, bf16_t> ? 1e-2f : 2e-3f);
  double worst = 0.0;
  int outside = 0;
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = 0; r < n; ++r) {
      double s = 0.0, mag = 0.0;
      for (int64_t S = 0; S < supers; ++S) {
        int64_t isum = 0, msum = 0;
        for (int64_t j = 0; j < per_super; ++j) {
          const int64_t j_row = S * per_super + j, c0 = j_row * sub;
          int64_t dot = 0, qs = 0;
          for (int64_t c = c0; c < c0 + sub; ++c) dot += int64_t(wt.q(r, c)) * q[size_t(t * k + c)], qs += q[size_t(t * k + c)];
          isum += wt.sc_ints[size_t(r * (k / sub) + j_row)] * dot;
          if (wt.with_mins) msum += wt.m_ints[size_t(r * (k / 32) + j_row)] * qs;
        }
        const double da = d[size_t(t * supers + S)];
        const double term = double(isum) * double(to_float(fp16_t{wt.sc_supers[size_t(r * supers + S)]})) * da;
        const double mterm = wt.with_mins ? double(msum) * double(to_float(fp16_t{wt.m_supers[size_t(r * supers + S)]})) * da : 0.0;
        s += term + mterm, mag += std::fabs(term) + std::fabs(mterm);
      }
      if (bias) s += to_float((*bias)[r]), mag += std::fabs(to_float((*bias)[r]));
      const double err = std::fabs(to_float(out[t * os + r]) - s) / (mag + 1e-30);
      if (!(err <= worst)) worst = err;
    }
    for (int64_t r = n; r < os; ++r) outside += bits_of(out[t * os + r]) != bits_of(fill) ? 1 : 0;
  }
  if (!(worst <= tol)) {
    char msg[64];
    std::snprintf(msg, sizeof msg, "relative error %g", worst);
    fail("compact linear vs super-block reference", wt.kind, dt, m, n, k, bias != nullptr, threads, msg);
  }
  if (outside) fail("compact linear wrote outside its slice", wt.kind, dt, m, n, k, bias != nullptr, threads, "");
}

template <typename T>
void check_linear(QuantKind kind, int64_t m, int64_t n, int64_t k, bool bias, bool with_mins, int threads,
                  bool half = false, bool tiled = false, bool wide = false, bool compact = false) {
  const std::string label = std::string(dtype_name<T>()) + (half ? "+fp16 factors" : "") + (tiled ? " tiled" : "") +
                            (wide ? " 16-bit activations" : "") + (compact ? " compact" : "");
  const char* dt = label.c_str();
  Weight wt(kind, n, k, with_mins, half, half);
  if (compact) wt.make_compact();
  if (tiled) wt.make_tiles();
  const int64_t xs = k + 3, os = n + 5, nb = k / 32;  // strided rows on both sides
  auto x = random_vec<T>(size_t(m * xs), 2.f);
  if (m > 1)  // an all-zero block: d = 0
    for (int j = 0; j < 32; ++j) x[size_t(xs + j)] = from_float<T>(0.f);
  const auto b = random_vec<T>(size_t(n));
  const T fill = from_float<T>(7.f);

  auto call = [&](int64_t rows, const T* xp, T* op, int th) {
    QuantLinearArgs a;
    a.dtype = dtype_of<T>();
    a.x = xp, a.x_stride = xs;
    a.w = wt.view(tiled, wide);
    a.bias = bias ? b.data() : nullptr;
    a.out = op, a.out_stride = os;
    a.m = rows;
    quant_linear(a, chunked(th));
  };
  std::vector<T> out(size_t(m * os), fill);
  call(m, x.data(), out.data(), threads);
  uint64_t& h = tiled ? tiles_digest : digest;
  for (const T& v : out) h = (h ^ bits_of(v)) * 1099511628211ull;  // FNV-1a over every output's bits

  if (compact) {
    check_super_blocks(wt, x, xs, m, out, os, bias ? &b : nullptr, fill, dt, threads);
  } else {
    // The reference: the same quantized activations, exact integer dots, the float math in double.
    std::vector<int32_t> q(size_t(m * k));
    std::vector<float> d(size_t(m * nb)), dsum(size_t(m * nb));
    std::vector<int32_t> offsets(size_t(m * nb));
    const int top = wide ? 32639 : 127;
    if (wide) {
      std::vector<int8_t> lo(q.size()), hi(q.size());
      quantize_activations_wide(dtype_of<T>(), x.data(), xs, m, k, lo.data(), hi.data(), d.data(), offsets.data(),
                                serial_runtime());
      for (size_t i = 0; i < q.size(); ++i) q[i] = 256 * hi[i] + lo[i];
    } else {
      std::vector<int8_t> q8(q.size());
      quantize_activations(dtype_of<T>(), x.data(), xs, m, k, q8.data(), d.data(), dsum.data(), serial_runtime());
      q.assign(q8.begin(), q8.end());
    }
    ++checks;
    {  // the quantization itself: q * d within half a step of x, dsum = d * sum(q) (wide: offsets = 128 sum(q))
      int bad = 0;
      for (int64_t t = 0; t < m; ++t)
        for (int64_t bb = 0; bb < nb; ++bb) {
          int32_t sum = 0;
          float amax = 0.f;
          for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(to_float(x[t * xs + 32 * bb + j])));
          const float dd = d[t * nb + bb];
          if (!(std::fabs(dd - amax / float(top)) <= 1e-6f * amax)) ++bad;
          for (int j = 0; j < 32; ++j) {
            const int qq = q[t * k + 32 * bb + j];
            sum += qq;
            const double xv = to_float(x[t * xs + 32 * bb + j]);
            // x * (1 / d) rounds twice in float: up to ~top * 2^-23 of a step past the half
            if (qq < -top || qq > top || std::fabs(xv - double(qq) * dd) > (0.5001 + top * 3e-7) * dd + 1e-30) ++bad;
          }
          if (wide ? offsets[t * nb + bb] != 128 * sum : dsum[t * nb + bb] != dd * float(sum)) ++bad;
        }
      if (bad) {
        char msg[64];
        std::snprintf(msg, sizeof msg, "%d bad values", bad);
        fail("quantize_activations", kind, dt, m, n, k, bias, threads, msg);
      }
    }
    ++checks;
    {
      const float tol = sizeof(T) == 4 ? 1e-5f : (std::is_same_v<T, bf16_t> ? 1e-2f : 2e-3f);
      double worst = 0.0;
      int64_t worst_t = -1, worst_r = -1;
      int outside = 0;
      for (int64_t t = 0; t < m; ++t) {
        for (int64_t r = 0; r < n; ++r) {
          // mag: the sum of the sizes of every product the output adds up. The vector paths convert partial
          // integer dots (lanes of a few elements) to float and add them there, so their rounding error is
          // relative to this, not to |isum|: a block whose lanes cancel is not exact in float.
          double s = 0.0, mag = 0.0;
          for (int64_t bb = 0; bb < nb; ++bb) {
            for (int h = 0; h < (halves(kind) ? 2 : 1); ++h) {
              const int64_t c0 = 32 * bb + (halves(kind) ? 16 * h : 0);
              const int64_t len = halves(kind) ? 16 : 32;
              int64_t isum = 0, iabs = 0;
              for (int64_t c = c0; c < c0 + len; ++c) {
                const int64_t p = int64_t(wt.q(r, c)) * q[t * k + c];
                isum += p, iabs += p < 0 ? -p : p;
              }
              const double sd = double(wt.scale(r, c0)) * double(d[t * nb + bb]);
              s += double(isum) * sd, mag += double(iabs) * sd;
            }
            const double mterm = double(wt.min(r, bb)) * double(dsum[t * nb + bb]);
            s += mterm, mag += std::fabs(mterm);
          }
          if (bias) s += to_float(b[r]), mag += std::fabs(to_float(b[r]));
          const double got = to_float(out[t * os + r]);
          const double err = std::fabs(got - s) / (mag + 1e-30);
          if (!(err <= worst)) worst = err, worst_t = t, worst_r = r;
          double& seen = worst_error[sizeof(T) == 4 ? 0 : (std::is_same_v<T, bf16_t> ? 1 : 2)];
          if (!(err <= seen)) seen = err;
        }
        for (int64_t r = n; r < os; ++r) outside += bits_of(out[t * os + r]) != bits_of(fill) ? 1 : 0;
      }
      if (!(worst <= tol)) {
        char msg[96];
        std::snprintf(msg, sizeof msg, "relative error %g at row %lld col %lld", worst, (long long)worst_t, (long long)worst_r);
        fail("linear vs reference", kind, dt, m, n, k, bias, threads, msg);
      }
      if (outside) fail("linear wrote outside its slice", kind, dt, m, n, k, bias, threads, "");
    }

  }

  // Determinism: the same rows whatever M, tile position or thread split.
  auto compare = [&](const std::vector<T>& other, int64_t first, const char* what) {
    ++checks;
    int64_t diff = 0, at = -1;
    for (int64_t t = first; t < m; ++t)
      for (int64_t r = 0; r < n; ++r)
        if (std::memcmp(&other[t * os + r], &out[t * os + r], sizeof(T)) != 0) {
          if (at < 0) at = t;
          ++diff;
        }
    if (diff) {
      char msg[96];
      std::snprintf(msg, sizeof msg, "%lld values differ (first in row %lld)", (long long)diff, (long long)at);
      fail(what, kind, dt, m, n, k, bias, threads, msg);
    }
  };
  {
    std::vector<T> alt(size_t(m * os), fill);
    call(m, x.data(), alt.data(), threads % 3 + 1);
    compare(alt, 0, "rows depend on the thread split");
  }
  if (m > 1) {
    std::vector<T> single(size_t(m * os), fill);
    for (int64_t t = 0; t < m; ++t) call(1, x.data() + t * xs, single.data() + t * os, (threads + 1) % 3 + 1);
    compare(single, 0, "rows differ from M=1 calls");
    std::vector<T> shifted(size_t(m * os), fill);
    call(m - 1, x.data() + xs, shifted.data() + os, threads);
    compare(shifted, 1, "rows depend on their tile position");
  }
}

// quant_rows: rows `ids` dequantized as scale * q + min with two float roundings (never one fused multiply-add).
template <typename T>
void check_rows(QuantKind kind, int64_t n, int64_t k, bool with_mins, int threads, bool tiled = false) {
  Weight wt(kind, n, k, with_mins);
  if (tiled) wt.make_tiles();
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < std::min<int64_t>(n, 5); ++i) ids.push_back(pick(n));
  ids.push_back(n - 1), ids.push_back(0);
  const int64_t os = k + 7;
  const T fill = from_float<T>(7.f);
  std::vector<T> out(ids.size() * size_t(os), fill);
  quant_rows(wt.view(tiled), ids.data(), int64_t(ids.size()), dtype_of<T>(), out.data(), os, chunked(threads));
  ++checks;
  int64_t bad = 0, at = -1;
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < k; ++c) {
      volatile float p = wt.scale(ids[i], c) * float(wt.q(ids[i], c));  // volatile: rounded, not fused
      float v = p;
      if (wt.with_mins) v = v + wt.min(ids[i], c / 32);
      if (bits_of(out[i * os + c]) != bits_of(from_float<T>(v))) {
        if (at < 0) at = int64_t(i) * k + c;
        ++bad;
      }
    }
    for (int64_t c = k; c < os; ++c) bad += bits_of(out[i * os + c]) != bits_of(fill) ? 1 : 0;
  }
  if (bad) {
    char msg[96];
    std::snprintf(msg, sizeof msg, "%lld values differ (first at id %lld col %lld)", (long long)bad,
                  at < 0 ? -1ll : (long long)(at / k), at < 0 ? -1ll : (long long)(at % k));
    fail(tiled ? "quant_rows (tiled)" : "quant_rows", kind, dtype_name<T>(), int64_t(ids.size()), n, k, false, threads, msg);
  }
}

}  // namespace

int main() {
  const QuantKind kinds[] = {QuantKind::Q8, QuantKind::Q8Halves, QuantKind::Q4, QuantKind::Q5, QuantKind::Q6};
  // M = 1 (decode: SMMLA pads the lone token), odd M and M not a multiple of any tile (2 x 2 SMMLA, 4 tokens),
  // and M > 4, where the 4/5-bit kinds unpack into scratch: each compared row by row with M = 1 calls.
  const int64_t ms[] = {1, 2, 3, 5, 17, 64, 130};
  const int64_t ks[] = {32, 96, 256, 576};         // one block, an odd block count, even counts
  const int64_t ns[] = {1, 2, 3, 5, 16, 17, 33, 50, 7, 4, 20};  // odd and even, below 4, not multiples of 16
  int i = 0;
  for (QuantKind kind : kinds) {
    for (int64_t k : ks)
      for (int64_t m : ms) {
        const int64_t n = ns[size_t(i) % (sizeof ns / sizeof ns[0])];
        const int threads = 1 + i % 3;
        const bool bias = (i / 3) % 2 == 1, mins = i % 2 == 0, half = (i / 2) % 2 == 1;
        check_linear<float>(kind, m, n, k, bias, mins, threads, half);
        check_linear<bf16_t>(kind, m, n, k, !bias, !mins, threads % 3 + 1, half);
        check_linear<fp16_t>(kind, m, n, k, bias, !mins, (threads + 1) % 3 + 1, half);
        ++i;
      }
    for (int64_t k : ks)
      for (int threads : {1, 3}) {
        check_rows<float>(kind, 19, k, threads == 1, threads);
        check_rows<bf16_t>(kind, 19, k, threads != 1, threads);
        check_rows<fp16_t>(kind, 19, k, true, threads);
      }
  }
  if (quant_tiles_compiled()) {
    // M around the tile sizes: VNNI only (< 16), a lone AMX tile padded with zero tokens (10, 13: each kind pads
    // from its own count of tail tokens), one AMX tile (1 x 3 chunks) with a VNNI tail, two and more (2 x 2
    // chunks, an odd last tile, padded or not); N with odd group counts (the chunks' tails).
    const int64_t tms[] = {1, 3, 10, 13, 16, 21, 32, 47, 80};
    const int64_t tns[] = {16, 48, 80, 32};
    int j = 0;
    for (QuantKind kind : kinds) {
      for (int64_t k : {32, 96, 576})
        for (int64_t m : tms) {
          const int64_t n = tns[size_t(j) % 4];
          const int threads = 1 + j % 3;
          const bool bias = j % 2 == 1, mins = (j / 2) % 2 == 0, half = (j / 3) % 2 == 1;
          check_linear<float>(kind, m, n, k, bias, mins, threads, half, true);
          check_linear<bf16_t>(kind, m, n, k, !bias, !mins, threads % 3 + 1, !half, true);
          check_linear<fp16_t>(kind, m, n, k, bias, !mins, (threads + 1) % 3 + 1, half, true);
          ++j;
        }
      for (int64_t k : {32, 576}) {
        check_rows<float>(kind, 32, k, true, 2, true);
        check_rows<bf16_t>(kind, 48, k, false, 1, true);
      }
    }
    // K-quants with compact factors (whole super-blocks in integers): M on the VNNI dots, past each kind's
    // padding count, a lone AMX tile (int32 folds), two and more (B planes) with odd tails, and two runs of
    // token pairs where the build makes them short (LLMCHAT_SUPER_ACT_BYTES)
    for (QuantKind kind : {QuantKind::Q4, QuantKind::Q5, QuantKind::Q6, QuantKind::Q8Halves})
      for (int64_t k : {256, 512})
        for (int64_t m : {1, 5, 6, 7, 16, 21, 47, 80, 130}) {
          const int64_t n = tns[size_t(j) % 4];
          const int threads = 1 + j % 3;
          check_linear<float>(kind, m, n, k, j % 2 == 1, true, threads, false, true, false, true);
          check_linear<bf16_t>(kind, m, n, k, j % 2 == 0, true, threads % 3 + 1, false, true, false, true);
          ++j;
        }
    // Q8 with 16-bit activations (what the engine runs Q8_0 with on this layout), the same M and N.
    for (int64_t k : {32, 96, 576})
      for (int64_t m : tms) {
        const int64_t n = tns[size_t(j) % 4];
        const int threads = 1 + j % 3;
        const bool bias = j % 2 == 1, half = (j / 3) % 2 == 1;
        check_linear<float>(QuantKind::Q8, m, n, k, bias, false, threads, half, true, true);
        check_linear<bf16_t>(QuantKind::Q8, m, n, k, !bias, false, threads % 3 + 1, !half, true, true);
        check_linear<fp16_t>(QuantKind::Q8, m, n, k, bias, false, (threads + 1) % 3 + 1, half, true, true);
        ++j;
      }
  }
  std::printf("worst error f32 %.3g bf16 %.3g f16 %.3g\n", worst_error[0], worst_error[1], worst_error[2]);
  std::printf("digest=%016llx\n", (unsigned long long)digest);
  std::printf("tiles_digest=%016llx\n", (unsigned long long)tiles_digest);
  std::printf("tiles=%s\n", quant_tiles_isa());
  std::printf("isa=%s\nok %d checks, %d failed\n", quant_isa_name(), checks, failures);
  return failures ? 1 : 0;
}
