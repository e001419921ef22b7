// Math built once on top of the ISA primitives: exp, sigmoid-based SiLU, rounding through a storage type.
#pragma once

// Full unrolling of the small loops over a register block (rows x tokens, rows x keys): the accumulators are
// then named by constant indices, which both compilers keep in registers (an array indexed at run time, or in a
// loop left rolled, stays on the stack).
// LLMCHAT_NO_UNROLL keeps a loop around such a block rolled (its body is already as large as the registers allow).
#if defined(__clang__)
#define LLMCHAT_UNROLL _Pragma("unroll")
#define LLMCHAT_NO_UNROLL _Pragma("nounroll")
#elif defined(__GNUC__)
#define LLMCHAT_UNROLL _Pragma("GCC unroll 16")
#define LLMCHAT_NO_UNROLL _Pragma("GCC unroll 1")
#else
#define LLMCHAT_UNROLL
#define LLMCHAT_NO_UNROLL
#endif

namespace llmchat::vec {

inline constexpr int kWidth = 16;

// exp(x) with ~1e-7 relative error; x <= -88 gives exactly 0 (so masked -inf scores vanish).
inline VecF exp(VecF x) {
  x = min(max(x, VecF::set1(-88.0f)), VecF::set1(88.0f));
  VecF n = round_nearest(x * VecF::set1(1.44269504088896341f));
  VecF r = fma(n, VecF::set1(-0.693359375f), x);  // ln2 split in two for an exact reduction
  r = fma(n, VecF::set1(2.12194440e-4f), r);
  VecF p = VecF::set1(1.0f / 5040);
  p = fma(p, r, VecF::set1(1.0f / 720));
  p = fma(p, r, VecF::set1(1.0f / 120));
  p = fma(p, r, VecF::set1(1.0f / 24));
  p = fma(p, r, VecF::set1(1.0f / 6));
  p = fma(p, r, VecF::set1(0.5f));
  p = fma(p, r, VecF::set1(1.0f));
  p = fma(p, r, VecF::set1(1.0f));
  return p * pow2i(n);
}

// Hint the next KV block into the cache: paged blocks sit at scattered addresses that the hardware
// prefetcher cannot predict. (GCC/Clang builtin; a no-op where unsupported.)
inline void prefetch_range(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i, 0, 1);
}

inline VecF silu(VecF x) { return x / (VecF::set1(1.0f) + exp(VecF::zero() - x)); }

// Rounds each lane to the precision of storage type T (what torch does between two bf16 ops).
template <typename T> inline VecF round_to(VecF x) {
  T tmp[kWidth];
  x.store(tmp);
  return VecF::load(tmp);
}
template <> inline VecF round_to<float>(VecF x) { return x; }

#ifndef LLMCHAT_NATIVE_BF16_DOT
// Portable bf16 pair-dot: which lane holds which product differs from the native instructions,
// but the horizontal sum (all the kernels use) is the same dot product.
struct VecB {
  VecF lo, hi;
  static VecB load(const bf16_t* p) { return {VecF::load(p), VecF::load(p + 16)}; }
};
inline VecF dot_bf16(VecF acc, VecB a, VecB b) { return fma(a.hi, b.hi, fma(a.lo, b.lo, acc)); }
// Rows a and b as "pairs" for the two-row axpy: here lo/hi simply hold the rows (see vec_avx512.h).
inline void zip_bf16(const bf16_t* a, const bf16_t* b, VecB& lo, VecB& hi) {
  lo = {VecF::load(a), VecF::load(b)};
  hi = {VecF::load(a + 16), VecF::load(b + 16)};
}
inline VecB broadcast_pair(const bf16_t* p) { return {VecF::set1(to_float(p[0])), VecF::set1(to_float(p[1]))}; }
#endif

}  // namespace llmchat::vec
