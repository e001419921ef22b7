"""Paged KV cache bookkeeping: fixed-size blocks, block tables, and the automatic prefix cache.

A full, computed block is registered under a chained hash of (parent block's hash, its token ids,
adapter key). A later sequence whose leading full blocks hash the same reuses them (ref count + 1)
instead of recomputing. Freed blocks keep their contents and hash: they sit in an LRU and are evicted
(least recently freed first, see _fresh_block) only when no never-cached block is left, so an earlier
turn or a shared system prompt stays reusable for as long as memory allows.

Blocks are grouped blocks_per_group at a time: the KV cache is laid out [group, kv head, block in
group, token, dim], so for one head the blocks of a group sit side by side. Decode attention reads a
sequence's blocks in order, and consecutive ids of one group are then one contiguous run instead of
scattered pieces (faster). So the allocator gives a sequence the block after its last one when that
is free, else starts it in an untouched group; sharing and hashing stay per block. With
blocks_per_group=1 every block is its own group and this is plain FIFO allocation and LRU eviction.
"""
from __future__ import annotations

from collections import OrderedDict

from .sequence import Sequence


def chain_hash(parent: int | None, token_ids: tuple[int, ...], adapter_key: str) -> int:
    """Hash of one full block given its parent's hash; equal prefixes give equal chains."""
    return hash((parent, adapter_key, token_ids))


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "token_ids", "adapter_key")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None              # set while registered in the prefix cache
        self.token_ids: tuple[int, ...] = ()      # kept to reject hash collisions
        self.adapter_key: str = ""


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 blocks_per_group: int = 1):
        if num_blocks <= 0:
            raise ValueError(f"the KV cache needs at least one block, got {num_blocks}")
        if not isinstance(blocks_per_group, int) or blocks_per_group < 1:
            raise ValueError(f"blocks_per_group must be an integer >= 1, got {blocks_per_group!r}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks_per_group = blocks_per_group
        self.blocks = [Block(i) for i in range(num_blocks)]
        # The free pool: never cached (or invalidated); FIFO, and O(1) removal of a chosen id.
        self.free_ids: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.evictable: OrderedDict[int, None] = OrderedDict()          # cached, unreferenced; oldest first
        # Group bookkeeping over the free pool only (an evictable block still holds reusable KV).
        num_groups = -(-num_blocks // blocks_per_group)                  # the last group may be partial
        self.group_free = [self.group_size(g) for g in range(num_groups)]  # free-pool blocks per group
        self.empty_groups: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_groups))  # all free; FIFO
        self.hash_to_block: dict[int, int] = {}
        self.hit_tokens = 0      # prompt tokens served from the cache
        self.query_tokens = 0    # prompt tokens looked up

    # ---- capacity -------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_ids) + len(self.evictable)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def group_size(self, group: int) -> int:
        return min(self.blocks_per_group, self.num_blocks - group * self.blocks_per_group)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_new_blocks(self, seq: Sequence, num_new_tokens: int) -> int:
        """Blocks to add so the table covers the computed tokens plus num_new_tokens."""
        return max(0, self.blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table))

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.num_new_blocks(seq, num_new_tokens) <= self.num_free_blocks

    def can_admit(self, seq: Sequence, remaining: int, first_chunk: int) -> bool:
        """Room for a waiting sequence: its whole remaining prefill, so it is not evicted midway."""
        return self.can_allocate(seq, remaining)

    # ---- prefix cache ---------------------------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> int:
        """Give a fresh sequence the cached blocks of its longest cached prefix; returns tokens reused.

        Only full blocks of token_ids[:-1] are looked up: the last token is always computed, because
        its logits give the next token.
        """
        assert not seq.block_table and seq.num_computed_tokens == 0
        lookup = seq.num_tokens - 1
        if not self.enable_prefix_caching:
            return 0
        parent = None
        for i in range(lookup // self.block_size):
            tokens = self.block_tokens(seq, i)
            h = chain_hash(parent, tokens, seq.adapter_key)
            block_id = self.cached_block(h, tokens, seq.adapter_key)
            if block_id is None:
                break
            self._take(self.blocks[block_id])
            seq.block_table.append(block_id)
            seq.block_hashes.append(h)
            parent = h
        reused = len(seq.block_table) * self.block_size
        seq.num_computed_tokens = reused
        return reused

    def record_lookup(self, seq: Sequence) -> None:
        """Count an admitted sequence's prompt tokens as hits (served from cache) or misses."""
        self.query_tokens += seq.num_prompt_tokens
        self.hit_tokens += min(seq.num_computed_tokens, seq.num_prompt_tokens)

    def register_full_blocks(self, seq: Sequence) -> None:
        """After a step: hash every newly completed block so later requests can reuse it."""
        if not self.enable_prefix_caching:
            return
        # accepted guesses count as computed before the engine appends them to token_ids (speculation.py): a
        # block is hashed once its tokens are all there, the step after
        full = min(seq.num_computed_tokens, seq.num_tokens) // self.block_size
        for i in range(len(seq.block_hashes), full):
            tokens = self.block_tokens(seq, i)
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            h = chain_hash(parent, tokens, seq.adapter_key)
            seq.block_hashes.append(h)
            self.register(seq.block_table[i], h, tokens, seq.adapter_key)

    def block_tokens(self, seq: Sequence, i: int) -> tuple[int, ...]:
        """The token ids of seq's block i."""
        return tuple(seq.token_ids[i * self.block_size:(i + 1) * self.block_size])

    def cached_block(self, h: int, tokens: tuple[int, ...], adapter_key: str) -> int | None:
        """The cached block under hash h, if it holds these tokens for this adapter (else a miss or a collision)."""
        block_id = self.hash_to_block.get(h)
        if block_id is None:
            return None
        block = self.blocks[block_id]
        return block_id if block.token_ids == tokens and block.adapter_key == adapter_key else None

    def register(self, block_id: int, h: int, tokens: tuple[int, ...], adapter_key: str) -> None:
        """Cache a computed block under h, unless an identical block is cached already (another sequence's)."""
        block = self.blocks[block_id]
        if h in self.hash_to_block or block.hash is not None:
            return
        block.hash, block.token_ids, block.adapter_key = h, tokens, adapter_key
        self.hash_to_block[h] = block_id

    def on_computed(self, seq: Sequence) -> None:
        """After a step computed more of seq's tokens."""
        self.register_full_blocks(seq)

    # ---- allocation -----------------------------------------------------------------------------
    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        """Extend seq's block table to hold num_new_tokens more tokens (caller checked can_allocate)."""
        for _ in range(self.num_new_blocks(seq, num_new_tokens)):
            seq.block_table.append(self._fresh_block(seq.block_table[-1] if seq.block_table else None))

    def free(self, seq: Sequence) -> None:
        """Drop seq's references. Tail blocks go first so they are evicted before the shared prefix."""
        for block_id in reversed(seq.block_table):
            self._drop(block_id)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_computed_tokens = 0

    def truncate(self, seq: Sequence, num_blocks: int) -> None:
        """Keep only the first num_blocks of a fresh sequence's matched prefix (see HybridBlockManager)."""
        for block_id in reversed(seq.block_table[num_blocks:]):
            self._drop(block_id)
        del seq.block_table[num_blocks:], seq.block_hashes[num_blocks:]
        seq.num_computed_tokens = min(seq.num_computed_tokens, num_blocks * self.block_size)

    def reset_prefix_cache(self) -> None:
        """Forget every cached block that no sequence uses."""
        while self.evictable:
            block_id, _ = self.evictable.popitem(last=False)
            self._uncache(self.blocks[block_id])
            self._release(block_id)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    # ---- internals ------------------------------------------------------------------------------
    def _take(self, block: Block) -> None:
        if block.ref_count == 0:
            self.evictable.pop(block.block_id, None)
        block.ref_count += 1

    def _fresh_block(self, last: int | None = None) -> int:
        """A block to follow `last` (a sequence's last block; None if it has none yet).

        Prefers last + 1 in the same group (the run goes on), then the first block of the oldest empty
        group (room for a new run), then any free block. Cached blocks are evicted only once the free
        pool is empty, and in ascending id order within a group so runs form there too.
        """
        per_group = self.blocks_per_group
        after = last + 1 if last is not None and (last + 1) % per_group else None   # same group only
        if self.free_ids:
            if after in self.free_ids:
                block_id = after
            elif self.empty_groups:
                block_id = next(iter(self.empty_groups)) * per_group
            else:
                block_id = next(iter(self.free_ids))              # fragmented: oldest free block
            self._claim(block_id)
        elif self.evictable:
            block_id = after
            if block_id not in self.evictable:
                # The least recently freed block's group; a sequence frees tail first, so its lowest
                # evictable block is one LRU would soon take anyway, and ascending order keeps a run.
                first = next(iter(self.evictable)) // per_group * per_group
                block_id = next(b for b in range(first, first + per_group) if b in self.evictable)
            del self.evictable[block_id]
            self._uncache(self.blocks[block_id])
        else:
            raise RuntimeError("KV cache out of blocks (the scheduler should have preempted)")
        block = self.blocks[block_id]
        block.ref_count = 1
        return block_id

    def _drop(self, block_id: int) -> None:
        """One reference less; an unreferenced block stays reusable if cached, else goes back to the pool."""
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count == 0:
            if block.hash is not None:
                self.evictable[block_id] = None
            else:
                self._release(block_id)

    def _claim(self, block_id: int) -> None:
        """Take a block out of the free pool."""
        del self.free_ids[block_id]
        group = block_id // self.blocks_per_group
        if self.group_free[group] == self.group_size(group):
            del self.empty_groups[group]
        self.group_free[group] -= 1

    def _release(self, block_id: int) -> None:
        """Put an uncached, unreferenced block back in the free pool."""
        self.free_ids[block_id] = None
        group = block_id // self.blocks_per_group
        self.group_free[group] += 1
        if self.group_free[group] == self.group_size(group):
            self.empty_groups[group] = None

    def _uncache(self, block: Block) -> None:
        if block.hash is not None and self.hash_to_block.get(block.hash) == block.block_id:
            del self.hash_to_block[block.hash]
        block.hash, block.token_ids, block.adapter_key = None, (), ""
