// Shared helpers of the core: dtype dispatch and a grain size that keeps tiny ops on one thread.
#pragma once
#include <algorithm>

#include "kernels.h"

namespace llmchat {

// Calls fn(T{}) with T the storage type of dt (float, bf16_t, fp16_t).
template <typename F>
inline void dispatch_dtype(DType dt, F&& fn) {
  switch (dt) {
    case DType::F32: fn(float{}); break;
    case DType::BF16: fn(bf16_t{}); break;
    case DType::F16: fn(fp16_t{}); break;
  }
}

// Rows per parallel chunk so that each chunk touches at least ~32k elements.
inline int64_t grain_for(int64_t row_elems) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, row_elems)); }

}  // namespace llmchat
