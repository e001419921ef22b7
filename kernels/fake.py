"""Fake (meta) implementations of the ops, so torch.compile / opcheck can trace them without running.

Every op writes into arguments it was given (`Tensor(a!)` in the schema) and returns nothing,
so the fake implementations only have to exist. read_sum and read_runs_sum (the benchmark's memory probes)
return a number computed from the data, which no fake can stand for: they have none and are never traced.
"""
from __future__ import annotations

import torch

_MUTATING_OPS = (
    "paged_attention",
    "write_kv_cache",
    "copy_blocks",
    "rms_norm",
    "fused_add_rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "gelu_tanh_and_mul",
    "lora_apply",
    "decoder_stack",
)


def _no_output(*args, **kwargs) -> None:
    return None


def register() -> None:
    for name in _MUTATING_OPS:
        torch.library.register_fake(f"llmchat::{name}", _no_output)
