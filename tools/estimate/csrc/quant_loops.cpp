// The quantized linear's inner loops (core/quant_linear.cpp) for the estimator: quant_linear.cpp is included
// whole so its internal templates can be named. Decode: 4 rows x 1 token, blocks unpacked in registers as
// they stream by; prefill: 4 rows x 4 tokens over a group unpacked into int8 scratch. On cores with i8mm both
// are the engine's SMMLA tiles (2 rows x 2 tokens an instruction; decode pads its token to a pair). Q4_0 and Q8_0 as the
// engine stores them (fp16 factors, Q4_0's min as -8 x scale). Compiled to assembly only, never linked.
#include "core/quant_linear.cpp"

namespace {
using namespace llmchat;
template <QuantKind KIND, int T, class Src>
void tile_of(const void* w, const Src& src, const void* x, void* res) {
  const auto& v = *static_cast<const QuantWeightView*>(w);
  const auto& a = *static_cast<const Acts*>(x);
  auto* out = static_cast<float(*)[kTok]>(res);
#if defined(LLMCHAT_QDOT_PAIR_TILES)  // i8mm: SMMLA tiles, a lone decode token paired with a copy of itself
  pair_tile<KIND, true, 4, T == 1 ? 2 : T>(v, src, 0, 4, a, 0, T, out);
#else
  tile<KIND, true, 4, T>(v, src, 0, a, 0, out);
#endif
}
}  // namespace

extern "C" void est_q4_0_decode(const void* w, const void* x, void* res) {
  const auto& v = *static_cast<const QuantWeightView*>(w);
  tile_of<QuantKind::Q4, 1>(w, Packed<QuantKind::Q4>{v, v.k / 32}, x, res);
}
extern "C" void est_q4_0_prefill(const void* w, const int8_t* scratch, const void* x, void* res) {
  const auto& v = *static_cast<const QuantWeightView*>(w);
  tile_of<QuantKind::Q4, 4>(w, Unpacked{scratch, 0, 32 * (v.k / 32)}, x, res);
}
// The 8-bit kinds read int8 weights straight from the view: the tile takes a source argument it never uses.
extern "C" void est_q8_0_decode(const void* w, const void* x, void* res) {
  tile_of<QuantKind::Q8, 1>(w, Unpacked{nullptr, 0, 0}, x, res);
}
extern "C" void est_q8_0_prefill(const void* w, const void* x, void* res) {
  tile_of<QuantKind::Q8, 4>(w, Unpacked{nullptr, 0, 0}, x, res);
}
