// Does this CPU run what the build was compiled for? Checked once when the kernels load.
#pragma once
#include <string>

namespace llmchat {

std::string compiled_cpu_features();  // e.g. "avx2,fma,f16c" or "fp16,dotprod,bf16,i8mm"
std::string missing_cpu_features();   // those of them this CPU (and OS) lacks; "" when it runs them all
bool cpu_has(const std::string& feature);  // one feature by those names, on this CPU and OS; false if unknown

}  // namespace llmchat
