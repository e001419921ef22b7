// Standalone test of the torch-free multi-adapter LoRA (core/lora.cpp) on the compiled ISA path against the
// scalar reference (reference/reference.h). Built natively and cross-compiled for aarch64 by
// test_lora_isa_builds.py. Prints "isa=<path>" and "ok <n> checks, <f> failed"; exit 1 on failure.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/lora.h"
#include "core/lora_tiles.h"
#include "driver_util.h"
#include "reference/reference.h"

using namespace llmchat;
using namespace llmchat::test;

// Small integers as T: with them every fp32 sum below is exact, in any order.
template <typename T> std::vector<T> int_vec(size_t n, int span) {
  std::vector<T> v(n);
  for (auto& e : v) e = from_float<T>(float(pick(2 * span + 1) - span));
  return v;
}

// slices: output widths; max_rank: per-slice rank drawn in [0, max_rank] (0 = untargeted); slot 0 has none.
template <typename T>
void check(int64_t in, std::vector<int32_t> slices, int64_t slots, int64_t max_rank, int64_t max_seg, int threads,
           bool exact = false) {
  const int S = int(slices.size());
  std::vector<int32_t> so{0};
  for (int32_t w : slices) so.push_back(so.back() + w);
  const int64_t N = so.back();
  std::vector<int32_t> ro;
  int64_t R = 1;
  for (int64_t s = 0; s < slots; ++s) {
    ro.push_back(0);
    for (int i = 0; i < S; ++i) ro.push_back(ro.back() + int32_t(s == 0 ? 0 : pick(max_rank + 1)));
    R = std::max<int64_t>(R, ro.back());
  }
  std::vector<int32_t> seg;
  int64_t tokens = 0;
  for (int64_t n = 1 + pick(5); n > 0; --n) {
    tokens += pick(3);  // base-model tokens in between
    const int64_t len = pick(max_seg + 1);  // may be empty
    seg.insert(seg.end(), {int32_t(pick(slots)), int32_t(tokens), int32_t(tokens + len)});
    tokens += len;
  }
  const int64_t xs = in + 3, os = N + 5;  // strided rows on both sides
  std::vector<int32_t> caps(size_t(S), 0);  // per slice: the largest rank any slot has there (+ padding rows)
  for (int64_t s = 0; s < slots; ++s)
    for (int i = 0; i < S; ++i) caps[size_t(i)] = std::max(caps[size_t(i)], ro[size_t(s * (S + 1) + i + 1)] - ro[size_t(s * (S + 1) + i)]);
  for (auto& c : caps) c += int32_t(pick(2));
  // exact: h = x . A are integers up to ~1000, so rounding h to bf16 (8 significant bits) shows, and the delta
  // and out + delta are exact in fp32: the kernel must give the reference's bits.
  auto x = exact ? int_vec<T>(size_t(std::max<int64_t>(1, tokens * xs)), 3) : random_vec<T>(size_t(std::max<int64_t>(1, tokens * xs)));
  auto a = exact ? int_vec<T>(size_t(slots * R * in), 3) : random_vec<T>(size_t(slots * R * in));
  const size_t b_elems = size_t(slots * lora_b_offset(so.data(), caps.data(), S));  // padding is never read
  auto b = exact ? int_vec<T>(b_elems, 2) : random_vec<T>(b_elems);
  auto out = exact ? int_vec<T>(size_t(std::max<int64_t>(1, tokens * os)), 8) : random_vec<T>(size_t(std::max<int64_t>(1, tokens * os)));
  auto want = out, start = out;
  LoraArgs args;
  args.dtype = dtype_of<T>();
  args.x = x.data(), args.x_stride = xs;
  args.a = a.data(), args.b = b.data();
  args.num_tokens = tokens, args.slots = slots, args.rank = R, args.in = in, args.out_features = N;
  args.rank_offsets = ro.data(), args.slice_offsets = so.data(), args.slice_ranks = caps.data(), args.num_slices = S;
  args.segments = seg.data(), args.num_segments = int64_t(seg.size() / 3);
  args.out_stride = os;
  args.out = want.data();
  // bf16 on tiles rounds h to bf16 before the expand; the reference does the same math
  reference::lora_apply<T>(args, std::is_same_v<T, bf16_t> && std::strcmp(lora_path_name(), "vector") != 0);
  args.out = out.data();
  lora_apply(args, chunked(threads));
  ++checks;
  float worst = 0.f;
  for (size_t i = 0; i < out.size(); ++i) {
    const float g = to_float(out[i]), w = to_float(want[i]);
    const float err = std::fabs(g - w) / (1.f + std::fabs(w));
    if (!(err <= worst)) worst = err;  // also catches NaN
  }
  // Both round (out + delta) once; only the fp32 summation order differs (sums of ~600 products of ~1).
  const float tol = sizeof(T) == 4 ? 1e-4f : (std::is_same_v<T, bf16_t> ? 1e-2f : 2e-3f);
  if (!(worst <= tol) || (exact && std::memcmp(out.data(), want.data(), out.size() * sizeof(T)) != 0)) {
    ++failures;
    std::printf("FAIL in=%lld slices=%d slots=%lld max_rank=%lld tokens=%lld threads=%d exact=%d: error %g\n", (long long)in,
                S, (long long)slots, (long long)max_rank, (long long)tokens, threads, int(exact), worst);
  }
  // Every token again in a segment of its own, on one thread: the same bits (a token's delta must not depend
  // on its segment's length or the plan; the determinism contract of every path, tiles included).
  std::vector<int32_t> single;
  for (size_t i = 0; i < seg.size(); i += 3)
    for (int32_t t = seg[i + 1]; t < seg[i + 2]; ++t) single.insert(single.end(), {seg[i], t, t + 1});
  auto alone = start;
  args.out = alone.data();
  args.segments = single.data(), args.num_segments = int64_t(single.size() / 3);
  lora_apply(args, serial_runtime());
  ++checks;
  if (std::memcmp(alone.data(), out.data(), out.size() * sizeof(T)) != 0) {
    ++failures;
    std::printf("FAIL bits differ with one-token segments: in=%lld slices=%d slots=%lld tokens=%lld threads=%d\n",
                (long long)in, S, (long long)slots, (long long)tokens, threads);
  }
}

#if defined(LLMCHAT_LORA_TILES)
// The tiles' shrink alone: h (fp32, before the expand's bf16 rounding hides a last bit) of an n-token segment
// equals, bit for bit, h of each token as its own segment, for every rank block; rows outside the segment stay.
void check_tile_shrink(int64_t in, int64_t n, int64_t R) {
  const int64_t slots = 2, xs = in + 1, T = n + 2;
  auto x = random_vec<bf16_t>(size_t(T * xs));
  auto a = random_vec<bf16_t>(size_t(slots * R * in));
  std::vector<int32_t> ro = {0, int32_t(R), 0, int32_t(R)}, so = {0, 64}, caps = {int32_t(R)};
  std::vector<int32_t> seg = {1, 1, int32_t(1 + n)}, single;
  for (int32_t t = 1; t < 1 + n; ++t) single.insert(single.end(), {1, t, t + 1});
  LoraArgs args;
  args.dtype = DType::BF16, args.x = x.data(), args.x_stride = xs, args.a = a.data();
  args.num_tokens = T, args.slots = slots, args.rank = R, args.in = in, args.out_features = 64;
  args.rank_offsets = ro.data(), args.slice_offsets = so.data(), args.slice_ranks = caps.data(), args.num_slices = 1;
  std::vector<float> whole(size_t(T * R), -1.f), alone(size_t(T * R), -2.f);
  auto shrink_all = [&](std::vector<float>& h) {
    lora_tiles::Tokens tokens(args);
    for (int64_t s = 0; s < args.num_segments; ++s)
      for (int64_t r = 0; r < R; r += lora_tiles::kRows)
        lora_tiles::shrink(args, tokens, s, r, std::min<int64_t>(R, r + lora_tiles::kRows), h.data());
  };
  args.segments = seg.data(), args.num_segments = 1;
  shrink_all(whole);
  args.segments = single.data(), args.num_segments = n;
  shrink_all(alone);
  ++checks;
  if (std::memcmp(whole.data() + R, alone.data() + R, size_t(n * R) * sizeof(float)) != 0 || whole[0] != -1.f ||
      whole[size_t((n + 1) * R)] != -1.f) {
    ++failures;
    std::printf("FAIL tile shrink in=%lld tokens=%lld rank=%lld\n", (long long)in, (long long)n, (long long)R);
  }
}
#endif

int main() {
  rng_state = 0x2545f4914f6cdd1dull;
  const std::vector<std::vector<int32_t>> slice_sets = {{48}, {48, 16, 16}, {33, 5, 70}, {64, 64}, {1, 130}, {100, 28, 28}};
  for (int64_t in : {7, 32, 100, 576})
    for (const auto& slices : slice_sets)
      for (int64_t max_seg : {1, 2, 5, 13})
        for (int threads : {1, 3}) {
          check<float>(in, slices, 1 + pick(5), 16, max_seg, threads);
          check<bf16_t>(in, slices, 1 + pick(5), 16, max_seg, threads);
          check<fp16_t>(in, slices, 1 + pick(5), 8, max_seg, threads);
        }
  // exact sums (in <= 100 keeps h and the deltas within fp32's and bf16's exact integers): bitwise to the
  // reference, long segments included (ragged token groups, rank blocks, column quarters)
  for (int64_t in : {7, 32, 100})
    for (const auto& slices : slice_sets)
      for (int64_t max_seg : {1, 5, 40})
        for (int threads : {1, 3}) {
          check<float>(in, slices, 1 + pick(5), 24, max_seg, threads, true);
          check<bf16_t>(in, slices, 1 + pick(5), 24, max_seg, threads, true);
        }
#if defined(LLMCHAT_LORA_TILES)
  for (int64_t in : {7, 20, 100, 576})
    for (int64_t n = 1; n <= 19; ++n)
      for (int64_t R : {1, 3, 8, 13, 16, 21}) check_tile_shrink(in, n, R);
#endif
  std::printf("isa=%s\nlora=%s\nok %d checks, %d failed\n", isa_name(), lora_path_name(), checks, failures);
  return failures ? 1 : 0;
}
