"""KV blocks for models that mix full-attention and sliding-window layers (Gemma 3: five local layers to one
global), so the local layers' KV is not kept for the whole context.

Two pools of blocks, each a BlockManager: one for the full layers (seq.block_table, as for every other
model) and one for the sliding-window layers (seq.window_table, the same block index). After each step a
sequence lets go of the window blocks no future token of it can see; they stay in the prefix cache (LRU)
under the same chained hashes as the full blocks. A prefix hit then needs the full blocks of the whole
prefix and the window blocks of its last window only; the longest prefix with both is reused.

"Can see" follows the attention kernel, which walks keys from the chunk holding the window's first key
(kernels/csrc/core/attention.cpp key_range): a block is let go only when it lies wholly before that chunk,
so no kernel ever reads a block that was let go (the table holds 0 there). A model whose layers all slide
keeps one pool and reads its window only (a mask); this is for the mixed case.
"""
from __future__ import annotations

from .block_manager import BlockManager
from .sequence import Sequence

KERNEL_CHUNK_KEYS = 64   # kChunkKeys in kernels/csrc/core/attention_tile.h


def attention_chunk_keys(block_size: int) -> int:
    """Keys per chunk of the attention kernel's walk: a whole number of blocks (attention_tile.h chunk_keys)."""
    return max(block_size, KERNEL_CHUNK_KEYS // block_size * block_size)


def window_pool_blocks(window: int, block_size: int, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """Window blocks that max_num_seqs sequences can hold at once: each its window, from a chunk edge, plus
    the step's new tokens (at most max_num_batched_tokens over all of them)."""
    per_seq = -(-(window + attention_chunk_keys(block_size)) // block_size) + 2   # + the partial ends
    return max_num_seqs * per_seq + -(-max_num_batched_tokens // block_size)


class WindowBlockManager(BlockManager):
    """The sliding-window layers' pool: the same blocks, LRU and hashes as BlockManager, over seq.window_table."""

    def __init__(self, num_blocks: int, block_size: int, window: int, enable_prefix_caching: bool = True,
                 blocks_per_group: int = 1):
        super().__init__(num_blocks, block_size, enable_prefix_caching, blocks_per_group)
        self.window = window
        self.chunk = attention_chunk_keys(block_size)

    def first_needed(self, position: int) -> int:
        """Index of the first block a query at `position` (or later) reads."""
        return max(0, position - self.window + 1) // self.chunk * self.chunk // self.block_size

    def new_blocks(self, seq: Sequence, num_new_tokens: int) -> int:
        return max(0, self.blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.window_table))

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        table = seq.window_table
        for _ in range(self.new_blocks(seq, num_new_tokens)):
            table.append(self._fresh_block(table[-1] if len(table) > seq.window_start else None))

    def let_go(self, seq: Sequence) -> None:
        """Release the blocks before the window of seq's next token (tail first, as free does)."""
        table, first = seq.window_table, min(self.first_needed(seq.num_computed_tokens), len(seq.window_table))
        for i in range(first - 1, seq.window_start - 1, -1):
            self._drop(table[i])
            table[i] = 0
        seq.window_start = max(seq.window_start, first)

    def register_window(self, seq: Sequence, start: int) -> None:
        """Cache the live window blocks from index `start` that seq.block_hashes now names."""
        for i in range(max(start, seq.window_start), min(len(seq.block_hashes), len(seq.window_table))):
            self.register(seq.window_table[i], seq.block_hashes[i], self.block_tokens(seq, i), seq.adapter_key)

    def cached_window(self, seq: Sequence, num_blocks: int) -> list[int] | None:
        """The cached window blocks a prefix of num_blocks full blocks needs, or None if one is missing."""
        found = []
        for i in range(self.first_needed(num_blocks * self.block_size), num_blocks):
            block_id = self.cached_block(seq.block_hashes[i], self.block_tokens(seq, i), seq.adapter_key)
            if block_id is None:
                return None
            found.append(block_id)
        return found

    def take(self, seq: Sequence, num_blocks: int, block_ids: list[int]) -> None:
        start = num_blocks - len(block_ids)
        for block_id in block_ids:
            self._take(self.blocks[block_id])
        seq.window_table = [0] * start + block_ids
        seq.window_start = start

    def free(self, seq: Sequence) -> None:
        for block_id in reversed(seq.window_table[seq.window_start:]):
            self._drop(block_id)
        seq.window_table = []
        seq.window_start = 0


class HybridBlockManager:
    """What the scheduler and engine call on a BlockManager, over a full pool and a window pool."""

    def __init__(self, full: BlockManager, window: WindowBlockManager, block_bytes: tuple[int, int]):
        """block_bytes: bytes of one block in each pool (for the usage gauge)."""
        assert full.block_size == window.block_size
        self.full, self.window, self.block_bytes = full, window, block_bytes
        self.block_size = full.block_size
        self.enable_prefix_caching = full.enable_prefix_caching

    # ---- capacity: a sequence's length is bounded by the full pool; the window pool bounds a step ----------
    @property
    def num_blocks(self) -> int:
        return self.full.num_blocks

    @property
    def num_used_blocks(self) -> int:
        """Use of both pools, in full-pool blocks: the share of the cache's bytes in use (the gauge's meaning)."""
        return round(self.usage * self.full.num_blocks)

    @property
    def usage(self) -> float:
        bytes_full, bytes_window = self.block_bytes
        total = self.full.num_blocks * bytes_full + self.window.num_blocks * bytes_window
        used = self.full.num_used_blocks * bytes_full + self.window.num_used_blocks * bytes_window
        return used / total if total else 0.0

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        return (self.full.can_allocate(seq, num_new_tokens)
                and self.window.new_blocks(seq, num_new_tokens) <= self.window.num_free_blocks)

    def can_admit(self, seq: Sequence, remaining: int, first_chunk: int) -> bool:
        """The whole remaining prefill in the full pool; the first chunk in the window pool (later chunks
        find room as earlier blocks are let go, or preempt as any step does)."""
        return (self.full.can_allocate(seq, remaining)
                and self.window.new_blocks(seq, first_chunk) <= self.window.num_free_blocks)

    # ---- prefix cache ---------------------------------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> int:
        self.full.match_prefix(seq)
        n = len(seq.block_table)
        while n > 0:
            window_ids = self.window.cached_window(seq, n)
            if window_ids is not None:
                break
            n -= 1
        self.full.truncate(seq, n)
        if n:
            self.window.take(seq, n, window_ids)
        return seq.num_computed_tokens

    def record_lookup(self, seq: Sequence) -> None:
        self.full.record_lookup(seq)

    @property
    def hit_rate(self) -> float:
        return self.full.hit_rate

    def on_computed(self, seq: Sequence) -> None:
        registered = len(seq.block_hashes)
        self.full.register_full_blocks(seq)
        if self.enable_prefix_caching:
            self.window.register_window(seq, registered)
        self.window.let_go(seq)

    def reset_prefix_cache(self) -> None:
        self.full.reset_prefix_cache()
        self.window.reset_prefix_cache()

    # ---- allocation -----------------------------------------------------------------------------------
    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        self.full.allocate(seq, num_new_tokens)
        self.window.allocate(seq, num_new_tokens)

    def free(self, seq: Sequence) -> None:
        self.window.free(seq)
        self.full.free(seq)
