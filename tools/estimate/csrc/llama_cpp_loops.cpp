// llama.cpp's attention inner loops that live in a header (ggml-cpu/vec.h: static inline), given a name the
// estimator can find. Built only from a llama.cpp tree the user points to (--llama-cpp); none of its code is
// kept here. Its flash attention with the default f16 cache: KQ is ggml_vec_dot_f16 per key (vec.cpp, found
// there directly), V accumulates with ggml_vec_mad_f16 (fp16 accumulator).
#include "vec.h"

extern "C" void est_llama_vec_mad_f16(int n, ggml_fp16_t* y, const ggml_fp16_t* x, float v) { ggml_vec_mad_f16(n, y, x, v); }
