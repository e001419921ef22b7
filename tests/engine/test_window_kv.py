"""The sliding-window layers' KV pool (engine/hybrid_blocks.py): a sequence lets go of the window blocks no
future token sees, prefix hits need the full blocks of the whole prefix and the window blocks of its last
window, the freed memory goes to the full layers, and greedy output stays transformers'."""
from __future__ import annotations

import pytest
from block_helpers import seq_of
from engine_helpers import hf_greedy, random_prompt
from tiny_models import make_model

from llmchat.engine import LLM, SamplingParams
from llmchat.engine.block_manager import BlockManager
from llmchat.engine.hybrid_blocks import (HybridBlockManager, WindowBlockManager, attention_chunk_keys,
                                          window_pool_blocks)

BS, WINDOW = 4, 20


def hybrid(full_blocks=200, window_blocks=100, per_group=1) -> HybridBlockManager:
    return HybridBlockManager(BlockManager(full_blocks, BS, True, per_group),
                              WindowBlockManager(window_blocks, BS, WINDOW, True, per_group), (2, 1))


def prefill(bm, seq, chunk=None) -> None:
    """What the scheduler + runner do for a whole prompt, in chunks: match, then allocate and compute."""
    bm.match_prefix(seq)
    bm.record_lookup(seq)
    while seq.num_uncomputed_tokens:
        n = min(chunk or seq.num_uncomputed_tokens, seq.num_uncomputed_tokens)
        assert bm.can_allocate(seq, n)
        bm.allocate(seq, n)
        seq.num_computed_tokens += n
        bm.on_computed(seq)


def live(seq) -> list[int]:
    return seq.window_table[seq.window_start:]


def test_the_kernel_chunk_rule_is_mirrored():
    assert [attention_chunk_keys(b) for b in (4, 16, 32, 64, 128)] == [64, 64, 64, 64, 128]


@pytest.mark.parametrize("chunk", [None, 7, 64])
def test_a_sequence_keeps_only_the_window_blocks_its_next_token_reads(chunk):
    bm, seq = hybrid(), seq_of(range(1, 201))
    prefill(bm, seq, chunk)
    # the next token (position 200) reads keys from 181, walked from the 64-key chunk at 128: block 32 on
    assert seq.window_start == 32 and len(seq.window_table) == 50 and len(seq.block_table) == 50
    assert bm.window.num_used_blocks == 18 and bm.full.num_used_blocks == 50
    assert len(set(live(seq))) == 18 and all(b == 0 for b in seq.window_table[:32])
    # the let-go blocks stay cached (evictable), not referenced
    assert len(bm.window.evictable) == 32


def test_a_prefix_hit_needs_the_last_window_of_the_prefix_and_shrinks_without_it():
    bm = hybrid()
    first = seq_of(range(1, 201))
    prefill(bm, first)
    bm.free(first)
    second = seq_of(list(range(1, 201)) + [7])
    prefill(bm, second)
    assert second.metrics.num_prompt_tokens == 201 and bm.full.hit_tokens == 200
    assert second.window_start == 32 and len(live(second)) == 19   # 200 cached + the new token's block
    bm.free(second)

    bm.window.reset_prefix_cache()      # the window layers' cached blocks are gone, the full ones stay
    third = seq_of(list(range(1, 201)) + [9])
    bm.match_prefix(third)
    assert third.num_computed_tokens == 0 and third.block_table == [] and third.window_table == []
    assert bm.full.num_used_blocks == 0 and len(bm.full.evictable) == 50   # the matched full blocks went back


def test_a_hit_is_cut_to_the_longest_prefix_whose_window_is_cached():
    bm = hybrid()
    short = seq_of(range(1, 101))       # 100 tokens: 25 blocks, its last window cached
    prefill(bm, short)
    bm.free(short)
    # drop every cached window block past block 25's window, keep those of the 100-token prefix
    longer = seq_of(list(range(1, 101)) + list(range(500, 600)))
    prefill(bm, longer)
    bm.free(longer)
    for block_id in list(bm.window.evictable):
        if bm.window.blocks[block_id].token_ids and bm.window.blocks[block_id].token_ids[0] >= 560:
            bm.window._uncache(bm.window.blocks[block_id])
    again = seq_of(list(range(1, 101)) + list(range(500, 600)) + [3])
    bm.match_prefix(again)
    hit = again.num_computed_tokens
    assert 100 <= hit < 200 and hit % BS == 0
    start = bm.window.first_needed(hit)
    assert again.window_start == start and len(live(again)) == hit // BS - start
    bm.free(again)
    assert bm.window.num_used_blocks == 0 and bm.full.num_used_blocks == 0


def test_blocks_of_many_sequences_all_come_back():
    bm = hybrid(full_blocks=400, window_blocks=window_pool_blocks(WINDOW, BS, 8, 64))
    seqs = [seq_of(random_prompt(30 + 37 * i, seed=i)) for i in range(8)]
    for seq in seqs:
        bm.match_prefix(seq)
    for _ in range(40):    # interleaved chunks of 16, then decode steps of 1, as the scheduler would
        for seq in seqs:
            n = min(16, seq.num_uncomputed_tokens) or 1
            if not seq.num_uncomputed_tokens:
                seq.token_ids.append(5)
            assert bm.can_allocate(seq, n)
            bm.allocate(seq, n)
            seq.num_computed_tokens += n
            bm.on_computed(seq)
            assert len(live(seq)) <= -(-(WINDOW + 64) // BS) + 2 + -(-n // BS)
    for seq in seqs:
        bm.free(seq)
    assert bm.window.num_used_blocks == 0 and bm.full.num_used_blocks == 0


# ---- the engine ---------------------------------------------------------------------------------------------
LAYER_BLOCK = 2 * 2 * 16 * 16 * 4   # bytes of one 16-token block of one layer: K and V, 2 kv heads, dim 16, fp32


@pytest.fixture(scope="module")
def gemma_folder(tmp_path_factory):
    """Three local layers (window 20) and one global: the window pool holds 3 of 4 layers' KV."""
    return make_model(tmp_path_factory.mktemp("gemma3-4l"), "gemma3", num_hidden_layers=4,
                      max_position_embeddings=4096,
                      layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                   "sliding_attention"])


def test_the_engine_gives_the_window_layers_a_small_pool_and_the_full_layer_the_rest(gemma_folder):
    config = dict(kv_cache_gb=300 * 4 * LAYER_BLOCK / 2**30, max_num_seqs=4, max_num_batched_tokens=64)
    split, one = LLM(gemma_folder, **config).engine, LLM(gemma_folder, window_kv=False, **config).engine
    assert isinstance(split.block_manager, HybridBlockManager) and type(one.block_manager) is BlockManager
    assert one.block_manager.num_blocks == 300
    full, window = split.block_manager.full.num_blocks, split.block_manager.window.num_blocks
    assert window == 2 * window_pool_blocks(20, 16, 4, 64) == 72
    # the memory the window layers do not need goes to the full layer: 984 blocks instead of 300
    assert full == (300 * 4 - 72 * 3) and split.block_manager.num_blocks == full
    assert [c.shape[0] * c.shape[2] for c in split.runner.key_caches] == [72, 72, 984, 72]
    assert abs(split.kv_cache_gb - one.kv_cache_gb) < 1e-6


@pytest.mark.parametrize("budget", ["tight", "roomy"])
@pytest.mark.parametrize("backend,stack", [("kernels", True), ("kernels", False), ("torch", False)])
def test_greedy_equals_transformers_past_the_window_with_hits_chunks_and_preemption(gemma_folder, backend, stack,
                                                                                   budget):
    shared = random_prompt(96, seed=40)
    prompts = [shared + random_prompt(n, seed=41 + n) for n in (5, 60, 130, 17)] + [random_prompt(170, seed=9)]
    params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    # tight: 40 blocks a pool for ~48 blocks of sequences (the shared prefix counted once), so someone is preempted and recomputed; roomy: the
    # window pool (86 blocks) smaller than the full one
    blocks = 40 if budget == "tight" else 200
    llm = LLM(gemma_folder, attention_backend=backend, decoder_stack=stack, max_num_batched_tokens=48,
              max_num_seqs=5, kv_cache_gb=blocks * 4 * LAYER_BLOCK / 2**30)
    bm = llm.engine.block_manager
    assert isinstance(bm, HybridBlockManager)
    outs = llm.generate(prompts, params)
    again = llm.generate([prompts[2]], params)[0]     # its prefix (and last window) from the cache
    if budget == "tight":
        assert bm.window.num_blocks == bm.full.num_blocks == 40 and llm.engine.scheduler.num_preemptions > 0
    else:
        assert bm.window.num_blocks == 86 < bm.full.num_blocks
    assert again.metrics.num_cached_tokens >= 96
    for out in outs + [again]:
        assert out.token_ids == hf_greedy(gemma_folder, out.prompt_token_ids, 48, ignore_eos=True)
    assert bm.full.num_used_blocks == 0 and bm.window.num_used_blocks == 0


def test_bench_at_long_context_holds_the_context_in_less_memory(gemma_folder, capsys):
    import json

    from llmchat.tui.cli import main as cli_main
    assert cli_main(["bench", str(gemma_folder), "--context", "1024", "2048", "--tokens", "4", "--dtype", "float32",
                     "--kv-cache-gb", "0.05", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kv_tokens"] >= 2052
    # 129 blocks for the global layer and 80 for the three local ones, instead of 129 for all four
    assert report["kv_cache_gb"] == pytest.approx((129 + 3 * 80) * LAYER_BLOCK / 2**30)
    assert report["kv_gb_one_pool"] == pytest.approx(129 * 4 * LAYER_BLOCK / 2**30)
