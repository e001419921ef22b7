// The ARM tile layout's inner loops (core/quant_tiles_neon.cpp) for the estimator, the loops the engine runs for
// Q4_0 / Q8_0 weights of 16-row groups on ARM, and for K-quants (Q4_K with the file's u6 sc and m and stored
// mins; Q6_K in its 6 bits with i8 sc): the file is included whole so its templates can be named.
// Decode: 16 rows x 1 token on SDOT block sums (every core). Prefill: with i8mm the SMMLA tile of 8 rows x
// 4 tokens, else 16 rows x 4 tokens on SDOT. fp16 factors, Q4_0's min as the int32 offset, as the engine
// stores them. Compiled to assembly only, never linked.
#include "core/quant_tiles_neon.cpp"

namespace {
using namespace llmchat;
template <QuantKind KIND, int T>
void dot_of(const void* w, const void* x, void* res) {
  dot_tile<KIND, kF16, false, KIND == QuantKind::Q4, T>(*static_cast<const QuantWeightView*>(w), *static_cast<const Acts*>(x),
                                                      0, 0, static_cast<float(*)[kNeonTileRows]>(res));
}
template <QuantKind KIND>
void prefill_of(const void* w, const void* x, void* res) {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  mma_tile<KIND, kF16, false, KIND == QuantKind::Q4, kMmaRowPairs, kMmaTokenPairs>(
      *static_cast<const QuantWeightView*>(w), *static_cast<const Acts*>(x), 0, 0, 0, static_cast<float32x4_t(*)[kMmaTokenPairs]>(res));
#else
  dot_of<KIND, 4>(w, x, res);
#endif
}
template <QuantKind KIND, int F, bool MINS>
void k_decode_of(const void* w, const void* x, void* res) {
  dot_tile<KIND, F, MINS, false, 1>(*static_cast<const QuantWeightView*>(w), *static_cast<const Acts*>(x), 0, 0,
                                    static_cast<float(*)[kNeonTileRows]>(res));
}
template <QuantKind KIND, int F, bool MINS>
void k_prefill_of(const void* w, const void* x, void* res) {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  mma_tile<KIND, F, MINS, false, kMmaRowPairs, kMmaTokenPairs>(
      *static_cast<const QuantWeightView*>(w), *static_cast<const Acts*>(x), 0, 0, 0, static_cast<float32x4_t(*)[kMmaTokenPairs]>(res));
#else
  dot_tile<KIND, F, MINS, false, 4>(*static_cast<const QuantWeightView*>(w), *static_cast<const Acts*>(x), 0, 0,
                                    static_cast<float(*)[kNeonTileRows]>(res));
#endif
}
}  // namespace

extern "C" void est_tiles_q4_0_decode(const void* w, const void* x, void* res) { dot_of<QuantKind::Q4, 1>(w, x, res); }
extern "C" void est_tiles_q4_0_prefill(const void* w, const void* x, void* res) { prefill_of<QuantKind::Q4>(w, x, res); }
extern "C" void est_tiles_q8_0_decode(const void* w, const void* x, void* res) { dot_of<QuantKind::Q8, 1>(w, x, res); }
extern "C" void est_tiles_q8_0_prefill(const void* w, const void* x, void* res) { prefill_of<QuantKind::Q8>(w, x, res); }
extern "C" void est_tiles_q4_k_decode(const void* w, const void* x, void* res) { k_decode_of<QuantKind::Q4, kCompactU6, true>(w, x, res); }
extern "C" void est_tiles_q4_k_prefill(const void* w, const void* x, void* res) { k_prefill_of<QuantKind::Q4, kCompactU6, true>(w, x, res); }
extern "C" void est_tiles_q6_k_decode(const void* w, const void* x, void* res) { k_decode_of<QuantKind::Q6, kCompactI8, false>(w, x, res); }
extern "C" void est_tiles_q6_k_prefill(const void* w, const void* x, void* res) { k_prefill_of<QuantKind::Q6, kCompactI8, false>(w, x, res); }
extern "C" void est_tiles_q6_k_8bit_decode(const void* w, const void* x, void* res) { k_decode_of<QuantKind::Q8Halves, kCompactI8, false>(w, x, res); }
extern "C" void est_tiles_q5_k_decode(const void* w, const void* x, void* res) { k_decode_of<QuantKind::Q5, kCompactU6, true>(w, x, res); }
extern "C" void est_tiles_q5_k_prefill(const void* w, const void* x, void* res) { k_prefill_of<QuantKind::Q5, kCompactU6, true>(w, x, res); }
