"""Paged attention over a paged KV cache (one K and one V per layer), laid out [num_blocks, Hkv, block_size, D]
or grouped [num_groups, Hkv, blocks_per_group, block_size, D] (block b = group b // G, place b % G).

Two backends with the same semantics: "torch" (pure-torch reference, the oracle in tests) and "kernels"
(llmchat.kernels). Query token i of sequence s (q_len tokens this step, seq_lens[s] tokens in total after the
step) sits at position seq_lens[s] - q_len + i and attends to positions <= its own (and, with a sliding
window W, to positions > its own - W, like transformers).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass
class AttentionMetadata:
    """One flat varlen batch, built once per step by the model runner and shared by all layers."""
    positions: torch.Tensor         # int64 [T]
    slot_mapping: torch.Tensor      # int64 [T]: block * block_size + offset
    query_start_loc: torch.Tensor   # int32 [S+1]
    seq_lens: torch.Tensor          # int32 [S]: tokens of each sequence after this step
    block_tables: torch.Tensor      # int32 [S, max_blocks] (padded with 0)
    query_lens: list[int]           # host copies, so no .item() in the layers
    seq_lens_list: list[int]
    block_size: int
    # The sliding-window layers' tables and slots when they have a pool of their own (hybrid_blocks.py)
    window: "AttentionMetadata | None" = None
    _torch_plan: dict = field(default_factory=dict, repr=False)

    def for_window(self, window: int) -> "AttentionMetadata":
        """The metadata a layer with this sliding window (-1: none) reads and writes its KV by."""
        return self.window if window > 0 and self.window is not None else self


def _window_mask(q_len: int, kv_len: int, window: int) -> torch.Tensor | None:
    """Bool [q_len, kv_len] (True = attend), or None when plain causal with no offset suffices."""
    if window <= 0 and q_len == kv_len:
        return None
    q_pos = torch.arange(kv_len - q_len, kv_len)[:, None]
    k_pos = torch.arange(kv_len)[None, :]
    mask = k_pos <= q_pos
    if window > 0:
        mask &= k_pos > q_pos - window
    return mask


def _block_index(cache: torch.Tensor, blocks: torch.Tensor) -> tuple:
    """Index selecting blocks (any shape) from a plain or grouped cache: cache[index] is [*blocks.shape, Hkv, bs, D]."""
    if cache.dim() == 4:
        return (blocks,)
    per_group = cache.shape[2]
    # two advanced indices split by a slice: their broadcast dims come first, then Hkv, bs, D
    return (torch.div(blocks, per_group, rounding_mode="floor"), slice(None), blocks % per_group)


class TorchAttention:
    """Gather K/V by block table, then SDPA: all decodes (q_len 1) in one batched call, prefills one by one."""

    name = "torch"

    def __init__(self, scale: float, sliding_window: int = -1) -> None:
        self.scale = scale
        self.window = sliding_window

    def _plan(self, md: AttentionMetadata) -> dict:
        plan = md._torch_plan.get(self.window)
        if plan is not None:
            return plan
        starts = md.query_start_loc.tolist()
        decode_rows = [s for s, q in enumerate(md.query_lens) if q == 1]
        plan = {"prefills": [], "decode": None, "all_decode": len(decode_rows) == len(md.query_lens)}
        if decode_rows:
            rows = torch.tensor(decode_rows, dtype=torch.long)
            lens = md.seq_lens.long().index_select(0, rows)
            blocks = md.block_tables.long().index_select(0, rows)
            kv_cap = blocks.shape[1] * md.block_size
            k_pos = torch.arange(kv_cap)[None, :]
            mask = k_pos < lens[:, None]
            if self.window > 0:
                mask &= k_pos > (lens[:, None] - 1 - self.window)
            tokens = torch.tensor([starts[s] for s in decode_rows], dtype=torch.long)
            plan["decode"] = (tokens, blocks, mask[:, None, None, :])
        for s, q_len in enumerate(md.query_lens):
            if q_len == 1:
                continue
            kv_len = md.seq_lens_list[s]
            n_blocks = -(-kv_len // md.block_size)
            plan["prefills"].append((starts[s], q_len, kv_len, md.block_tables[s, :n_blocks].long(),
                                     _window_mask(q_len, kv_len, self.window)))
        md._torch_plan[self.window] = plan
        return plan

    @staticmethod
    def write_kv(key, value, key_cache, value_cache, md: AttentionMetadata) -> None:
        where = md._torch_plan.get("slots")
        if where is None:  # once per step, shared by all layers
            blocks = torch.div(md.slot_mapping, md.block_size, rounding_mode="floor")
            where = md._torch_plan["slots"] = (blocks, md.slot_mapping - blocks * md.block_size)
        blocks, offsets = where
        index = (*_block_index(key_cache, blocks), offsets)
        key_cache[index] = key
        value_cache[index] = value

    def forward(self, query, key_cache, value_cache, md: AttentionMetadata) -> torch.Tensor:
        """query [T, Hq, D] -> [T, Hq, D]."""
        plan = self._plan(md)
        hkv, d = key_cache.shape[1], key_cache.shape[-1]
        out = query if plan["all_decode"] else torch.empty_like(query)
        if plan["decode"] is not None:
            tokens, blocks, mask = plan["decode"]
            n = blocks.shape[0]
            index = _block_index(key_cache, blocks)
            k = key_cache[index].transpose(1, 2).reshape(n, hkv, -1, d)
            v = value_cache[index].transpose(1, 2).reshape(n, hkv, -1, d)
            q = query.unsqueeze(2) if plan["all_decode"] else query.index_select(0, tokens).unsqueeze(2)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=True)
            if plan["all_decode"]:
                return o.squeeze(2)
            out.index_copy_(0, tokens, o.squeeze(2))
        for start, q_len, kv_len, blocks, mask in plan["prefills"]:
            index = _block_index(key_cache, blocks)
            k = key_cache[index].transpose(0, 1).reshape(hkv, -1, d)[:, :kv_len]
            v = value_cache[index].transpose(0, 1).reshape(hkv, -1, d)[:, :kv_len]
            q = query[start:start + q_len].transpose(0, 1)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                               scale=self.scale, enable_gqa=True)
            out[start:start + q_len] = o.transpose(0, 1)
        return out


class KernelAttention:
    """llmchat.kernels.write_kv_cache + paged_attention: one call each for the whole mixed batch."""

    name = "kernels"

    def __init__(self, kernels, scale: float, sliding_window: int = -1) -> None:
        self.k = kernels
        self.scale = float(scale)
        self.window = int(sliding_window)
        # the registered ops directly (schemas in the contract): no wrapper checks per layer per step
        self._write = torch.ops.llmchat.write_kv_cache.default
        self._attend = torch.ops.llmchat.paged_attention.default

    def write_kv(self, key, value, key_cache, value_cache, md: AttentionMetadata) -> None:
        self._write(key, value, key_cache, value_cache, md.slot_mapping)

    def forward(self, query, key_cache, value_cache, md: AttentionMetadata) -> torch.Tensor:
        out = torch.empty_like(query)
        self._attend(query, key_cache, value_cache, md.block_tables, md.seq_lens, md.query_start_loc,
                     self.scale, self.window, out)
        return out


def make_attention(kernels, scale: float, sliding_window: int = -1):
    """The backend for one layer: kernels when the module is given, else the torch reference."""
    if kernels is not None:
        return KernelAttention(kernels, scale, sliding_window)
    return TorchAttention(scale, sliding_window)
