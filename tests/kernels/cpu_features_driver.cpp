// Prints what the build asks of the CPU and what this CPU lacks, one per line, for test_cpu_features.py.
#include <cstdio>

#include "core/cpu_features.h"

int main() {
  std::printf("compiled=%s\nmissing=%s\n", llmchat::compiled_cpu_features().c_str(),
              llmchat::missing_cpu_features().c_str());
  return 0;
}
