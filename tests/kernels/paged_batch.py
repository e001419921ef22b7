"""Builds random paged-KV batches and the pure-torch reference (SDPA on gathered K/V) for the tests."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PagedBatch:
    query: torch.Tensor          # [T, Hq, D]
    key_cache: torch.Tensor      # [num_blocks, Hkv, bs, D] or grouped [num_groups, Hkv, blocks_per_group, bs, D]
    value_cache: torch.Tensor
    block_tables: torch.Tensor   # int32 [S, max_blocks]
    seq_lens: torch.Tensor       # int32 [S]
    query_start_loc: torch.Tensor  # int32 [S + 1]
    scale: float

    def args(self):
        return (self.query, self.key_cache, self.value_cache, self.block_tables, self.seq_lens,
                self.query_start_loc, self.scale)


def make_batch(seqs: list[tuple[int, int]], num_q_heads: int, num_kv_heads: int, head_size: int, block_size: int,
               dtype: torch.dtype, seed: int = 0, extra_blocks: int = 3, blocks_per_group: int = 1,
               shuffled: bool = True) -> PagedBatch:
    """seqs: (q_len, seq_len) per sequence. Blocks are handed out in a shuffled order, like a real cache
    (shuffled=False: in order, so each sequence holds runs of consecutive blocks)."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [(ctx + block_size - 1) // block_size for _, ctx in seqs]
    num_blocks = -(-(sum(blocks_per_seq) + extra_blocks) // blocks_per_group) * blocks_per_group
    order = (torch.randperm(num_blocks, generator=gen) if shuffled else torch.arange(num_blocks)).to(torch.int32)
    max_blocks = max(blocks_per_seq) + 1
    tables = torch.full((len(seqs), max_blocks), -7, dtype=torch.int32)  # junk past the used blocks
    used = 0
    for s, n in enumerate(blocks_per_seq):
        tables[s, :n] = order[used:used + n]
        used += n
    shape = (num_blocks, num_kv_heads, block_size, head_size)
    if blocks_per_group > 1:
        shape = (num_blocks // blocks_per_group, num_kv_heads, blocks_per_group, block_size, head_size)
    key_cache = torch.randn(shape, generator=gen).to(dtype)
    value_cache = torch.randn(shape, generator=gen).to(dtype)
    q_lens = [q for q, _ in seqs]
    query = torch.randn(sum(q_lens), num_q_heads, head_size, generator=gen).to(dtype)
    qsl = torch.zeros(len(seqs) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(q_lens), 0)
    seq_lens = torch.tensor([ctx for _, ctx in seqs], dtype=torch.int32)
    return PagedBatch(query, key_cache, value_cache, tables, seq_lens, qsl, head_size ** -0.5)


def plain_blocks(cache: torch.Tensor) -> torch.Tensor:
    """Any cache as [num_blocks, Hkv, bs, D] (a copy for a grouped one): block b = group b // G, place b % G."""
    if cache.dim() == 4:
        return cache
    groups, hkv, per_group, bs, d = cache.shape
    return cache.transpose(1, 2).reshape(groups * per_group, hkv, bs, d)


def gather_kv(cache: torch.Tensor, table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The first seq_len tokens of a sequence from the paged cache: [seq_len, Hkv, D]."""
    cache = plain_blocks(cache)
    bs = cache.shape[2]
    n = (seq_len + bs - 1) // bs
    blocks = cache[table[:n].long()]  # [n, Hkv, bs, D]
    return blocks.permute(0, 2, 1, 3).reshape(n * bs, cache.shape[1], cache.shape[3])[:seq_len]


def reference_attention(b: PagedBatch, sliding_window: int = -1) -> torch.Tensor:
    """fp32 SDPA per sequence with the causal (and sliding-window) mask of the paged op."""
    out = torch.empty(b.query.shape, dtype=torch.float32)
    hq, hkv = b.query.shape[1], b.key_cache.shape[1]
    for s in range(b.seq_lens.numel()):
        q0, q1, ctx = int(b.query_start_loc[s]), int(b.query_start_loc[s + 1]), int(b.seq_lens[s])
        if q1 == q0:
            continue
        k = gather_kv(b.key_cache, b.block_tables[s], ctx).float().repeat_interleave(hq // hkv, dim=1)
        v = gather_kv(b.value_cache, b.block_tables[s], ctx).float().repeat_interleave(hq // hkv, dim=1)
        q = b.query[q0:q1].float()
        q_pos = torch.arange(ctx - (q1 - q0), ctx)[:, None]
        k_pos = torch.arange(ctx)[None, :]
        mask = k_pos <= q_pos
        if sliding_window > 0:
            mask &= (q_pos - k_pos) < sliding_window
        o = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, scale=b.scale)
        out[q0:q1] = o.transpose(0, 1)
    return out
