// The decode GEMV's inner loops (core/gemv.cpp), instantiated as the engine runs them, for the estimator:
// gemv.cpp is included whole so its internal templates can be named; each est_* function is one tile shape.
// Compiled to assembly only (never linked); tools/estimate/asm_loop.py finds the hot loop in each function.
#include "core/gemv.cpp"

using llmchat::LinearArgs;
using llmchat::bf16_t;

// 4 weight rows x 1 token: a decode step (on NEON kTok is 1, so every step size runs this shape).
extern "C" void est_gemv_bf16(const LinearArgs& a) { llmchat::block<bf16_t, 4, 1>(a, 0, 0); }
extern "C" void est_gemv_f32(const LinearArgs& a) { llmchat::block<float, 4, 1>(a, 0, 0); }
