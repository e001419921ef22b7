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


def plan_hybrid_kv_blocks(kv_cache_gb: float | None, full_bytes: int, window_bytes: int, window_need: int,
                          block_size: int, max_num_seqs: int, max_model_len: int) -> tuple[int, int, float]:
    """Returns (full-layer blocks, sliding-window-layer blocks, GiB they take) for a model with both kinds
    (hybrid_blocks.py). The window pool gets twice what the running sequences' windows can hold at once
    (window_need; the rest keeps recent windows for prefix hits), the full pool the remaining memory. When
    that is no smaller than splitting evenly, both pools get the same count: a sequence's live window blocks
    are a subset of its full ones, so the window pool then never runs out first."""
    gb = kv_cache_gb if kv_cache_gb is not None else default_kv_cache_gb()
    budget = int(gb * GIB)
    most = max_num_seqs * -(-max_model_len // block_size)
    even = min(budget // (full_bytes + window_bytes), most)
    if even < 1:
        raise ValueError(f"kv_cache_gb={gb} is smaller than one KV block ({full_bytes + window_bytes} bytes)")
    if 2 * window_need >= even:
        return even, even, even * (full_bytes + window_bytes) / GIB
    window_blocks = 2 * window_need
    full_blocks = min((budget - window_blocks * window_bytes) // full_bytes, most)
    return full_blocks, window_blocks, (full_blocks * full_bytes + window_blocks * window_bytes) / GIB
