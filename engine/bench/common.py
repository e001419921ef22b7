"""What the benchmarks share: seeded prompts of token ids, fixed-length greedy requests, a baseline's environment."""
from __future__ import annotations

import os

import torch

from ..sampling_params import SamplingParams


def prompt_ids(n: int, seed: int, vocab: int) -> list[int]:
    """n random token ids, the same for a seed (ids below 100 left out: special tokens sit there)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(100, min(vocab, 30000) - 1, (n,), generator=g).tolist()


def fixed_length(n: int) -> SamplingParams:
    """Greedy, exactly n new tokens: every engine does the same work."""
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def baseline_env() -> dict:
    """The environment of a baseline's process: llmchat's own OMP_WAIT_POLICY=PASSIVE (tui/cli/__init__.py) makes every
    OpenMP barrier sleep, which costs transformers and llama.cpp (an OpenMP build) most of their speed."""
    return {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
