// Quantized linear (see quant_linear.h). A task owns groups of kGroup weight rows; with more tokens than one
// register tile holds, a group's 4/5-bit blocks are unpacked once into int8 scratch and every token tile reads
// them from L1, otherwise (decode) blocks are unpacked in registers as they stream by. Both give the same
// integers, and each output always runs the same sequence of block dots, so results do not depend on M.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../vec/qdot.h"
#include "dispatch.h"
#include "quant_linear.h"

// No compiler-chosen fused multiply-adds: row dequantization must round twice, as numpy does, and every
// output's float operations must be the ones written here.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace llmchat {
namespace {

using qdot::QAcc;
using qdot::QVec;

constexpr int kRows = 4;     // weight rows per register tile
constexpr int kGroup = 16;   // weight rows per task step (unpacked together for large M)
constexpr int kTok = qdot::kTokens;

struct Acts {  // quantized activations
  const int8_t* q;
  const float *d, *dsum;
};

template <QuantKind KIND>
inline QVec packed_block(const QuantWeightView& w, int64_t row, int64_t b, int64_t nb) {
  if constexpr (KIND == QuantKind::Q4) {
    return qdot::load_q4(static_cast<const uint8_t*>(w.values) + (row * nb + b) * 16);
  } else if constexpr (KIND == QuantKind::Q5) {
    return qdot::load_q5(static_cast<const uint8_t*>(w.values) + (row * nb + b) * 16, w.high[row * nb + b]);
  } else {
    return qdot::load32(static_cast<const int8_t*>(w.values) + row * w.k + 32 * b);
  }
}

// Weight blocks read straight from the packed weight, or from a group unpacked into scratch.
template <QuantKind KIND>
struct Packed {
  const QuantWeightView& w;
  int64_t nb;
  QVec operator()(int64_t row, int64_t b) const { return packed_block<KIND>(w, row, b, nb); }
};
struct Unpacked {
  const int8_t* base;  // row `first` of the group
  int64_t first, k;
  QVec operator()(int64_t row, int64_t b) const { return qdot::load32(base + (row - first) * k + 32 * b); }
};

// res[r][t] = out[m0 + t, n0 + r] before bias, for R <= kRows rows and T <= kTok tokens.
template <QuantKind KIND, int R, int T, class Src>
void tile(const QuantWeightView& w, const Src& src, int64_t n0, const Acts& x, int64_t m0, float (*res)[kTok]) {
  const int64_t K = w.k, nb = K / 32;
  QAcc acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = qdot::qzero();
  for (int64_t b = 0; b < nb; ++b) {
    QVec av[T];
    float d[T];
    for (int t = 0; t < T; ++t) av[t] = qdot::load32(x.q + (m0 + t) * K + 32 * b), d[t] = x.d[(m0 + t) * nb + b];
    for (int r = 0; r < R; ++r) {
      const QVec wv = src(n0 + r, b);
      if constexpr (KIND == QuantKind::Q8Halves) {
        const float lo = w.scales[(n0 + r) * 2 * nb + 2 * b], hi = w.scales[(n0 + r) * 2 * nb + 2 * b + 1];
        for (int t = 0; t < T; ++t) acc[r][t] = qdot::fma_s8_halves(acc[r][t], wv, av[t], lo * d[t], hi * d[t]);
      } else if constexpr (KIND == QuantKind::Q8) {
        const float s = w.scales[(n0 + r) * nb + b];
        for (int t = 0; t < T; ++t) acc[r][t] = qdot::fma_s8(acc[r][t], wv, av[t], s * d[t]);
      } else {
        const float s = w.scales[(n0 + r) * nb + b];
        for (int t = 0; t < T; ++t) acc[r][t] = qdot::fma_u8(acc[r][t], wv, av[t], s * d[t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      float v = qdot::qsum(acc[r][t]);
      if (w.mins != nullptr) {  // the mins meet the activation block sums, in block order
        const float* mn = w.mins + (n0 + r) * nb;
        const float* ds = x.dsum + (m0 + t) * nb;
        float s = 0.f;
        for (int64_t b = 0; b < nb; ++b) s = s + mn[b] * ds[b];
        v = v + s;
      }
      res[r][t] = v;
    }
}

template <QuantKind KIND, int R, class Src>
void tile_tokens(int tokens, const QuantWeightView& w, const Src& src, int64_t n0, const Acts& x, int64_t m0,
                 float (*res)[kTok]) {
  if constexpr (kTok >= 4) {
    if (tokens == 4) return tile<KIND, R, 4>(w, src, n0, x, m0, res);
    if (tokens == 3) return tile<KIND, R, 3>(w, src, n0, x, m0, res);
  }
  if constexpr (kTok >= 2) {
    if (tokens == 2) return tile<KIND, R, 2>(w, src, n0, x, m0, res);
  }
  tile<KIND, R, 1>(w, src, n0, x, m0, res);
}

template <QuantKind KIND, class Src>
void tile_any(int rows, int tokens, const QuantWeightView& w, const Src& src, int64_t n0, const Acts& x, int64_t m0,
              float (*res)[kTok]) {
  switch (rows) {
    case 4: return tile_tokens<KIND, 4>(tokens, w, src, n0, x, m0, res);
    case 3: return tile_tokens<KIND, 3>(tokens, w, src, n0, x, m0, res);
    case 2: return tile_tokens<KIND, 2>(tokens, w, src, n0, x, m0, res);
    default: return tile_tokens<KIND, 1>(tokens, w, src, n0, x, m0, res);
  }
}

template <typename T>
void store_tile(const QuantLinearArgs& a, int rows, int tokens, int64_t n0, int64_t m0, float (*res)[kTok]) {
  const T* bias = static_cast<const T*>(a.bias);
  T* out = static_cast<T*>(a.out);
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < tokens; ++t) {
      float v = res[r][t];
      if (bias) v = v + to_float(bias[n0 + r]);
      out[(m0 + t) * a.out_stride + n0 + r] = from_float<T>(v);
    }
}

template <QuantKind KIND, class Src>
void group_tiles(const QuantLinearArgs& a, const Src& src, int64_t n0, int64_t rows, const Acts& x) {
  float res[kRows][kTok];
  for (int64_t m0 = 0; m0 < a.m; m0 += kTok) {
    const int tokens = int(std::min<int64_t>(kTok, a.m - m0));
    for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
      const int r = int(std::min<int64_t>(kRows, rows - r0));
      tile_any<KIND>(r, tokens, a.w, src, n0 + r0, x, m0, res);
      dispatch_dtype(a.dtype, [&](auto tag) { store_tile<decltype(tag)>(a, r, tokens, n0 + r0, m0, res); });
    }
  }
}

template <QuantKind KIND>
void run(const QuantLinearArgs& a, const Acts& x, const Runtime& rt) {
  const QuantWeightView& w = a.w;
  const int64_t nb = w.k / 32, groups = (w.n + kGroup - 1) / kGroup;
  const int64_t per_thread = (groups + rt.num_threads - 1) / std::max(1, rt.num_threads);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(per_thread, (1 << 20) / std::max<int64_t>(1, w.k * kGroup * a.m)));
  constexpr bool kUnpacks = KIND == QuantKind::Q4 || KIND == QuantKind::Q5;
  const bool unpack = kUnpacks && a.m > kTok;
  rt.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    std::vector<int8_t> scratch(unpack ? size_t(kGroup * w.k) : 0);
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t n0 = g * kGroup, rows = std::min<int64_t>(kGroup, w.n - n0);
      if (unpack) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t b = 0; b < nb; ++b)
            qdot::store32(scratch.data() + r * w.k + 32 * b, packed_block<KIND>(w, n0 + r, b, nb));
        group_tiles<KIND>(a, Unpacked{scratch.data(), n0, w.k}, n0, rows, x);
      } else {
        group_tiles<KIND>(a, Packed<KIND>{w, nb}, n0, rows, x);
      }
    }
  });
}

template <typename T>
void quantize_rows(const T* x, int64_t x_stride, int64_t m0, int64_t m1, int64_t k, int8_t* q, float* d, float* dsum) {
  const int64_t nb = k / 32;
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      const T* xb = x + m * x_stride + 32 * b;
      float v[32], amax = 0.f;
      for (int j = 0; j < 32; ++j) v[j] = to_float(xb[j]), amax = std::max(amax, std::fabs(v[j]));
      const float scale = amax / 127.f, inv = scale != 0.f ? 1.f / scale : 0.f;
      int8_t* qb = q + m * k + 32 * b;
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) {
        const float r = std::nearbyint(v[j] * inv);  // round half to even, as torch.round
        qb[j] = int8_t(std::max(-127.f, std::min(127.f, r)));
        sum += qb[j];
      }
      d[m * nb + b] = scale;
      dsum[m * nb + b] = scale * float(sum);
    }
}

}  // namespace

const char* quant_isa_name() { return qdot::kIsa; }

void quantize_activations(DType dt, const void* x, int64_t x_stride, int64_t m, int64_t k, int8_t* q, float* d,
                          float* dsum, const Runtime& rt) {
  rt.parallel_for(m, grain_for(k), [&](int64_t m0, int64_t m1) {
    dispatch_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      quantize_rows(static_cast<const T*>(x), x_stride, m0, m1, k, q, d, dsum);
    });
  });
}

void quant_linear(const QuantLinearArgs& a, const Runtime& rt) {
  if (a.m <= 0 || a.w.n <= 0) return;
  const int64_t K = a.w.k, nb = K / 32;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, dsum;
  q.resize(size_t(a.m * K)), d.resize(size_t(a.m * nb)), dsum.resize(size_t(a.m * nb));
  quantize_activations(a.dtype, a.x, a.x_stride, a.m, K, q.data(), d.data(), dsum.data(), rt);
  const Acts x{q.data(), d.data(), dsum.data()};
  switch (a.w.kind) {
    case QuantKind::Q8: return run<QuantKind::Q8>(a, x, rt);
    case QuantKind::Q8Halves: return run<QuantKind::Q8Halves>(a, x, rt);
    case QuantKind::Q4: return run<QuantKind::Q4>(a, x, rt);
    case QuantKind::Q5: return run<QuantKind::Q5>(a, x, rt);
  }
}

void quant_rows(const QuantWeightView& w, const int64_t* ids, int64_t num_ids, DType dt, void* out,
                int64_t out_stride, const Runtime& rt) {
  const int64_t K = w.k, nb = K / 32;
  rt.parallel_for(num_ids, grain_for(K), [&](int64_t i0, int64_t i1) {
    int8_t vals[32];
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = ids[i];
      dispatch_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        T* o = static_cast<T*>(out) + i * out_stride;
        for (int64_t b = 0; b < nb; ++b) {
          QVec v;
          switch (w.kind) {
            case QuantKind::Q4: v = packed_block<QuantKind::Q4>(w, row, b, nb); break;
            case QuantKind::Q5: v = packed_block<QuantKind::Q5>(w, row, b, nb); break;
            default: v = packed_block<QuantKind::Q8>(w, row, b, nb); break;
          }
          qdot::store32(vals, v);
          for (int j = 0; j < 32; ++j) {
            const float s = w.kind == QuantKind::Q8Halves ? w.scales[row * 2 * nb + 2 * b + j / 16] : w.scales[row * nb + b];
            float value = s * float(vals[j]);                       // two roundings, as numpy does it:
            if (w.mins != nullptr) value = value + w.mins[row * nb + b];  // never one fused multiply-add
            o[32 * b + j] = from_float<T>(value);
          }
        }
      });
    }
  });
}

}  // namespace llmchat
