"""How close a quantized model's next-token distributions are to a reference's over a fixed text: mean KL
divergence KL(reference || model) and top-1 agreement, position by position (what llama.cpp's perplexity
tool reports with --kl-divergence)."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from ..sequence import ScheduledChunk

# A fixed English text (public-domain style prose) the quality figures are measured over.
TEXT = (
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk. From the lamp room he could see "
    "the whole bay: the fishing boats returning with the tide, the gulls circling above the harbour, and the "
    "long line of cliffs that ran north toward the city. He had kept the light for thirty years, through storms "
    "that shook the glass and calm nights when the sea lay flat as a mirror. Each night he trimmed the wick, "
    "polished the lens and wrote a line in the logbook: the weather, the ships that passed, anything unusual. "
    "Most entries were short. Wind from the west, two trawlers, a ferry. But some nights were different. Once "
    "he saw a ship with no lights drifting past the rocks, and he rang the bell until the coast guard answered. "
    "Another time a child's kite, bright red, came down on the gallery rail, and he kept it for a week before "
    "a family from the village came to ask for it. Science tells us that light travels at about three hundred "
    "thousand kilometres per second, yet to the sailors far out at sea, the beam seemed to arrive slowly, "
    "sweeping across the water like a patient hand. In the morning he would walk down to the village for bread "
    "and news, then sleep until the afternoon, and the cycle began again."
)


def sequence_logits(llm, token_ids: list[int]) -> torch.Tensor:
    """fp32 logits [T, vocab] of the engine's model over one sequence, prefilled in one step: row i predicts
    token i + 1. Uses the start of the KV cache (call it on an idle engine)."""
    runner = llm.engine.runner
    bs = runner.block_size
    blocks = list(range(-(-len(token_ids) // bs)))
    smallest = min(runner.num_blocks, runner.window_blocks or runner.num_blocks)   # one step reads all blocks
    if len(blocks) > smallest:
        raise ValueError(f"the text needs {len(blocks)} KV blocks, the cache has {smallest}")
    seq = SimpleNamespace(token_ids=list(token_ids), num_computed_tokens=0, block_table=blocks,
                          window_table=blocks if runner.window_blocks else [])
    chunk = ScheduledChunk(seq, len(token_ids))
    with torch.inference_mode():
        input_ids, md, _rows = runner.prepare([chunk])
        return runner.model(input_ids, md, list(zip(runner.key_caches, runner.value_caches)), None).float()


def compare(reference: torch.Tensor, model: torch.Tensor) -> dict:
    """{"kl_divergence": mean over positions, "top1_agreement": share of positions with the same argmax}."""
    ref_logp, logp = torch.log_softmax(reference.double(), -1), torch.log_softmax(model.double(), -1)
    kl = (ref_logp.exp() * (ref_logp - logp)).sum(-1)
    same = (reference.argmax(-1) == model.argmax(-1)).double()
    return {"kl_divergence": kl.mean().item(), "top1_agreement": same.mean().item(), "positions": reference.shape[0]}
