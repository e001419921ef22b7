// Standalone test of the torch-free kernel core: every kernel on the compiled ISA path vs the scalar
// reference (kernels/csrc/reference). Built natively (avx512 / avx2 / scalar) and cross-compiled for
// aarch64 (run under qemu) by test_isa_builds.py. Prints "isa=<path>" and "ok <n> checks"; exit 1 on failure.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/kernels.h"
#include "driver_util.h"
#include "reference/reference.h"

using namespace llmchat;
using namespace llmchat::test;

template <typename T> void expect_close(const char* what, const std::vector<T>& got, const std::vector<T>& want, float tol) {
  ++checks;
  float worst = 0.f;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = to_float(got[i]), w = to_float(want[i]);
    const float err = std::fabs(g - w) / (1.f + std::fabs(w));
    if (!(err <= worst)) worst = err;  // also catches NaN
  }
  if (!(worst <= tol)) {
    ++failures;
    std::printf("FAIL %s: max error %g > %g\n", what, worst, tol);
  }
}

template <typename T> float tol() { return sizeof(T) == 4 ? 2e-5f : (std::is_same_v<T, bf16_t> ? 1.6e-2f : 2e-3f); }

template <typename T>
void check_attention(int hq, int hkv, int D, int bs, std::vector<std::pair<int, int>> seqs, int window, const Runtime& rt,
                     int bpg = 1) {
  int max_blocks = 0, total_blocks = 0, T_ = 0;
  for (auto [q, ctx] : seqs) max_blocks = std::max(max_blocks, (ctx + bs - 1) / bs), total_blocks += (ctx + bs - 1) / bs, T_ += q;
  std::vector<int32_t> tables(seqs.size() * max_blocks, 0), lens, qsl{0};
  int next = total_blocks - 1;  // hand blocks out in reverse so tables are not the identity
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int b = 0; b < (seqs[s].second + bs - 1) / bs; ++b) tables[s * max_blocks + b] = next--;
    lens.push_back(seqs[s].second);
    qsl.push_back(qsl.back() + seqs[s].first);
  }
  const int cache_blocks = (total_blocks + bpg - 1) / bpg * bpg;  // whole groups
  auto kc = random_vec<T>(size_t(cache_blocks) * hkv * bs * D), vc = random_vec<T>(kc.size()), q = random_vec<T>(size_t(T_) * hq * D);
  std::vector<T> out(q.size()), want(q.size());
  PagedAttentionArgs a;
  a.dtype = dtype_of<T>();
  a.query = q.data(), a.q_stride_token = int64_t(hq) * D, a.q_stride_head = D;
  a.key_cache = kc.data(), a.value_cache = vc.data();
  a.o_stride_token = int64_t(hq) * D, a.o_stride_head = D;
  a.block_tables = tables.data(), a.bt_stride = max_blocks, a.seq_lens = lens.data(), a.query_start_loc = qsl.data();
  a.num_seqs = int(seqs.size()), a.num_q_heads = hq, a.num_kv_heads = hkv, a.head_size = D, a.block_size = bs;
  a.blocks_per_group = bpg, a.scale = 1.0f / std::sqrt(float(D)), a.sliding_window = window;
  a.out = out.data();
  paged_attention(a, rt);
  a.out = want.data();
  reference::paged_attention<T>(a);
  char name[128];
  std::snprintf(name, sizeof name, "attention hq=%d hkv=%d D=%d bs=%d bpg=%d window=%d threads=%d", hq, hkv, D, bs, bpg, window,
                rt.num_threads);
  expect_close(name, out, want, tol<T>());
}

// Determinism (issue 16): one sequence of L tokens; each query row computed as a decode step (alone, 1 and 4
// threads: a split plan), inside 7-token prefill chunks and inside the full prefill gives the same bits.
// zero_columns: the first 16 value columns are zeros of both signs, so those outputs are sums of signed zeros
// (a tile's padding keys and a masked key must add the same). every_decode: a decode step at every position, not a
// few: with bf16 outputs (and P rounded to bf16) a last-bit difference in a score or sum shows in few outputs.
// The 7-token chunks: one at every multiple of 7 with a window; without one, the chunks starting at 0..127 and
// around the segment edge, as a call's cost grows with its position. A row's bits can depend on its position p
// within the chunks of chunk_keys() (64 for bs 8 and 16, on every path: the vector micro-kernels, the AMX tiles'
// 16 keys and the BFMMLA 16-key QK and 8-key P.V blocks divide it), on its row i = p - first in the call's tile
// and on the call's key end first + 7 (mask and padding of the last chunk). Starts 64..127 give every pair
// (p mod 64, i), the 448 the multiples of 7 give over 0..447, and every last-chunk length 1..64, each after a whole
// unmasked chunk; starts 0..63 the same pairs and lengths in a row's first keys. Starts seg - 7..seg put the
// segment edge (the fold, attention_tile.h) at every row of the call: 511 seeing nothing of the second segment,
// 512 only its first key; L - 7 is the end. An fp32 row that differs shows it in its outputs. bf16 and fp16 round
// their outputs (and P), so a difference shows in few of them and what finds it is how many rows each class has:
// here every pair (p mod 64, i) and every key end mod 64 twice (959 rows compared), where the multiples of 7 over
// 0..599 compared each once or twice (600 rows), for about half their cost (the keys the calls read).
template <typename T>
void check_attention_rows(int hq, int hkv, int D, int bs, int L, int window, int bpg, bool zero_columns = false,
                          bool every_decode = false) {
  const int blocks = (L + bs - 1) / bs, cache_blocks = (blocks + bpg - 1) / bpg * bpg;
  std::vector<int32_t> table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = blocks - 1 - b;
  auto kc = random_vec<T>(size_t(cache_blocks) * hkv * bs * D), vc = random_vec<T>(kc.size());
  auto q = random_vec<T>(size_t(L) * hq * D);
  if (zero_columns)
    for (size_t r = 0; r < vc.size(); r += D)
      for (int c = 0; c < 16; ++c) vc[r + c] = from_float<T>(uniform() * -0.f);  // -0 or +0
  auto attend = [&](int first, int n, const Runtime& rt) {  // query positions [first, first + n)
    std::vector<T> out(size_t(n) * hq * D);
    std::vector<int32_t> lens{first + n}, qsl{0, n};
    PagedAttentionArgs a;
    a.dtype = dtype_of<T>();
    a.query = q.data() + size_t(first) * hq * D, a.q_stride_token = int64_t(hq) * D, a.q_stride_head = D;
    a.key_cache = kc.data(), a.value_cache = vc.data();
    a.o_stride_token = int64_t(hq) * D, a.o_stride_head = D;
    a.block_tables = table.data(), a.bt_stride = blocks, a.seq_lens = lens.data(), a.query_start_loc = qsl.data();
    a.num_seqs = 1, a.num_q_heads = hq, a.num_kv_heads = hkv, a.head_size = D, a.block_size = bs;
    a.blocks_per_group = bpg, a.scale = 1.0f / std::sqrt(float(D)), a.sliding_window = window;
    a.out = out.data();
    paged_attention(a, rt);
    return out;
  };
  const Runtime one = serial_runtime(), four = chunked(4);
  const std::vector<T> full = attend(0, L, four);
  const size_t row = size_t(hq) * D;
  bool same = true;
  for (int p : {0, bs - 1, bs, 63, 64, 511, 512, L - 1})
    for (const Runtime* rt : {&one, &four}) {
      const std::vector<T> got = attend(p, 1, *rt);
      same = same && std::memcmp(got.data(), full.data() + p * row, row * sizeof(T)) == 0;
    }
  for (int p = 0; every_decode && p < L; ++p) {
    const std::vector<T> got = attend(p, 1, one);
    same = same && std::memcmp(got.data(), full.data() + p * row, row * sizeof(T)) == 0;
  }
  std::vector<int> firsts;
  if (window > 0) {
    for (int first = 0; first < L; first += 7) firsts.push_back(first);
  } else {
    const int chunk = std::max(bs, 64 / bs * bs), seg = 8 * chunk;  // chunk_keys, segment_keys (attention_tile.h)
    for (int first = 0; first < 128; ++first) firsts.push_back(first);
    for (int first = seg - 7; first <= seg; ++first) firsts.push_back(first);
    firsts.push_back(L - 7);
    if (chunk != 64 || seg + 7 >= L) {
      ++failures;
      std::printf("FAIL rows check: the chunk starts assume 64-key chunks and L > seg + 7 (bs=%d L=%d)\n", bs, L);
    }
  }
  for (int first : firsts) {
    const int n = std::min(7, L - first);
    const std::vector<T> got = attend(first, n, one);
    same = same && std::memcmp(got.data(), full.data() + first * row, n * row * sizeof(T)) == 0;
  }
  ++checks;
  if (!same) {
    ++failures;
    std::printf("FAIL attention rows differ between decode, chunks and prefill: hq=%d hkv=%d D=%d bs=%d window=%d bpg=%d%s\n",
                hq, hkv, D, bs, window, bpg, zero_columns ? " (signed-zero columns)" : "");
  }
}

template <typename T>
void check_small_ops() {
  const int n = 5, H = 200, I = 72, hq = 4, hkv = 2, D = 64;
  auto x = random_vec<T>(n * H), w = random_vec<T>(H), r = random_vec<T>(n * H);
  std::vector<T> out(x.size()), want(x.size());
  rms_norm(dtype_of<T>(), x.data(), H, w.data(), out.data(), H, n, H, 1e-6f, serial_runtime());
  reference::rms_norm<T>(x.data(), H, w.data(), want.data(), H, n, H, 1e-6f);
  expect_close("rms_norm", out, want, tol<T>());

  auto x2 = x, r2 = r;
  fused_add_rms_norm(dtype_of<T>(), x.data(), H, r.data(), H, w.data(), n, H, 1e-6f, chunked(2));
  reference::fused_add_rms_norm<T>(x2.data(), H, r2.data(), H, w.data(), n, H, 1e-6f);
  expect_close("fused_add_rms_norm residual", r, r2, 0.f);
  expect_close("fused_add_rms_norm x", x, x2, tol<T>());

  auto g = random_vec<T>(n * 2 * I, 6.f);
  std::vector<T> s(n * I), s_want(n * I);
  silu_and_mul(dtype_of<T>(), g.data(), 2 * I, s.data(), I, n, I, serial_runtime());
  reference::silu_and_mul<T>(g.data(), 2 * I, s_want.data(), I, n, I);
  expect_close("silu_and_mul", s, s_want, tol<T>());

  for (bool neox : {true, false}) {
    std::vector<int64_t> pos{0, 7, 3, 100, 42};
    std::vector<float> cache(128 * D);
    for (int p = 0; p < 128; ++p)
      for (int i = 0; i < D / 2; ++i) {
        const float f = p * std::pow(10000.f, -2.f * i / D);
        cache[p * D + i] = std::cos(f), cache[p * D + D / 2 + i] = std::sin(f);
      }
    auto q = random_vec<T>(n * hq * D), k = random_vec<T>(n * hkv * D);
    auto q2 = q, k2 = k;
    RotaryArgs a;
    a.dtype = dtype_of<T>(), a.positions = pos.data(), a.cos_sin_cache = cache.data(), a.num_tokens = n;
    a.q_stride_token = hq * D, a.q_stride_head = D, a.k_stride_token = hkv * D, a.k_stride_head = D;
    a.num_q_heads = hq, a.num_kv_heads = hkv, a.head_size = D, a.rot_dim = D, a.is_neox = neox;
    a.query = q.data(), a.key = k.data();
    rotary_embedding(a, serial_runtime());
    a.query = q2.data(), a.key = k2.data();
    reference::rotary_embedding<T>(a);
    expect_close(neox ? "rotary neox q" : "rotary gptj q", q, q2, tol<T>());
    expect_close(neox ? "rotary neox k" : "rotary gptj k", k, k2, tol<T>());
  }
}

template <typename T>
void check_cache_ops(int bpg) {
  const int nb = 6, hkv = 2, bs = 4, D = 32, n = 7;  // nb: whole groups for bpg 1, 2, 3, 6
  auto key = random_vec<T>(n * hkv * D), value = random_vec<T>(n * hkv * D);
  std::vector<T> kc(nb * hkv * bs * D), vc(kc.size()), kc2(kc.size()), vc2(kc.size());
  std::vector<int64_t> slots{5, 0, -1, 23, 9, 10, 1};
  WriteKvArgs a;
  a.elem_size = sizeof(T), a.key = key.data(), a.value = value.data(), a.slot_mapping = slots.data();
  a.k_stride_token = a.v_stride_token = hkv * D, a.k_stride_head = a.v_stride_head = D;
  a.num_tokens = n, a.num_kv_heads = hkv, a.head_size = D, a.block_size = bs, a.blocks_per_group = bpg;
  a.key_cache = kc.data(), a.value_cache = vc.data();
  write_kv_cache(a, serial_runtime());
  a.key_cache = kc2.data(), a.value_cache = vc2.data();
  reference::write_kv_cache(a);
  expect_close("write_kv_cache k", kc, kc2, 0.f);
  expect_close("write_kv_cache v", vc, vc2, 0.f);
  std::vector<int64_t> map{0, 3, 5, 1};
  void *k1[] = {kc.data()}, *v1[] = {vc.data()}, *k2[] = {kc2.data()}, *v2[] = {vc2.data()};
  const KvCacheLayout layout{hkv, bs, D, bpg};
  copy_blocks(k1, v1, 1, layout, sizeof(T), map.data(), 2, chunked(2));
  reference::copy_blocks(k2, v2, 1, layout, sizeof(T), map.data(), 2);
  expect_close("copy_blocks k", kc, kc2, 0.f);
  expect_close("copy_blocks v", vc, vc2, 0.f);
}

// The bandwidth probe's sum: odd lengths (a partial last chunk and a scalar tail), several threads.
void check_read_sum() {
  for (int64_t n : {int64_t(1), int64_t(63), int64_t(70000), int64_t(3 << 16) + 5}) {
    std::vector<float> x(n);
    double want = 0;
    for (int64_t i = 0; i < n; ++i) x[i] = float(i % 7) - 2.5f, want += x[i];
    const float got = read_sum(x.data(), n, chunked(3));
    ++checks;
    if (!(std::fabs(got - want) <= 1e-4 * (1.0 + std::fabs(want) + n))) {
      ++failures;
      std::printf("FAIL read_sum n=%lld: %g vs %g\n", (long long)n, got, want);
    }
  }
}

// The scattered-read probe: runs out of order and at odd offsets, 300 floats (a partial 1 KB step), threads.
void check_read_runs_sum() {
  const int64_t run = 300, n = 40 * run + 7;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = float(i % 11) - 4.f;
  std::vector<int64_t> starts;
  for (int64_t r = 39; r >= 0; r -= 3) starts.push_back(r * run + (r % 2));
  double want = 0;
  for (int64_t s : starts)
    for (int64_t i = 0; i < run; ++i) want += x[s + i];
  for (const Runtime& rt : {serial_runtime(), chunked(3)}) {
    const float got = read_runs_sum(x.data(), run, starts.data(), int64_t(starts.size()), rt);
    ++checks;
    if (!(std::fabs(got - want) <= 1e-3 * (1.0 + std::fabs(want)))) {
      ++failures;
      std::printf("FAIL read_runs_sum threads=%d: %g vs %g\n", rt.num_threads, got, want);
    }
  }
}

template <typename T>
void check_all() {
  const Runtime one = serial_runtime(), four = chunked(4);
  for (int D : {16, 48, 64, 80, 96, 128, 256})
    check_attention<T>(8, 2, D, 16, {{1, 37}, {20, 20}, {6, 45}, {1, 1}}, -1, one);
  for (auto [hq, hkv] : std::vector<std::pair<int, int>>{{4, 4}, {8, 1}, {9, 3}, {16, 2}})
    check_attention<T>(hq, hkv, 64, 8, {{1, 70}, {5, 33}, {1, 700}}, -1, four);
  for (int bs : {1, 5, 32}) check_attention<T>(4, 2, 32, bs, {{1, bs}, {2, bs + 1}, {bs, 3 * bs}}, -1, one);
  for (int window : {1, 9, 64}) check_attention<T>(4, 2, 64, 16, {{1, 600}, {30, 30}, {8, 90}}, window, four);
  check_attention<T>(4, 1, 128, 16, {{1, 1500}}, -1, four);  // flash-decoding split + merge
  for (int bpg : {2, 4})  // grouped caches: blocks of a group share a run per head
    check_attention<T>(8, 2, 128, 16, {{1, 300}, {7, 70}, {1, 1}, {1, 1500}}, -1, four, bpg);
  check_attention<T>(9, 3, 64, 8, {{1, 97}, {12, 40}}, 32, one, 3);
  // Rows, every dtype: the groups of 4 and 3 on 1 and 2 kv heads. Below 1024 keys each kv head is a tile of its own
  // running the same code (heads_per_tile, attention.cpp; check_attention covers more heads' offsets against the
  // reference), and every plan decision stays that of more heads: the full prefill is not split on 4 threads (38
  // and 2 x 29 tiles, at least 8 per thread), a decode step past 512 is. The plan reads no dtype, so 16-bit rows
  // take these shapes too (more heads doubled their cost under qemu and proved nothing more).
  for (int D : {64, 128}) check_attention_rows<T>(4, 1, D, 16, 600, -1, 1);
  check_attention_rows<T>(9, 3, 64, 16, 600, 100, 4);
  check_attention_rows<T>(4, 4, 64, 8, 600, -1, 4, false, true);  // one query head per kv head: decode's lone row
  // the other head sizes of the BFMMLA tiles with odd groups (a padded row pair in every decode step), a
  // 9-key window (chunks that some rows of a tile do not see at all) and signed-zero value columns
  for (int D : {80, 96}) check_attention_rows<T>(6, 2, D, 16, 600, -1, 1);
  check_attention_rows<T>(6, 2, 64, 5, 600, 9, 1, true);
  check_attention<T>(4, 2, 64, 128, {{1, 300}, {9, 200}, {3, 131}}, -1, four);  // chunks of one 128-key block
  check_small_ops<T>();
  for (int bpg : {1, 3}) check_cache_ops<T>(bpg);
}

int main() {
  rng_state = 88172645463325252ull;
  std::printf("isa=%s\n", isa_name());
  std::printf("attention=%s\n", attention_path_name());
  check_all<float>();
  check_all<bf16_t>();
  check_all<fp16_t>();
  check_read_sum();
  check_read_runs_sum();
  std::printf("%s %d checks, %d failed\n", failures ? "FAILED" : "ok", checks, failures);
  return failures ? 1 : 0;
}
