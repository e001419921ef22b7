// Prints what the build asks of the CPU, what this CPU lacks, and which of every known feature it has, one
// line each, for test_cpu_features.py and test_kernel_levels.py.
#include <cstdio>
#include <string>

#include "core/cpu_features.h"

int main() {
  std::printf("compiled=%s\nmissing=%s\n", llmchat::compiled_cpu_features().c_str(),
              llmchat::missing_cpu_features().c_str());
  std::string has;
  for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512bf16", "avx512vnni", "avx512vl", "avxvnni",
                        "fp16", "dotprod", "bf16", "i8mm"})
    if (llmchat::cpu_has(f)) has += (has.empty() ? "" : ",") + std::string(f);
  std::printf("has=%s\n", has.c_str());
  return 0;
}
