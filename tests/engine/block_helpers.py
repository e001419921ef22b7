"""Shared helpers of the block manager tests: sequences and what a step does to a prompt's blocks."""
from __future__ import annotations

from llmchat.engine.block_manager import BlockManager
from llmchat.engine.sampling_params import SamplingParams
from llmchat.engine.sequence import Sequence


def seq_of(tokens, adapter=None) -> Sequence:
    return Sequence(list(tokens), SamplingParams(max_tokens=8), adapter=adapter)


def run_prefill(bm: BlockManager, seq: Sequence) -> None:
    """What the scheduler + runner do for a whole prompt: match, allocate, compute, register."""
    bm.match_prefix(seq)
    bm.record_lookup(seq)
    bm.allocate(seq, seq.num_uncomputed_tokens)
    seq.num_computed_tokens = seq.num_tokens
    bm.register_full_blocks(seq)
