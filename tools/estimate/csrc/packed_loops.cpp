// The packed bf16 panels' inner loops (core/packed_linear.cpp) for the estimator, on cores with bf16 where the
// engine packs: packed_linear.cpp is included whole so its internal templates can be named. One block of the
// panel instance's kPanels panels (16 rows each) x 1 token (decode) or x kTokens (the BFDOT token block), and
// the BFMMLA block (vec/panel_bfmmla.h: kGroups 4-row groups x kPairs token pairs) that steps of two or more
// tokens run. Compiled to assembly only (never linked); tools/estimate/asm_loop.py finds the hot loop in each.
#include "core/packed_linear.cpp"

using llmchat::LinearArgs;
namespace panel = llmchat::panel;

extern "C" void est_packed_bf16_decode(const LinearArgs& a) { llmchat::packed_block<panel::kPanels, 1>(a, 0, 0); }
extern "C" void est_packed_bf16_batch(const LinearArgs& a) {
  llmchat::packed_block<panel::kPanels, panel::kTokens>(a, 0, 0);
}
extern "C" void est_packed_bf16_bfmmla(const LinearArgs& a, const panel::mmla::TokenPairs& xp) {
  llmchat::mmla_block<panel::mmla::kGroups, panel::mmla::kPairs>(a, xp, 0, 0, 0);
}
