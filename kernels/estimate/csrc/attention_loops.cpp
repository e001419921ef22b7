// Decode attention's inner loops (core/attention_micro.h) with a bf16 KV cache, as run_tile calls them: QK^T
// for one query row at a time against a run of keys (NEON keeps one row: kQkRows), and P.V for a row group.
// D is fixed per function (the template argument NC, as attention.cpp's dispatch on head size gives it).
// Compiled to assembly only, never linked.
#include "../../csrc/core/attention_micro.h"

using namespace llmchat;
using namespace llmchat::attn;

namespace {
// What run_tile picks for a bf16 cache with D % 32 == 0: q stays bf16 with BFDOT; without it q is widened to
// fp32 once per query row and only the keys are widened (FloatDot).
template <int D>
void qk(const void* q, int rows, const bf16_t* k, int n, float* S, Prefetch& pf) {
#ifdef LLMCHAT_NATIVE_BF16_DOT
  qk_all<Bf16Dot, D / 32>(static_cast<const bf16_t*>(q), rows, D, k, n, S, 80, pf);
#else
  qk_all<FloatDot<bf16_t>, D / 16>(static_cast<const float*>(q), rows, D, k, n, S, 80, pf);
#endif
}
template <int D>
void pv(const void* P, int rows, const KeyRun<bf16_t>* runs, int num_runs, float* acc, Prefetch& pf) {
#ifdef LLMCHAT_NATIVE_BF16_DOT
  pv_bf16_all(static_cast<const bf16_t*>(P), 80, rows, runs, num_runs, D, acc, pf);  // P rounded to bf16
#else
  pv_all<D / 16>(static_cast<const float*>(P), 80, rows, runs, num_runs, D, acc, pf);  // fp32 P, V widened
#endif
}
}  // namespace

extern "C" void est_qk_d64(const void* q, int rows, const bf16_t* k, int n, float* S, Prefetch& pf) { qk<64>(q, rows, k, n, S, pf); }
extern "C" void est_qk_d128(const void* q, int rows, const bf16_t* k, int n, float* S, Prefetch& pf) { qk<128>(q, rows, k, n, S, pf); }
extern "C" void est_pv_d64(const void* P, int rows, const KeyRun<bf16_t>* runs, int nr, float* acc, Prefetch& pf) { pv<64>(P, rows, runs, nr, acc, pf); }
extern "C" void est_pv_d128(const void* P, int rows, const KeyRun<bf16_t>* runs, int nr, float* acc, Prefetch& pf) { pv<128>(P, rows, runs, nr, acc, pf); }
