"""Block manager: block tables, chained prefix hashes, ref counts, LRU eviction, collisions, adapters."""
from __future__ import annotations

import pytest

from block_helpers import run_prefill, seq_of
from llmchat.engine import block_manager as bm_module
from llmchat.engine.block_manager import BlockManager

BS = 8


def test_allocation_covers_tokens_and_free_returns_blocks():
    bm = BlockManager(10, BS)
    s = seq_of(range(20))
    bm.allocate(s, 20)
    assert len(s.block_table) == 3 and len(set(s.block_table)) == 3
    assert bm.num_free_blocks == 7
    s.num_computed_tokens = 20
    bm.allocate(s, 4)          # 24 tokens still fit in 3 blocks
    assert len(s.block_table) == 3
    bm.allocate(s, 5)          # 25 need a fourth
    assert len(s.block_table) == 4
    bm.free(s)
    assert bm.num_free_blocks == 10 and s.block_table == [] and s.num_computed_tokens == 0


def test_shared_prefix_is_reused_and_ref_counted():
    bm = BlockManager(16, BS)
    system = list(range(100, 124))                     # 3 full blocks
    a = seq_of(system + [1, 2, 3])
    run_prefill(bm, a)
    b = seq_of(system + [7, 8])
    reused = bm.match_prefix(b)
    assert reused == 24 and b.num_computed_tokens == 24
    assert b.block_table == a.block_table[:3]
    assert [bm.blocks[i].ref_count for i in b.block_table] == [2, 2, 2]
    bm.free(a)
    assert [bm.blocks[i].ref_count for i in b.block_table] == [1, 1, 1]
    # a's private tail block was freed; the shared blocks are still held by b
    assert bm.num_used_blocks == 3


def test_chain_hash_depends_on_parent():
    bm = BlockManager(16, BS)
    run_prefill(bm, seq_of(list(range(8)) + list(range(50, 58)) + [0]))
    other = seq_of(list(range(10, 18)) + list(range(50, 58)) + [0])   # same 2nd block, other parent
    assert bm.match_prefix(other) == 0


def test_last_token_is_never_taken_from_cache():
    bm = BlockManager(16, BS)
    run_prefill(bm, seq_of(range(17)))
    again = seq_of(range(16))                 # exactly two full blocks, both cached
    assert bm.match_prefix(again) == 8        # the block holding the last token is recomputed
    assert again.num_uncomputed_tokens == 8


def test_second_turn_extending_the_first_hits_its_blocks():
    bm = BlockManager(32, BS)
    turn1 = seq_of(range(30))
    run_prefill(bm, turn1)
    reply = [200 + i for i in range(11)]
    for token in reply:                         # decode: the newest token is never computed yet
        bm.allocate(turn1, 1)
        turn1.num_computed_tokens = turn1.num_tokens
        bm.register_full_blocks(turn1)
        turn1.token_ids.append(token)
    assert turn1.num_computed_tokens == 40
    bm.free(turn1)
    turn2 = seq_of(list(range(30)) + reply + [5, 6, 7])
    assert bm.match_prefix(turn2) == 40


def test_lru_evicts_least_recently_freed_and_keeps_the_rest():
    bm = BlockManager(4, BS)
    old = seq_of(range(0, 9))          # 1 full block cached + 1 partial
    run_prefill(bm, old)
    bm.free(old)
    new = seq_of(range(100, 109))
    run_prefill(bm, new)
    bm.free(new)
    assert bm.num_free_blocks == 4
    hog = seq_of(range(500, 524))      # needs 3 blocks: 2 never-cached first, then the oldest cached
    bm.allocate(hog, 24)
    assert bm.match_prefix(seq_of(range(100, 109))) == 8      # the newer cached block survived
    assert bm.match_prefix(seq_of(range(0, 9))) == 0          # the older one was evicted


def test_hit_moves_block_out_of_the_evictable_pool():
    bm = BlockManager(3, BS)
    run_prefill(bm, first := seq_of(range(9)))
    bm.free(first)
    holder = seq_of(range(9))
    assert bm.match_prefix(holder) == 8
    filler = seq_of(range(300, 316))
    bm.allocate(filler, 16)                 # takes the two other blocks, must not evict holder's
    assert bm.num_free_blocks == 0
    with pytest.raises(RuntimeError):
        bm.allocate(seq_of([1]), 1)
    assert bm.blocks[holder.block_table[0]].ref_count == 1


def test_hash_collision_is_caught_by_token_check(monkeypatch):
    monkeypatch.setattr(bm_module, "chain_hash", lambda parent, tokens, adapter: 42)  # every block collides
    bm = BlockManager(8, BS)
    run_prefill(bm, seq_of(range(9)))
    assert bm.match_prefix(seq_of(range(50, 59))) == 0
    assert bm.match_prefix(seq_of(range(9))) == 8


def test_adapter_key_separates_cache_entries():
    bm = BlockManager(16, BS)
    run_prefill(bm, seq_of(range(17), adapter="pirate"))
    assert bm.match_prefix(seq_of(range(17))) == 0
    assert bm.match_prefix(seq_of(range(17), adapter="other")) == 0
    assert bm.match_prefix(seq_of(range(17), adapter="pirate")) == 16


def test_caching_off_never_hits():
    bm = BlockManager(16, BS, enable_prefix_caching=False)
    run_prefill(bm, a := seq_of(range(17)))
    bm.free(a)
    assert bm.match_prefix(seq_of(range(17))) == 0
    assert bm.num_free_blocks == 16


def test_hit_counters():
    bm = BlockManager(16, BS)
    a = seq_of(range(17))
    run_prefill(bm, a)
    b = seq_of(range(17))
    bm.match_prefix(b)
    bm.record_lookup(b)
    assert (bm.hit_tokens, bm.query_tokens) == (16, 34)
    assert bm.hit_rate == pytest.approx(16 / 34)


def test_identical_blocks_computed_twice_register_once_and_free_cleanly():
    bm = BlockManager(8, BS)
    a, b = seq_of(range(9)), seq_of(range(9))
    for s in (a, b):                       # both prefilled in the same step: no hit for b
        bm.allocate(s, 9)
    for s in (a, b):
        s.num_computed_tokens = 9
        bm.register_full_blocks(s)
    assert len(bm.hash_to_block) == 1
    bm.free(a)
    bm.free(b)
    assert bm.num_free_blocks == 8
    bm.reset_prefix_cache()
    assert not bm.hash_to_block and len(bm.free_ids) == 8
