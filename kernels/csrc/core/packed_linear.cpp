// Packed bf16 panels, written once against vec/panel.h: a block is kPanels panels (16 output rows each) x
// kTokens tokens of accumulators; per k-pair it loads each panel's 64 bytes once and pair-dots them against
// every token's broadcast x pair. Each output's operations depend on K alone (see panel.h), so rows are the
// same bits whatever M, the block shape or the thread split (issue 16). On NEON with bf16, steps of two or more
// tokens run BFMMLA tiles over the same panels (vec/panel_bfmmla.h), whose outputs take the BFDOT chain's
// operations, bit for bit.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "../vec/vec.h"  // the intrinsics headers, before exact_float.h (their inline functions keep their options)

// No compiler-chosen fused multiply-adds (exact_float.h): the scalar panel's operations are the ones written.
#include "exact_float.h"

#include "../vec/panel.h"
#include "amx_linear.h"
#include "packed_linear.h"

namespace llmchat {
namespace {

constexpr int kPanel = 16;

inline int64_t pairs_of(int64_t k) { return (k + 1) / 2; }

// The k-pair (x[2j], x[2j+1]) of one token as a 32-bit value; an odd K ends with (x[K-1], 0).
inline uint32_t x_pair(const bf16_t* x, int64_t j, int64_t K) {
  const uint16_t lo = x[2 * j].bits, hi = 2 * j + 1 < K ? x[2 * j + 1].bits : 0;
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

// Calls f(std::integral_constant<int, c>) for a runtime count c in [1, N]: the tail blocks' shapes.
template <int N, typename F>
void with_count(int64_t c, F&& f) {
  if constexpr (N > 1) {
    if (c < N) return with_count<N - 1>(c, f);
  }
  f(std::integral_constant<int, N>{});
}

// out[m0 + t, 16 (p0 + q) + r] for NP panels from p0 and MT tokens from m0.
template <int NP, int MT>
void packed_block(const LinearArgs& a, int64_t p0, int64_t m0) {
  using namespace panel;
  const int64_t K = a.k, kp = pairs_of(K), full_pairs = K / 2, panel_elems = kp * 2 * kPanel;
  const bf16_t* P = static_cast<const bf16_t*>(a.weight) + p0 * panel_elems;
  const bf16_t* X = static_cast<const bf16_t*>(a.x) + m0 * a.x_stride;
  PanelAcc acc[MT][NP];
  for (int t = 0; t < MT; ++t)
    for (int q = 0; q < NP; ++q) acc[t][q] = acc_zero();
  // One k-pair: NP weight loads, then per token a broadcast pair and NP pair-dots.
  auto pair_step = [&](int64_t j, auto&& x_of) {
    PanelWeights w[NP];
    for (int q = 0; q < NP; ++q) w[q] = load_weights(P + q * panel_elems + j * 2 * kPanel);
    for (int t = 0; t < MT; ++t) {
      const XPair xb = broadcast_pair(x_of(t));
      for (int q = 0; q < NP; ++q) acc[t][q] = pair_dot(acc[t][q], w[q], xb);
    }
  };
  for (int64_t j = 0; j < full_pairs; ++j)
    pair_step(j, [&](int t) {
      uint32_t xp;
      std::memcpy(&xp, X + t * a.x_stride + 2 * j, 4);
      return xp;
    });
  if (full_pairs < kp) pair_step(full_pairs, [&](int t) { return x_pair(X + t * a.x_stride, full_pairs, K); });
  const bf16_t* bias = static_cast<const bf16_t*>(a.bias);
  bf16_t* out = static_cast<bf16_t*>(a.out) + m0 * a.out_stride;
  // Unrolled so every acc index is a constant: clang otherwise keeps acc in memory and stores each
  // accumulator on every k-pair of the hot loop.
#pragma GCC unroll 16
  for (int q = 0; q < NP; ++q) {
    const int64_t n0 = (p0 + q) * kPanel;
    const RowMask mask = row_mask(int(std::min<int64_t>(kPanel, a.n - n0)));
    const PanelAcc b = bias ? load_bias(bias + n0, mask) : acc_zero();  // no bias adds zero: one sequence
#pragma GCC unroll 16
    for (int t = 0; t < MT; ++t) store_rounded(out + t * a.out_stride + n0, add(acc[t][q], b), mask);
  }
}

// Every token of the step against panels [p0, p0 + NP): full token blocks, then one shorter block.
template <int NP>
void packed_panels(const LinearArgs& a, int64_t p0) {
  int64_t m = 0;
  for (; m + panel::kTokens <= a.m; m += panel::kTokens) packed_block<NP, panel::kTokens>(a, p0, m);
  if (m < a.m) with_count<panel::kTokens>(a.m - m, [&](auto mt) { packed_block<NP, decltype(mt)::value>(a, p0, m); });
}

// Panels a task takes: enough to amortise scheduling, but every thread gets panels to stream.
int64_t grain_of(int64_t units, int64_t unit_rows, const LinearArgs& a, const Runtime& rt) {
  const int64_t per_thread = (units + rt.num_threads - 1) / std::max(1, rt.num_threads);
  return std::max<int64_t>(1, std::min<int64_t>(per_thread, 16384 / std::max<int64_t>(1, a.k * unit_rows)));
}

#if defined(LLMCHAT_PANEL_BFMMLA)
namespace mmla = panel::mmla;

// out[2 (t0 + t) + h, 16 p + 4 (g0 + g) + r] for NG 4-row groups of panel p from g0 x NT token pairs from t0:
// per k-quad each group's two registers zipped once, then one BFMMLA per group half and token pair.
template <int NG, int NT>
void mmla_block(const LinearArgs& a, const mmla::TokenPairs& xp, int64_t p, int g0, int64_t t0) {
  const int64_t panel_elems = pairs_of(a.k) * 2 * kPanel;
  const bf16_t* W = static_cast<const bf16_t*>(a.weight) + p * panel_elems + 8 * g0;
  const bf16_t* X = xp.pair(t0);
  mmla::GroupAcc acc[NT][NG];
  for (int t = 0; t < NT; ++t)
    for (int g = 0; g < NG; ++g) acc[t][g] = mmla::acc_zero();
  for (int64_t s = 0; s < xp.quads; ++s) {
    bfloat16x8_t x[NT];
    for (int t = 0; t < NT; ++t) x[t] = mmla::load8(X + t * xp.stride + 8 * s);
    for (int g = 0; g < NG; ++g) {
      const mmla::GroupWeights w = mmla::load_quad(W + s * 4 * kPanel + 8 * g);
      for (int t = 0; t < NT; ++t) acc[t][g] = mmla::quad_mmla(acc[t][g], w, x[t]);
    }
  }
  if (xp.lone) {  // the last k-pair alone: BFDOT, as the panel path takes it
    const int64_t s = xp.quads;
    for (int g = 0; g < NG; ++g) {
      const mmla::GroupWeights w = mmla::load_lone(W + s * 4 * kPanel + 8 * g);
      for (int t = 0; t < NT; ++t) acc[t][g] = mmla::lone_dot(acc[t][g], w, mmla::load8(X + t * xp.stride + 8 * s));
    }
  }
  const int64_t n0 = p * kPanel;
  const int valid = int(std::min<int64_t>(kPanel, a.n - n0));
  const bf16_t* bias = static_cast<const bf16_t*>(a.bias);
  const panel::PanelAcc b = bias ? panel::load_bias(bias + n0, panel::row_mask(valid)) : panel::acc_zero();
  bf16_t* out = static_cast<bf16_t*>(a.out) + n0;
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) {
    const int64_t m = 2 * (t0 + t);
#pragma GCC unroll 16
    for (int g = 0; g < NG; ++g) {
      const int row = 4 * (g0 + g);
      mmla::store_rows(out + m * a.out_stride + row, mmla::first_token(acc[t][g]), b.q[g0 + g], valid - row);
      if (m + 1 < a.m)
        mmla::store_rows(out + (m + 1) * a.out_stride + row, mmla::second_token(acc[t][g]), b.q[g0 + g], valid - row);
    }
  }
}

// Every token pair of the step against panel p: full token blocks, then one shorter block, each through the
// panel's row blocks (a token block is read again from cache, not the whole step's tokens).
void mmla_panel(const LinearArgs& a, const mmla::TokenPairs& xp, int64_t p) {
  static_assert(4 % mmla::kGroups == 0, "row blocks tile a panel");
  int64_t t = 0;
  for (; t + mmla::kPairs <= xp.pairs; t += mmla::kPairs)
    for (int g0 = 0; g0 < 4; g0 += mmla::kGroups) mmla_block<mmla::kGroups, mmla::kPairs>(a, xp, p, g0, t);
  if (t < xp.pairs)
    with_count<mmla::kPairs>(xp.pairs - t, [&](auto nt) {
      for (int g0 = 0; g0 < 4; g0 += mmla::kGroups) mmla_block<mmla::kGroups, decltype(nt)::value>(a, xp, p, g0, t);
    });
}

void run_packed_bfmmla(const LinearArgs& a, const Runtime& rt) {
  const mmla::TokenPairs xp(static_cast<const bf16_t*>(a.x), a.x_stride, a.m, a.k);  // once per call
  const int64_t panels = (a.n + kPanel - 1) / kPanel;
  rt.parallel_for(panels, grain_of(panels, kPanel, a, rt), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) mmla_panel(a, xp, p);
  });
}
#endif

// The tile path of a step of m tokens, if any (else the pair-dot panels run it).
enum class Tiles { None, Amx, Bfmmla };
Tiles tiles_for(int64_t m) {
  if (amx_ready()) return Tiles::Amx;  // every step size, so rows keep their bits whatever M
#if defined(LLMCHAT_PANEL_BFMMLA)
  if (m >= 2) return Tiles::Bfmmla;
#endif
  (void)m;
  return Tiles::None;
}

}  // namespace

void run_packed(const LinearArgs& a, const Runtime& rt) {
  switch (tiles_for(a.m)) {
    case Tiles::Amx: return run_packed_amx(a, rt);
#if defined(LLMCHAT_PANEL_BFMMLA)
    case Tiles::Bfmmla: return run_packed_bfmmla(a, rt);
#endif
    default: break;
  }
  const int64_t panels = (a.n + kPanel - 1) / kPanel;
  const int64_t groups = (panels + panel::kPanels - 1) / panel::kPanels;
  rt.parallel_for(groups, grain_of(groups, kPanel, a, rt), [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t p0 = g * panel::kPanels;
      with_count<panel::kPanels>(std::min<int64_t>(panel::kPanels, panels - p0),
                                 [&](auto np) { packed_panels<decltype(np)::value>(a, p0); });
    }
  });
}

bool linear_packed_native() { return panel::kNative || amx_ready(); }

const char* packed_isa_name() { return amx_ready() ? amx_path_name() : panel::kIsa; }

const char* packed_step_path(int64_t m) {
  switch (tiles_for(m)) {
    case Tiles::Amx: return "amx";
    case Tiles::Bfmmla: return "bfmmla";
    default: return "panels";
  }
}

}  // namespace llmchat
