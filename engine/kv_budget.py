"""How much memory the paged KV cache gets, in blocks."""
from __future__ import annotations

import psutil

GIB = 1 << 30


def default_kv_cache_gb(available_bytes: int | None = None) -> float:
    """A quarter of the RAM available now, at least 0.25 GiB and at most 8 GiB."""
    if available_bytes is None:
        available_bytes = psutil.virtual_memory().available
    return min(max(0.25, 0.25 * available_bytes / GIB), 8.0)


def plan_kv_blocks(kv_cache_gb: float | None, block_bytes: int, block_size: int, max_num_seqs: int,
                   max_model_len: int) -> tuple[int, float]:
    """Returns (number of blocks, GiB they take), capped to what max_num_seqs full-length sequences
    could ever use (memory beyond that would only hold more cached prefixes)."""
    gb = kv_cache_gb if kv_cache_gb is not None else default_kv_cache_gb()
    num_blocks = int(gb * GIB // block_bytes)
    num_blocks = min(num_blocks, max_num_seqs * -(-max_model_len // block_size))
    if num_blocks < 1:
        raise ValueError(f"kv_cache_gb={gb} is smaller than one KV block ({block_bytes} bytes)")
    return num_blocks, num_blocks * block_bytes / GIB
