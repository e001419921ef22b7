"""Typed wrappers over torch.ops.llmchat.*: allocate outputs, normalise scalars, return results."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ._loader import require


def _ops():
    require()
    return torch.ops.llmchat


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int = -1,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of a varlen batch over a paged KV cache (decode, prefill, chunked, prefix hits).

    query [T, Hq, D]; caches [num_blocks, Hkv, block_size, D] or, grouped so that a sequence's consecutive
    blocks of a group are one run per head, [num_groups, Hkv, blocks_per_group, block_size, D] (block b is
    group b // blocks_per_group, position b % blocks_per_group); block_tables int32 [S, max_blocks];
    seq_lens int32 [S] (tokens after this step); query_start_loc int32 [S + 1]. Returns out [T, Hq, D].
    """
    ops = _ops()
    if out is None:
        out = torch.empty_like(query, memory_format=torch.contiguous_format)
    ops.paged_attention(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, float(scale),
                        int(sliding_window), out)
    return out


def write_kv_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """Stores key/value [T, Hkv, D] at slot = block * block_size + offset (slot -1 = skip)."""
    _ops().write_kv_cache(key, value, key_cache, value_cache, slot_mapping)


def copy_blocks(key_caches: Sequence[torch.Tensor], value_caches: Sequence[torch.Tensor],
                block_mapping: torch.Tensor) -> None:
    """For every layer's cache, copies block src to block dst for each row (src, dst) of block_mapping."""
    _ops().copy_blocks(list(key_caches), list(value_caches), block_mapping)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """RMSNorm over the last dim of x [T, H], computed in fp32 like HF."""
    ops = _ops()
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    ops.rms_norm(x, weight, float(eps), out)
    return out


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """In place: residual += x; x = rms_norm(residual) * weight."""
    _ops().fused_add_rms_norm(x, residual, weight, float(eps))


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor,
                     head_size: int, is_neox: bool = True) -> None:
    """Rotates query [T, Hq*D] / [T, Hq, D] and key in place; cos_sin_cache fp32 [max_pos, rot_dim] = cat(cos, sin)."""
    _ops().rotary_embedding(positions, query, key, cos_sin_cache, int(head_size), bool(is_neox))


def _gated_and_mul(name: str, x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """The shared shape of the gated activations: x [T, 2I] -> act(x[:, :I]) * x[:, I:] of shape [T, I]."""
    op = getattr(_ops(), name)
    if out is None:
        if x.dim() != 2 or x.shape[-1] % 2:
            raise ValueError(f"llmchat.kernels.{name}: x must be [T, 2*I], got shape {tuple(x.shape)}")
        out = torch.empty(x.shape[0], x.shape[1] // 2, dtype=x.dtype, device=x.device)
    op(x, out)
    return out


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, 2I] -> silu(x[:, :I]) * x[:, I:] of shape [T, I]."""
    return _gated_and_mul("silu_and_mul", x, out)


def gelu_tanh_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, 2I] -> gelu_tanh(x[:, :I]) * x[:, I:] of shape [T, I] (Gemma's GeGLU)."""
    return _gated_and_mul("gelu_tanh_and_mul", x, out)


def read_sum(x: torch.Tensor) -> float:
    """Sum of a contiguous fp32 tensor, read with vector loads on every thread: the benchmark's memory
    read probe (the fastest plain read of memory this code does, next to which the kernels are measured)."""
    return _ops().read_sum(x)


def read_runs_sum(x: torch.Tensor, run_starts: torch.Tensor, run_floats: int) -> float:
    """Sum of the runs x[s : s + run_floats] for s in run_starts (int64), read in that order with software
    prefetch the way paged attention reads K/V: the benchmark's probe for scattered reads."""
    return _ops().read_runs_sum(x, run_starts, run_floats)
