// What the standalone C++ test drivers (core_driver, gemv_driver, lora_driver) share: a seedable xorshift64
// for random inputs, the dtype tag of an element type, pass/fail counters, and a serial runtime that still
// splits work like a pool of several threads (so the kernels plan their parallel splits).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "core/kernels.h"

namespace llmchat::test {

inline uint64_t rng_state = 0x9e3779b97f4a7c15ull;  // a driver may reseed it first thing in main
inline uint64_t next_u64() {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return rng_state;
}
inline float uniform() { return float((next_u64() >> 40) & 0xffffff) / 8388608.0f - 1.0f; }  // [-1, 1)
inline int64_t pick(int64_t n) { return int64_t(next_u64() % uint64_t(n)); }                 // [0, n)

template <typename T> std::vector<T> random_vec(size_t n, float scale = 1.f) {
  std::vector<T> v(n);
  for (auto& e : v) e = from_float<T>(uniform() * scale);
  return v;
}

template <typename T> DType dtype_of() {
  return sizeof(T) == 4 ? DType::F32 : (std::is_same_v<T, bf16_t> ? DType::BF16 : DType::F16);
}

inline int checks = 0, failures = 0;

// Runs chunks one after another but reports `threads` threads.
inline Runtime chunked(int threads) {
  Runtime rt = serial_runtime();
  rt.num_threads = threads;
  rt.parallel_for = [](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    for (int64_t b = 0; b < n; b += std::max<int64_t>(grain, 1)) fn(b, std::min(n, b + std::max<int64_t>(grain, 1)));
  };
  return rt;
}

}  // namespace llmchat::test
