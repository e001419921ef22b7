"""paged_attention against SDPA on gathered K/V: phases, GQA ratios, head/block sizes, dtypes, windows."""
from __future__ import annotations

import random

import pytest
import torch

import llmchat.kernels as K
from paged_batch import make_batch, reference_attention

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}


def check(batch, sliding_window=-1):
    out = K.paged_attention(*batch.args(), sliding_window=sliding_window)
    ref = reference_attention(batch, sliding_window)
    tol = TOL[batch.query.dtype]
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_size", [16, 48, 64, 80, 96, 128, 256])
def test_head_sizes_and_dtypes_mixed_batch(dtype, head_size):
    # decode (q_len 1), a fresh prefill, a chunked prefill on top of cached tokens, a length-1 sequence
    seqs = [(1, 37), (23, 23), (9, 50), (1, 1)]
    check(make_batch(seqs, 8, 2, head_size, 16, dtype, seed=head_size))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 1), (9, 3), (12, 4), (16, 2), (32, 8), (14, 2), (12, 2), (10, 2)])
def test_gqa_ratios(hq, hkv, dtype):
    # groups of 1-8 query heads: with bf16, P.V takes 4 rows at a time and the 1-3 left over together
    check(make_batch([(1, 70), (5, 33), (17, 17)], hq, hkv, 64, 16, dtype, seed=hq * 10 + hkv))


@pytest.mark.parametrize("block_size", [1, 8, 16, 32, 5])
def test_block_sizes_and_boundaries(block_size):
    # lengths at, just under and just over block boundaries
    seqs = [(1, block_size), (1, block_size + 1), (min(2, 2 * block_size - 1), 2 * block_size - 1), (block_size, 3 * block_size)]
    check(make_batch(seqs, 4, 2, 32, block_size, torch.float32, seed=block_size))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("blocks_per_group", [2, 4])
@pytest.mark.parametrize("shuffled", [True, False])
def test_grouped_cache_layout(dtype, blocks_per_group, shuffled):
    # [groups, Hkv, blocks_per_group, bs, D]: scattered blocks, and runs of consecutive ones (a sequence
    # holding whole groups), incl. a long decode that is split across threads at a group-crossing point
    seqs = [(1, 37), (23, 23), (9, 50), (1, 1), (1, 1100)]
    check(make_batch(seqs, 8, 2, 128, 16, dtype, seed=blocks_per_group, blocks_per_group=blocks_per_group,
                     shuffled=shuffled))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_decode_is_split_across_threads(dtype):
    # one long sequence with few kv heads: the op splits its keys into parts and merges them
    check(make_batch([(1, 3000)], 8, 1, 128, 16, dtype, seed=1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiles_holding_several_kv_heads(dtype):
    # Few query tokens over 1024+ keys: one tile takes several kv heads (decode: all 8; 3 tokens x 4 heads per
    # group: 5, then 3), over a grouped cache, split across threads; consecutive groups make runs merge.
    # The short sequences keep a tile per head.
    for shuffled in (True, False):
        check(make_batch([(1, 1500), (3, 1100), (2, 45), (1, 1)], 32, 8, 128, 16, dtype, seed=5,
                         blocks_per_group=4, shuffled=shuffled))


def test_long_prefill_many_tiles():
    check(make_batch([(300, 700), (1, 900)], 6, 2, 64, 32, torch.float32, seed=2))


@pytest.mark.parametrize("window", [1, 7, 16, 100])
def test_sliding_window(window):
    check(make_batch([(1, 90), (40, 40), (12, 300), (1, 2000)], 4, 2, 64, 16, torch.float32, seed=window), window)


@pytest.mark.parametrize("seed", range(6))
def test_random_batches(seed):
    rnd = random.Random(seed)
    hkv = rnd.choice([1, 2, 4])
    hq = hkv * rnd.choice([1, 2, 3, 4, 8])
    seqs = []
    for _ in range(rnd.randint(1, 6)):
        ctx = rnd.randint(1, 600)
        seqs.append((rnd.choice([1, 1, rnd.randint(1, ctx)]), ctx))
    dtype = rnd.choice([torch.float32, torch.bfloat16])
    window = rnd.choice([-1, -1, rnd.randint(1, 200)])
    check(make_batch(seqs, hq, hkv, rnd.choice([16, 64, 128]), rnd.choice([8, 16, 32]), dtype, seed=seed), window)


def test_same_result_single_and_multi_thread():
    batch = make_batch([(1, 2500), (3, 40)], 4, 1, 64, 16, torch.float32, seed=3)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = K.paged_attention(*batch.args())
    finally:
        torch.set_num_threads(threads)
    many = K.paged_attention(*batch.args())
    torch.testing.assert_close(one, many, atol=1e-5, rtol=1e-5)


def test_writes_into_given_out_and_strided_query():
    batch = make_batch([(3, 20), (1, 9)], 4, 2, 32, 8, torch.float32, seed=4)
    wide = torch.randn(batch.query.shape[0], 4, 64)  # query as a view with a larger head stride
    wide[:, :, :32] = batch.query
    batch.query = wide[:, :, :32]
    out = torch.full((4, 4, 32), float("nan"))
    result = K.paged_attention(*batch.args(), out=out)
    assert result is out
    torch.testing.assert_close(out, reference_attention(batch), atol=2e-5, rtol=2e-5)


def test_empty_batch_and_sequence_without_new_tokens():
    empty = make_batch([(1, 5)], 4, 2, 32, 8, torch.float32)
    out = K.paged_attention(empty.query[:0], empty.key_cache, empty.value_cache, empty.block_tables[:0],
                            empty.seq_lens[:0], empty.query_start_loc[:1], empty.scale)
    assert out.shape == (0, 4, 32)
    # a sequence with no query tokens in this step sits between two that have some
    batch = make_batch([(2, 9), (0, 12), (1, 30)], 4, 2, 32, 8, torch.float32, seed=5)
    check(batch)
