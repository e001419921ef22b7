"""Block groups: the allocator gives a sequence consecutive block ids of one group whenever it can.

The KV cache is laid out [group, kv head, block in group, token, dim], so a sequence owning
consecutive ids of a group is read by decode attention as one contiguous run per head.
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from block_helpers import run_prefill, seq_of
from llmchat.engine.block_manager import BlockManager
from llmchat.engine.sequence import Sequence

BS = 4
G = 4   # blocks per group


def add_block(bm: BlockManager, seq: Sequence) -> int:
    """Decode into a new block: the table is full, one more token needs exactly one more block."""
    seq.num_computed_tokens = len(seq.block_table) * BS
    bm.allocate(seq, 1)
    return seq.block_table[-1]


def assert_group_runs(table: list[int]) -> None:
    """table is whole groups in order: each slice of G ids is g*G, g*G+1, ..., g*G+G-1."""
    for i in range(0, len(table), G):
        run = table[i:i + G]
        assert run[0] % G == 0 and run == list(range(run[0], run[0] + len(run))), table


def test_blocks_per_group_must_be_a_positive_integer():
    for bad in (0, -4, 2.0):
        with pytest.raises(ValueError, match="blocks_per_group"):
            BlockManager(16, BS, blocks_per_group=bad)
    bm = BlockManager(10, BS, blocks_per_group=G)          # a partial last group is fine
    assert bm.group_free == [4, 4, 2] and list(bm.empty_groups) == [0, 1, 2]
    assert bm.num_free_blocks == 10


def test_interleaved_decode_gives_each_sequence_whole_groups():
    bm = BlockManager(32, BS, blocks_per_group=G)
    seqs = [seq_of(range(64)) for _ in range(3)]
    for _ in range(2 * G):                                  # A, B, C, A, B, C, ...
        for s in seqs:
            add_block(bm, s)
    for s in seqs:
        assert len(s.block_table) == 2 * G
        assert_group_runs(s.block_table)
    assert len({b for s in seqs for b in s.block_table}) == 6 * G


def test_long_prefill_takes_consecutive_groups():
    bm = BlockManager(32, BS, blocks_per_group=G)
    short = seq_of(range(3))
    bm.allocate(short, 3)
    assert short.block_table == [0]
    long = seq_of(range(10 * BS))
    bm.allocate(long, 10 * BS)
    assert long.block_table == list(range(4, 14))           # groups 1, 2 and half of 3, not 1..10
    nxt = seq_of(range(3))
    bm.allocate(nxt, 3)
    assert nxt.block_table == [16]                          # a fresh group, not the rest of group 3
    assert add_block(bm, short) == 1                        # short's run goes on in group 0


def test_fragmented_pool_still_hands_out_empty_groups():
    bm = BlockManager(24, BS, blocks_per_group=G)
    a, b, c, d = (seq_of(range(4 * BS)) for _ in range(4))
    for s in (a, b, c, d):
        bm.allocate(s, 4 * BS)
    e = seq_of(range(6 * BS))
    bm.allocate(e, 6 * BS)
    assert e.block_table == list(range(16, 22))             # 22 and 23 stay free: group 5 is partial
    bm.free(b)
    bm.free(d)
    f = seq_of(range(8 * BS))
    bm.allocate(f, 8 * BS)
    assert f.block_table == [4, 5, 6, 7, 12, 13, 14, 15]    # the emptied groups, not the older 22, 23
    assert not bm.empty_groups
    g = seq_of(range(2 * BS))
    bm.allocate(g, 2 * BS)                                  # no empty group left: the leftovers
    assert g.block_table == [22, 23] and bm.num_free_blocks == 0


def test_prefix_hit_reuses_blocks_and_extension_continues_the_group():
    bm = BlockManager(16, BS, blocks_per_group=G)
    prompt = list(range(2 * BS + 1))                        # 2 full blocks + 1 token
    a = seq_of(prompt)
    run_prefill(bm, a)
    assert a.block_table == [0, 1, 2]
    b = seq_of(prompt)
    assert bm.match_prefix(b) == 2 * BS
    assert b.block_table == [0, 1] and [bm.blocks[i].ref_count for i in (0, 1)] == [2, 2]
    bm.allocate(b, b.num_uncomputed_tokens)
    assert b.block_table == [0, 1, 4]                       # block 2 is a's: start an empty group
    bm.free(a)                                              # a's partial block 2 goes back uncached
    c = seq_of(prompt[:-1] + [100 + i for i in range(9)])   # same 2 cached blocks, then 9 new tokens
    assert bm.match_prefix(c) == 2 * BS and c.block_table == [0, 1]
    bm.allocate(c, c.num_uncomputed_tokens)
    assert c.block_table == [0, 1, 2, 3, 8]                 # the run after the hit goes on in group 0


def filled_with_cached_sequences() -> tuple[BlockManager, list[list[int]]]:
    """12 blocks, all cached and unreferenced: x owned 0-3, y 4-7, z 8-11; freed y, then x, then z."""
    bm = BlockManager(12, BS, blocks_per_group=G)
    prompts = [list(range(k * 100, k * 100 + 4 * BS)) for k in range(3)]
    seqs = [seq_of(p) for p in prompts]
    for s in seqs:
        run_prefill(bm, s)
    assert [s.block_table for s in seqs] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    for i in (1, 0, 2):
        bm.free(seqs[i])
    assert not bm.free_ids and len(bm.evictable) == 12
    return bm, prompts


def test_eviction_takes_the_oldest_group_in_ascending_order():
    bm, prompts = filled_with_cached_sequences()
    w = seq_of(range(1000, 1000 + 8 * BS))
    bm.allocate(w, 8 * BS)
    assert w.block_table == [4, 5, 6, 7, 0, 1, 2, 3]        # plain LRU would give 7, 6, 5, ..., 0
    assert bm.match_prefix(seq_of(prompts[2])) == 3 * BS    # the most recently freed z survives


def test_eviction_continues_a_run_before_older_groups():
    bm, prompts = filled_with_cached_sequences()
    p = seq_of(prompts[0][:3 * BS] + [7, 7])                # hits x's first 3 blocks
    assert bm.match_prefix(p) == 3 * BS and p.block_table == [0, 1, 2]
    bm.allocate(p, p.num_uncomputed_tokens)
    assert p.block_table == [0, 1, 2, 3]                    # evicts 3 (the run) before the older 7


def test_eviction_never_takes_a_referenced_block():
    bm, prompts = filled_with_cached_sequences()
    p = seq_of(prompts[0])                                  # holds x's blocks 0, 1, 2 (3 is evictable)
    assert bm.match_prefix(p) == 3 * BS and p.block_table == [0, 1, 2]
    w = seq_of(range(1000, 1000 + 9 * BS))
    bm.allocate(w, 9 * BS)
    assert w.block_table == [4, 5, 6, 7, 3, 8, 9, 10, 11]   # group 0's lowest evictable is 3, not 0
    assert [bm.blocks[i].ref_count for i in range(12)] == [1] * 12
    assert bm.num_free_blocks == 0
    with pytest.raises(RuntimeError):
        bm.allocate(seq_of([1]), 1)


def test_reset_prefix_cache_empties_the_groups_again():
    bm, _ = filled_with_cached_sequences()
    bm.reset_prefix_cache()
    assert len(bm.free_ids) == 12 and not bm.evictable and not bm.hash_to_block
    assert bm.group_free == [4, 4, 4] and sorted(bm.empty_groups) == [0, 1, 2]
    s = seq_of(range(3 * BS))
    bm.allocate(s, 3 * BS)
    assert s.block_table[0] % G == 0
    assert_group_runs(s.block_table)


# ---- randomized: bookkeeping and choices against a brute-force recount ---------------------------
def group_members(bm: BlockManager, g: int) -> range:
    return range(g * G, min((g + 1) * G, bm.num_blocks))


def brute_empty_groups(bm: BlockManager) -> list[int]:
    """Groups whose blocks are all in the free pool, in the order they became so: a group became
    empty when its last block was released, i.e. appended to the FIFO free pool."""
    pos = {b: i for i, b in enumerate(bm.free_ids)}
    groups = [g for g in range(-(-bm.num_blocks // G)) if all(b in pos for b in group_members(bm, g))]
    return sorted(groups, key=lambda g: max(pos[b] for b in group_members(bm, g)))


def brute_choice(bm: BlockManager, last: int | None) -> tuple[str, int]:
    """The block the policy should hand out next, found by scanning everything."""
    after = last + 1 if last is not None and (last + 1) % G else None
    free = list(bm.free_ids)
    if free:
        if after in free:
            return "run", after
        empty = brute_empty_groups(bm)
        return ("group", empty[0] * G) if empty else ("any", free[0])
    evictable = list(bm.evictable)
    if after in evictable:
        return "evict-run", after
    oldest_group = evictable[0] // G
    return "evict", min(b for b in evictable if b // G == oldest_group)


def check_invariants(bm: BlockManager, live: list[Sequence]) -> None:
    refs = Counter(b for s in live for b in s.block_table)
    for s in live:
        assert len(set(s.block_table)) == len(s.block_table)
    assert not set(bm.free_ids) & set(bm.evictable)
    for block in bm.blocks:
        b = block.block_id
        assert block.ref_count == refs[b]
        if refs[b]:
            assert b not in bm.free_ids and b not in bm.evictable
        elif b in bm.free_ids:
            assert block.hash is None
        else:
            assert b in bm.evictable and block.hash is not None
    for g in range(-(-bm.num_blocks // G)):
        assert bm.group_free[g] == sum(b in bm.free_ids for b in group_members(bm, g))
    assert list(bm.empty_groups) == brute_empty_groups(bm)
    assert bm.num_free_blocks == sum(not refs[b] for b in range(bm.num_blocks))
    assert bm.num_used_blocks == len(refs)
    for h, b in bm.hash_to_block.items():
        assert bm.blocks[b].hash == h


@pytest.mark.parametrize("seed", range(6))
def test_random_ops_keep_bookkeeping_and_choices_exact(seed):
    rng = random.Random(seed)
    bm = BlockManager(30, BS, blocks_per_group=G)           # 7 full groups and a partial one of 2
    prefixes = [[rng.randrange(50) for _ in range(5 * BS)] for _ in range(3)]
    live: list[Sequence] = []
    picks = Counter()

    def compute(seq: Sequence) -> None:
        """One scheduler step for seq: a chunk of its uncomputed tokens, a block at a time."""
        if seq.num_uncomputed_tokens == 0:
            seq.token_ids.extend(rng.randrange(50) for _ in range(rng.randint(1, 2 * BS)))
        chunk = rng.randint(1, seq.num_uncomputed_tokens)
        if bm.num_new_blocks(seq, chunk) > bm.num_free_blocks:
            bm.free(seq)                                    # preempted
            live.remove(seq)
            return
        while bm.num_new_blocks(seq, chunk):
            kind, expected = brute_choice(bm, seq.block_table[-1] if seq.block_table else None)
            bm.allocate(seq, (len(seq.block_table) + 1) * BS - seq.num_computed_tokens)
            assert seq.block_table[-1] == expected, kind
            picks[kind] += 1
        seq.num_computed_tokens += chunk
        bm.register_full_blocks(seq)

    for _ in range(400):
        op = rng.random()
        if op < 0.35 or not live:
            tokens = rng.choice(prefixes)[:rng.randint(0, 5 * BS)]
            tokens += [rng.randrange(50) for _ in range(rng.randint(1, 12))]
            seq = seq_of(tokens, adapter=rng.choice([None, None, "a"]))
            bm.match_prefix(seq)
            bm.record_lookup(seq)
            live.append(seq)
            compute(seq)
        elif op < 0.75:
            compute(rng.choice(live))
        elif op < 0.97:
            seq = rng.choice(live)
            bm.free(seq)
            live.remove(seq)
        else:
            bm.reset_prefix_cache()
        check_invariants(bm, live)
    assert bm.hit_tokens > 0
    assert set(picks) == {"run", "group", "any", "evict-run", "evict"}, picks   # every rule was exercised
