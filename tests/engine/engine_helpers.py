"""Shared helpers of the engine tests: transformers' greedy reference and prompt sets."""
from __future__ import annotations

import functools

import torch
from transformers import AutoModelForCausalLM


@functools.lru_cache(maxsize=8)
def hf_model(folder: str):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


@functools.lru_cache(maxsize=512)
def _hf_greedy(folder: str, ids: tuple[int, ...], max_new: int, ignore_eos: bool) -> tuple[int, ...]:
    model = hf_model(folder)
    x = torch.tensor([ids])
    extra = {"eos_token_id": None} if ignore_eos else {}
    with torch.inference_mode():
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=max_new,
                             **extra)
    return tuple(out[0, len(ids):].tolist())


def hf_greedy(folder, ids: list[int], max_new: int, ignore_eos: bool = False) -> list[int]:
    """transformers' greedy generate on one prompt (stops at the model's EOS ids, like the engine)."""
    return list(_hf_greedy(str(folder), tuple(ids), max_new, ignore_eos))


def random_prompt(n: int, seed: int, low: int = 3, high: int = 300) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (n,), generator=g).tolist()


# Varied lengths: shorter and longer than a block (16), and several blocks long.
LENGTHS = [3, 17, 40, 9, 100, 5]


def kv_gb_for_blocks(folder, num_blocks: int, block_size: int = 16, itemsize: int = 4) -> float:
    """kv_cache_gb that buys exactly num_blocks KV blocks for this model folder."""
    import json
    from pathlib import Path
    c = json.loads((Path(folder) / "config.json").read_text())
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    block_bytes = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * block_size * head_dim * itemsize
    return num_blocks * block_bytes / 2**30
