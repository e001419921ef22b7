// Decode attention's inner loops (core/attention_micro.h) with a bf16 KV cache, as run_tile calls them: QK^T
// for one query row at a time against a run of keys (NEON keeps one row: kQkRows), and P.V for a row group.
// D is fixed per function (the template argument NC, as attention.cpp's dispatch on head size gives it).
// Where the core has bf16 the engine runs every bf16 row on BFMMLA tiles instead (core/attention_bfmmla.h): its
// QK block (row pairs x key pairs, one 8-d step a trip) and P.V block (row pairs x column pairs, 8 keys a trip).
// Compiled to assembly only, never linked.
#include "core/attention_bfmmla.h"
#include "core/attention_micro.h"

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

#if defined(LLMCHAT_HAS_BFMMLA)
// The main blocks of mmla_attn::qk and ::pv (the remainders for a few row pairs are smaller blocks of the same loops).
namespace mm = llmchat::attn::mmla_attn;
template <int D>
void qk_bfmmla(const mm::Scratch& s, const bf16_t* q, int nk, float* S, Prefetch& pf) {
  mm::qk_rows<mm::kQkPairs, mm::kQkKeyPairs>(s, q, 0, 2 * mm::kQkPairs, nk, D, S, 80, &pf);
}
template <int D>
void pv_bfmmla(const bf16_t* P, const bf16_t* values, int n, float* acc) {
  for (int e0 = 0; e0 < D / 2; e0 += mm::kPvColPairs) mm::pv_block<mm::kPvPairs, mm::kPvColPairs>(P, 80, values, n, D, e0, acc, 2 * mm::kPvPairs);
}
// One row pair (decode with a group of one or two query heads): QK 1 x 8 key pairs, P.V 1 x 16 column pairs.
extern "C" void est_qk_bfmmla_pair_d128(const mm::Scratch& s, const bf16_t* q, int nk, float* S, Prefetch& pf) {
  mm::qk_rows<1, mm::kQkLoneKeyPairs>(s, q, 0, 2, nk, 128, S, 80, &pf);
}
extern "C" void est_pv_bfmmla_pair_d128(const bf16_t* P, const bf16_t* values, int n, float* acc) {
  for (int e0 = 0; e0 < 64; e0 += mm::kPvLoneColPairs) mm::pv_block<1, mm::kPvLoneColPairs>(P, 80, values, n, 128, e0, acc, 2);
}
extern "C" void est_qk_bfmmla_d64(const mm::Scratch& s, const bf16_t* q, int nk, float* S, Prefetch& pf) { qk_bfmmla<64>(s, q, nk, S, pf); }
extern "C" void est_qk_bfmmla_d128(const mm::Scratch& s, const bf16_t* q, int nk, float* S, Prefetch& pf) { qk_bfmmla<128>(s, q, nk, S, pf); }
extern "C" void est_pv_bfmmla_d64(const bf16_t* P, const bf16_t* values, int n, float* acc) { pv_bfmmla<64>(P, values, n, acc); }
extern "C" void est_pv_bfmmla_d128(const bf16_t* P, const bf16_t* values, int n, float* acc) { pv_bfmmla<128>(P, values, n, acc); }
#endif
