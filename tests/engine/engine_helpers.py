"""Shared helpers of the engine tests: transformers' greedy reference and prompt sets."""
from __future__ import annotations

import functools

import torch
from transformers import AutoModelForCausalLM


@functools.lru_cache(maxsize=8)
def hf_model(folder: str):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


@functools.lru_cache(maxsize=512)
def _hf_greedy(folder: str, ids: tuple[int, ...], max_new: int) -> tuple[int, ...]:
    model = hf_model(folder)
    x = torch.tensor([ids])
    with torch.inference_mode():
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=max_new)
    return tuple(out[0, len(ids):].tolist())


def hf_greedy(folder, ids: list[int], max_new: int) -> list[int]:
    """transformers' greedy generate on one prompt (stops at the model's EOS ids, like the engine)."""
    return list(_hf_greedy(str(folder), tuple(ids), max_new))


def random_prompt(n: int, seed: int, low: int = 3, high: int = 300) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (n,), generator=g).tolist()


# Varied lengths: shorter and longer than a block (16), and several blocks long.
LENGTHS = [3, 17, 40, 9, 64, 31, 100, 5]
