"""Bad inputs are rejected at the op boundary with a ValueError that names the op and the problem."""
from __future__ import annotations

import pytest
import torch

import llmchat.kernels as K
from paged_batch import make_batch


def batch():
    return make_batch([(1, 20), (4, 9)], 4, 2, 32, 8, torch.float32)


def attention(b, **over):
    args = dict(query=b.query, key_cache=b.key_cache, value_cache=b.value_cache, block_tables=b.block_tables,
                seq_lens=b.seq_lens, query_start_loc=b.query_start_loc, scale=b.scale)
    args.update(over)
    return K.paged_attention(**args)


@pytest.mark.parametrize("change,message", [
    (lambda b: {"query": b.query.double()}, "query must be float32, bfloat16 or float16"),
    (lambda b: {"key_cache": b.key_cache.bfloat16(), "value_cache": b.value_cache.bfloat16()},
     "key_cache must have the dtype of query"),
    (lambda b: {"query": b.query[:, :3]}, "query heads (3) must be a multiple of kv heads (2)"),
    (lambda b: {"query": b.query[..., :24].contiguous()}, "head size"),
    (lambda b: {"block_tables": b.block_tables.long()}, "block_tables must be Int"),
    (lambda b: {"seq_lens": torch.tensor([20, 3], dtype=torch.int32)}, "is smaller than its 4 query tokens"),
    (lambda b: {"seq_lens": torch.tensor([200, 9], dtype=torch.int32)}, "needs 25 blocks"),
    (lambda b: {"query_start_loc": torch.tensor([0, 1, 4], dtype=torch.int32)}, "must start at 0 and end at"),
    (lambda b: {"block_tables": torch.full_like(b.block_tables, 99)}, "is not a block of the cache"),
    (lambda b: {"value_cache": b.value_cache[:, :1]}, "value_cache must be contiguous"),
    (lambda b: {"key_cache": b.key_cache.transpose(1, 2)}, "key_cache must be contiguous"),
    (lambda b: {"key_cache": b.key_cache[0], "value_cache": b.value_cache[0]}, "key_cache must be [num_blocks"),
    (lambda b: {"sliding_window": 0}, "sliding_window must be -1"),
    (lambda b: {"scale": 0.0}, "scale must be positive"),
])
def test_paged_attention_rejects(change, message):
    b = batch()
    with pytest.raises(ValueError, match="llmchat.kernels.paged_attention") as err:
        attention(b, **change(b))
    assert message in str(err.value)


def test_write_kv_cache_rejects_out_of_range_slot():
    kc = torch.zeros(2, 2, 4, 16)
    with pytest.raises(ValueError, match=r"slot_mapping values must be -1 or in \[0, 8\)"):
        K.write_kv_cache(torch.randn(1, 2, 16), torch.randn(1, 2, 16), kc, kc.clone(), torch.tensor([8]))


def test_write_kv_cache_rejects_head_mismatch():
    kc = torch.zeros(2, 2, 4, 16)
    with pytest.raises(ValueError, match=r"key must be \[T, 2, 16\]"):
        K.write_kv_cache(torch.randn(1, 3, 16), torch.randn(1, 3, 16), kc, kc.clone(), torch.tensor([0]))


def test_copy_blocks_rejects_bad_mapping():
    kc = torch.zeros(2, 2, 4, 16)
    with pytest.raises(ValueError, match="block_mapping values must be in"):
        K.copy_blocks([kc], [kc.clone()], torch.tensor([[0, 5]]))
    with pytest.raises(ValueError, match=r"block_mapping must be \[N, 2\]"):
        K.copy_blocks([kc], [kc.clone()], torch.tensor([[0, 1, 1]]))


def test_small_ops_reject_bad_shapes():
    with pytest.raises(ValueError, match="rms_norm: weight must have shape"):
        K.rms_norm(torch.randn(2, 8), torch.randn(9), 1e-6)
    with pytest.raises(ValueError, match="fused_add_rms_norm: residual must have the dtype of x"):
        K.fused_add_rms_norm(torch.randn(2, 8), torch.randn(2, 8).double(), torch.randn(8), 1e-6)
    with pytest.raises(ValueError, match="silu_and_mul: x must be"):
        K.silu_and_mul(torch.randn(2, 7))
    with pytest.raises(ValueError, match=r"rotary_embedding: positions must be in \[0, 4\)"):
        K.rotary_embedding(torch.tensor([4]), torch.randn(1, 8), torch.randn(1, 8), torch.randn(4, 8), 8)
    with pytest.raises(ValueError, match="rotary_embedding: positions must be Long"):
        K.rotary_embedding(torch.tensor([0], dtype=torch.int32), torch.randn(1, 8), torch.randn(1, 8),
                           torch.randn(4, 8), 8)
    with pytest.raises(ValueError, match="not a multiple of head_size"):
        K.rotary_embedding(torch.tensor([0]), torch.randn(1, 12), torch.randn(1, 8), torch.randn(4, 8), 8)
