// What the build asks of the CPU (from the compiler's target macros) and what the CPU running it offers
// (CPUID + XGETBV on x86, getauxval on Linux/AArch64, sysctl on macOS), so a build made for a wider CPU
// reports what is missing instead of dying on an illegal instruction.
#include "cpu_features.h"

#include <string>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace llmchat {
namespace {

std::vector<std::string> compiled() {
  std::vector<std::string> need;
#if defined(__AVX2__)
  need.push_back("avx2");
#endif
#if defined(__FMA__)
  need.push_back("fma");
#endif
#if defined(__F16C__)
  need.push_back("f16c");
#endif
#if defined(__AVX512F__)
  need.push_back("avx512f");
#endif
#if defined(__AVX512BW__)
  need.push_back("avx512bw");
#endif
#if defined(__AVX512BF16__)
  need.push_back("avx512bf16");
#endif
#if defined(__AVX512VNNI__)
  need.push_back("avx512vnni");
#endif
#if defined(__AVX512VL__)
  need.push_back("avx512vl");
#endif
#if defined(__AVXVNNI__)
  need.push_back("avxvnni");
#endif
#if defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
  need.push_back("fp16");
#endif
#if defined(__ARM_FEATURE_DOTPROD)
  need.push_back("dotprod");
#endif
#if defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
  need.push_back("bf16");
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
  need.push_back("i8mm");
#endif
  return need;
}

}  // namespace

#if defined(__x86_64__) || defined(_M_X64)
namespace {
struct X86 {
  unsigned l1c = 0, l7b = 0, l7c = 0, l7s1a = 0;
  unsigned long long xcr0 = 0;
  X86() {
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) l1c = c;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) { l7b = b; l7c = c; }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) l7s1a = a;
    if (l1c & (1u << 27)) {  // OSXSAVE: the OS saves the wide registers, XGETBV says which
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
    }
  }
  bool ymm() const { return (xcr0 & 0x6) == 0x6; }
  bool zmm() const { return ymm() && (xcr0 & 0xe0) == 0xe0; }
};
}  // namespace

bool cpu_has(const std::string& f) {
  static const X86 x;
  if (f == "avx2") return x.ymm() && (x.l7b & (1u << 5));
  if (f == "fma") return x.ymm() && (x.l1c & (1u << 12));
  if (f == "f16c") return x.ymm() && (x.l1c & (1u << 29));
  if (f == "avx512f") return x.zmm() && (x.l7b & (1u << 16));
  if (f == "avx512bw") return x.zmm() && (x.l7b & (1u << 30));
  if (f == "avx512vnni") return x.zmm() && (x.l7c & (1u << 11));
  if (f == "avx512bf16") return x.zmm() && (x.l7s1a & (1u << 5));
  if (f == "avx512vl") return x.zmm() && (x.l7b & (1u << 31));
  if (f == "avxvnni") return x.ymm() && (x.l7s1a & (1u << 4));
  return false;
}
#elif defined(__aarch64__) && defined(__linux__)
bool cpu_has(const std::string& f) {
  // bit positions from the kernel's uapi asm/hwcap.h (spelled out: old headers lack the newer names)
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  if (f == "fp16") return hw & (1ul << 10);     // HWCAP_ASIMDHP
  if (f == "dotprod") return hw & (1ul << 20);  // HWCAP_ASIMDDP
  if (f == "i8mm") return hw2 & (1ul << 13);    // HWCAP2_I8MM
  if (f == "bf16") return hw2 & (1ul << 14);    // HWCAP2_BF16
  return false;
}
#elif defined(__aarch64__) && defined(__APPLE__)
bool cpu_has(const std::string& f) {
  const char* key = f == "fp16" ? "hw.optional.arm.FEAT_FP16"
                  : f == "dotprod" ? "hw.optional.arm.FEAT_DotProd"
                  : f == "i8mm" ? "hw.optional.arm.FEAT_I8MM"
                  : f == "bf16" ? "hw.optional.arm.FEAT_BF16" : nullptr;
  int value = 0;
  size_t size = sizeof(value);
  return key && sysctlbyname(key, &value, &size, nullptr, 0) == 0 && value == 1;
}
#else
bool cpu_has(const std::string&) { return false; }
#endif

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

}  // namespace

std::string compiled_cpu_features() { return joined(compiled()); }

std::string missing_cpu_features() {
  std::vector<std::string> missing;
  for (const auto& f : compiled())
    if (!cpu_has(f)) missing.push_back(f);
  return joined(missing);
}

}  // namespace llmchat
