// Standalone test of the torch-free small-M linear (core/gemv.cpp) on the compiled ISA path, dense and
// packed, against a plain triple loop. Built natively and cross-compiled for aarch64 by
// test_linear_isa_builds.py. Prints "isa=<path>", "packed=<panel path>", "packed_m1=<what a 1-token step runs>",
// "packed_m2=<what a 2-token step runs>" and "ok <n> checks, <f> failed"; exit 1 on failure.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/gemv.h"
#include "core/packed_linear.h"
#include "driver_util.h"

using namespace llmchat;
using namespace llmchat::test;

// Same layout as kernels/linear.py: pack_linear_weight.
static std::vector<bf16_t> pack(const std::vector<bf16_t>& w, int64_t n, int64_t k) {
  const int64_t panels = (n + 15) / 16, pairs = (k + 1) / 2;
  std::vector<bf16_t> p(size_t(panels * pairs * 32), bf16_t{0});
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) p[size_t(((r / 16) * pairs + c / 2) * 32 + (r % 16) * 2 + c % 2)] = w[size_t(r * k + c)];
  return p;
}

template <typename T>
void check(int64_t m, int64_t n, int64_t k, bool bias, bool packed, int threads) {
  auto x = random_vec<T>(size_t(m * (k + 3))), w = random_vec<T>(size_t(n * k)), b = random_vec<T>(size_t(n));
  // NaN between rows: a path that reads past a row's K elements (even against zero weight padding) fails.
  for (int64_t t = 0; t < m; ++t)
    for (int64_t c = k; c < k + 3; ++c) x[size_t(t * (k + 3) + c)] = from_float<T>(NAN);
  std::vector<T> out(size_t(m * (n + 5)), from_float<T>(7.f));
  std::vector<bf16_t> pw;
  LinearArgs a;
  a.dtype = dtype_of<T>();
  a.x = x.data(), a.x_stride = k + 3;  // strided rows on both sides
  a.weight = w.data();
  if constexpr (std::is_same_v<T, bf16_t>) {
    if (packed) pw = pack(w, n, k), a.weight = pw.data(), a.packed = true;
  }
  a.bias = bias ? b.data() : nullptr;
  a.out = out.data(), a.out_stride = n + 5;
  a.m = m, a.n = n, a.k = k;
  linear_small_m(a, chunked(threads));
  ++checks;
  float worst = 0.f;
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < n; ++r) {
      double s = bias ? to_float(b[r]) : 0.0;
      for (int64_t c = 0; c < k; ++c) s += double(to_float(x[t * (k + 3) + c])) * to_float(w[r * k + c]);
      const float got = to_float(out[t * (n + 5) + r]);
      const float err = std::fabs(got - float(s)) / (1.f + std::fabs(float(s)));
      if (!(err <= worst)) worst = err;
    }
  const float tol = sizeof(T) == 4 ? 1e-5f : (std::is_same_v<T, bf16_t> ? 1e-2f : 2e-3f);
  if (!(worst <= tol)) {
    ++failures;
    std::printf("FAIL m=%lld n=%lld k=%lld bias=%d packed=%d: error %g\n", (long long)m, (long long)n, (long long)k,
                int(bias), int(packed), worst);
  }
}

// Determinism (issue 16): each output row is the same bits whatever M and the thread count (rows alone on one
// thread, in chunks of 5 on three, all at once on three).
template <typename T>
void check_rows_independent(int64_t n, int64_t k, bool packed) {
  const int64_t m = 23;
  auto x = random_vec<T>(size_t(m * k)), w = random_vec<T>(size_t(n * k)), b = random_vec<T>(size_t(n));
  std::vector<bf16_t> pw;
  auto run = [&](int64_t first, int64_t rows, int threads, std::vector<T>& out) {
    LinearArgs a;
    a.dtype = dtype_of<T>();
    a.x = x.data() + first * k, a.x_stride = k, a.weight = w.data();
    if constexpr (std::is_same_v<T, bf16_t>) {
      if (packed) a.weight = pw.data(), a.packed = true;
    }
    a.bias = b.data(), a.out = out.data() + first * n, a.out_stride = n;
    a.m = rows, a.n = n, a.k = k;
    linear_small_m(a, chunked(threads));
  };
  if constexpr (std::is_same_v<T, bf16_t>) {
    if (packed) pw = pack(w, n, k);
  }
  std::vector<T> all(size_t(m * n)), alone(all.size()), fives(all.size());
  run(0, m, 3, all);
  for (int64_t t = 0; t < m; ++t) run(t, 1, 1, alone);
  for (int64_t t = 0; t < m; t += 5) run(t, std::min<int64_t>(5, m - t), 3, fives);
  ++checks;
  if (std::memcmp(all.data(), alone.data(), all.size() * sizeof(T)) != 0 ||
      std::memcmp(all.data(), fives.data(), all.size() * sizeof(T)) != 0) {
    ++failures;
    std::printf("FAIL rows depend on M or threads: n=%lld k=%lld packed=%d\n", (long long)n, (long long)k, int(packed));
  }
}

// Determinism of the dense rows across the row-block shape: weight rows taken 1, 2, 3 or 5 at a time (the R = 1..4
// block instances at every offset) give each output the bits of all rows at once on three threads, at every M.
template <typename T>
void check_dense_rows_any_block(int64_t n, int64_t k) {
  const int64_t m = 7;  // a token block of 4 and a tail where the build blocks tokens
  auto x = random_vec<T>(size_t(m * k)), w = random_vec<T>(size_t(n * k)), b = random_vec<T>(size_t(n));
  auto run = [&](int64_t r0, int64_t rows, int64_t tokens, int threads, std::vector<T>& out) {
    LinearArgs a;
    a.dtype = dtype_of<T>();
    a.x = x.data(), a.x_stride = k, a.weight = w.data() + r0 * k;
    a.bias = b.data() + r0, a.out = out.data() + r0, a.out_stride = n;
    a.m = tokens, a.n = rows, a.k = k;
    linear_small_m(a, chunked(threads));
  };
  std::vector<T> all(size_t(m * n));
  run(0, n, m, 3, all);
  for (int64_t width : {1, 2, 3, 5})
    for (int64_t tokens : {int64_t(1), m}) {
      std::vector<T> part(all.size());
      for (int64_t r0 = 0; r0 < n; r0 += width) run(r0, std::min(width, n - r0), tokens, 1, part);
      ++checks;
      if (std::memcmp(all.data(), part.data(), size_t(tokens * n) * sizeof(T)) != 0) {
        ++failures;
        std::printf("FAIL dense rows depend on the row block: rows %lld at a time, m=%lld n=%lld k=%lld dtype=%d\n",
                    (long long)width, (long long)tokens, (long long)n, (long long)k, int(dtype_of<T>()));
      }
    }
}

// Determinism of the packed panels (issue 16): a row computed alone on one thread has the same bits inside
// batches of every size 1..40 (each token-block shape and tail) on 1, 2 or 3 threads.
void check_packed_rows_any_batch(int64_t n, int64_t k) {
  const int64_t m = 40;
  auto x = random_vec<bf16_t>(size_t(m * k)), w = random_vec<bf16_t>(size_t(n * k)), b = random_vec<bf16_t>(size_t(n));
  const std::vector<bf16_t> pw = pack(w, n, k);
  auto run = [&](int64_t first, int64_t rows, int threads, std::vector<bf16_t>& out) {
    LinearArgs a;
    a.dtype = DType::BF16;
    a.x = x.data() + first * k, a.x_stride = k, a.weight = pw.data(), a.packed = true;
    a.bias = b.data(), a.out = out.data() + first * n, a.out_stride = n;
    a.m = rows, a.n = n, a.k = k;
    linear_small_m(a, chunked(threads));
  };
  std::vector<bf16_t> alone(size_t(m * n)), batched(alone.size());
  for (int64_t t = 0; t < m; ++t) run(t, 1, 1, alone);
  for (int64_t batch = 1; batch <= m; ++batch) {
    const int threads = 1 + int(batch % 3);
    for (int64_t t = 0; t < m; t += batch) run(t, std::min(batch, m - t), threads, batched);
    ++checks;
    if (std::memcmp(alone.data(), batched.data(), alone.size() * sizeof(bf16_t)) != 0) {
      ++failures;
      std::printf("FAIL packed rows differ from M=1 in batches of %lld on %d threads: n=%lld k=%lld\n", (long long)batch,
                  threads, (long long)n, (long long)k);
    }
  }
}

// Determinism across paths (BFDOT at M = 1, BFMMLA tiles at M >= 2 on NEON+bf16): over many random shapes
// (ragged N, every K mod 4, odd K, bias or none, 1-3 threads) each row of an M-token step has the bits of that
// token's row computed alone. The inputs span 2^-8..2^8, so a tile whose k order or rounding differed from the
// BFDOT chain would change low bits of many outputs.
void check_packed_random_shapes(int count) {
  for (int i = 0; i < count; ++i) {
    const int64_t n = 1 + pick(80), k = 1 + pick(200), m = 2 + pick(16);
    const bool bias = pick(2) == 0;
    const int threads = 1 + int(pick(3));
    auto wide = [](size_t len) {
      std::vector<bf16_t> v(len);
      for (auto& e : v) e = to_bf16(uniform() * std::ldexp(1.f, int(pick(17)) - 8));
      return v;
    };
    const auto x = wide(size_t(m * k)), w = wide(size_t(n * k)), b = wide(size_t(n));
    const std::vector<bf16_t> pw = pack(w, n, k);
    auto run = [&](int64_t first, int64_t rows, int th, std::vector<bf16_t>& out) {
      LinearArgs a;
      a.dtype = DType::BF16;
      a.x = x.data() + first * k, a.x_stride = k, a.weight = pw.data(), a.packed = true;
      a.bias = bias ? b.data() : nullptr, a.out = out.data() + first * n, a.out_stride = n;
      a.m = rows, a.n = n, a.k = k;
      linear_small_m(a, chunked(th));
    };
    std::vector<bf16_t> alone(size_t(m * n)), batched(alone.size());
    for (int64_t t = 0; t < m; ++t) run(t, 1, 1, alone);
    run(0, m, threads, batched);
    ++checks;
    for (int64_t t = 0; t < m; ++t)
      if (std::memcmp(alone.data() + t * n, batched.data() + t * n, size_t(n) * sizeof(bf16_t)) != 0) {
        ++failures;
        std::printf("FAIL packed row of token %lld differs between M=1 (%s) and M=%lld (%s): n=%lld k=%lld bias=%d "
                    "threads=%d\n", (long long)t, packed_step_path(1), (long long)m, packed_step_path(m),
                    (long long)n, (long long)k, int(bias), threads);
        break;
      }
  }
}

// The lone last k-pair (ceil(K/2) odd) must take BFDOT's one BFDotAdd, not a BFMMLA against a zero pair: row 3's
// sum is 1.5 x 2^-126 after k-pair 0 and 1.5 x 2^-126 - 2^-125 after the lone pair 2, a negative denormal that
// BFDotAdd flushes to -0; with a bias of -0 the output is -0 (bf16 0x8000). A padded BFMMLA would add +0 once
// more, making +0 (0x0000) at M >= 2 only. On BFDOT/BFMMLA the -0 must be there (else the case proves nothing).
void check_signed_zero_lone_pair() {
  for (int64_t k : {5, 6, 9, 10}) {
    const int64_t n = 20, m = 7, row = 3, last = 4 * (((k + 1) / 2) / 2);  // the lone pair's first k
    auto x = random_vec<bf16_t>(size_t(m * k)), w = random_vec<bf16_t>(size_t(n * k)), b = random_vec<bf16_t>(size_t(n));
    for (int64_t c = 0; c < k; ++c) w[size_t(row * k + c)] = bf16_t{0};
    w[size_t(row * k)] = to_bf16(std::ldexp(1.f, -63)), w[size_t(row * k + last)] = to_bf16(std::ldexp(1.f, -63));
    for (int64_t t = 0; t < m; ++t)
      x[size_t(t * k)] = to_bf16(std::ldexp(1.5f, -63)), x[size_t(t * k + last)] = to_bf16(-std::ldexp(1.f, -62));
    b[size_t(row)] = bf16_t{0x8000};
    const std::vector<bf16_t> pw = pack(w, n, k);
    auto run = [&](int64_t first, int64_t rows, std::vector<bf16_t>& out) {
      LinearArgs a;
      a.dtype = DType::BF16;
      a.x = x.data() + first * k, a.x_stride = k, a.weight = pw.data(), a.packed = true;
      a.bias = b.data(), a.out = out.data() + first * n, a.out_stride = n;
      a.m = rows, a.n = n, a.k = k;
      linear_small_m(a, chunked(2));
    };
    std::vector<bf16_t> alone(size_t(m * n)), batched(alone.size());
    for (int64_t t = 0; t < m; ++t) run(t, 1, alone);
    run(0, m, batched);
    ++checks;
    const bool flushes = std::string(packed_isa_name()).rfind("neon+bf16", 0) == 0;
    for (int64_t t = 0; t < m; ++t) {
      const uint16_t one = alone[size_t(t * n + row)].bits, many = batched[size_t(t * n + row)].bits;
      if (one != many || (flushes && one != 0x8000)) {
        ++failures;
        std::printf("FAIL signed zero of a lone last k-pair: k=%lld token %lld: M=1 0x%04x, M=%lld 0x%04x\n",
                    (long long)k, (long long)t, one, (long long)m, many);
        break;
      }
    }
  }
}

int main() {
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 33, 64}, {3, 17, 31}, {5, 40, 48}, {7, 64, 100}, {13, 35, 577}, {40, 21, 96}};
  for (auto& s : shapes)
    for (int threads : {1, 3})
      for (bool bias : {false, true}) {
        check<float>(s[0], s[1], s[2], bias, false, threads);
        check<fp16_t>(s[0], s[1], s[2], bias, false, threads);
        check<bf16_t>(s[0], s[1], s[2], bias, false, threads);
        check<bf16_t>(s[0], s[1], s[2], bias, true, threads);
      }
  for (int64_t k : {31, 100, 577}) {
    check_rows_independent<float>(37, k, false);
    check_rows_independent<fp16_t>(37, k, false);
    check_rows_independent<bf16_t>(37, k, false);
    check_rows_independent<bf16_t>(37, k, true);
  }
  for (int64_t k : {31, 64, 100, 577}) {
    check_dense_rows_any_block<float>(13, k);
    check_dense_rows_any_block<fp16_t>(13, k);
    check_dense_rows_any_block<bf16_t>(13, k);
  }
  for (int64_t n : {37, 150})  // one panel group with a ragged panel; several groups for the thread split
    for (int64_t k : {31, 577}) check_packed_rows_any_batch(n, k);
  check_packed_random_shapes(200);
  check_signed_zero_lone_pair();
  std::printf("isa=%s\npacked=%s\npacked_m1=%s\npacked_m2=%s\nok %d checks, %d failed\n", isa_name(), packed_isa_name(),
              packed_step_path(1), packed_step_path(2), checks, failures);
  return failures ? 1 : 0;
}
