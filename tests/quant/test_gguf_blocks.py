"""Every GGUF block type the engine runs repacks losslessly: the kernels' weights dequantize bit for bit to
what the gguf package's dequantize gives for the same bytes (odd row counts, several blocks per row)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

import llmchat.kernels as K
from llmchat.engine.quant.gguf_blocks import BLOCKS, UnsupportedTensorType, dense, repack

ROUND_TRIP = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]   # the gguf package can write these itself
K_QUANTS = {"Q4_K": ((0, 2), (2, 4)), "Q5_K": ((0, 2), (2, 4)), "Q6_K": ((208, 210),)}  # fp16 fields


def random_k_blocks(type_name: str, rows: int, cols: int, seed: int) -> np.ndarray:
    """Random bytes for every field, with the fp16 super-block factors set to finite values."""
    rng = np.random.default_rng(seed)
    elems, size = BLOCKS[type_name]
    blocks = rng.integers(0, 256, (rows * cols // elems, size), dtype=np.uint8)
    for lo, hi in K_QUANTS[type_name]:
        blocks[:, lo:hi] = rng.uniform(1e-4, 0.05, (blocks.shape[0], 1)).astype(np.float16).view(np.uint8)
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("type_name", ROUND_TRIP)
@pytest.mark.parametrize("rows,cols", [(1, 32), (7, 96), (13, 576)])
def test_written_by_gguf_dequantize_exactly(type_name, rows, cols):
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    raw = quantize(x, T[type_name])
    want = dequantize(raw, T[type_name])
    w = repack(type_name, raw, rows, cols)
    assert torch.equal(w.dequantize(), torch.from_numpy(want))


@pytest.mark.parametrize("type_name", list(K_QUANTS))
@pytest.mark.parametrize("rows,cols", [(1, 256), (5, 512), (3, 1536)])
def test_k_quants_dequantize_exactly(type_name, rows, cols):
    raw = random_k_blocks(type_name, rows, cols, seed=rows * cols)
    want = dequantize(raw, T[type_name])
    w = repack(type_name, raw, rows, cols)
    assert w.kind == {"Q4_K": "q4", "Q5_K": "q5", "Q6_K": "q8h"}[type_name]
    assert torch.equal(w.dequantize(), torch.from_numpy(want))
    # the op's own row reader agrees too
    assert torch.equal(K.quant_rows(w, torch.arange(rows), torch.float32), torch.from_numpy(want))


@pytest.mark.parametrize("type_name", ROUND_TRIP)
def test_rows_and_cat_stay_exact(type_name):
    x = np.random.default_rng(0).standard_normal((10, 64)).astype(np.float32)
    raw = quantize(x, T[type_name])
    full = torch.from_numpy(dequantize(raw, T[type_name]))
    w = repack(type_name, raw, 10, 64)
    perm = torch.tensor([3, 1, 0, 9, 2, 8, 4, 7, 5, 6])
    assert torch.equal(w.rows(perm).dequantize(), full[perm])
    both = type(w).cat([w.rows(slice(0, 4)), w.rows(slice(4, 10))])
    assert torch.equal(both.dequantize(), full)


def test_dense_types():
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    assert torch.equal(dense("F32", x.view(np.uint8), 3, 8), torch.from_numpy(x))
    assert torch.equal(dense("F16", x.astype(np.float16).view(np.uint8), 3, 8), torch.from_numpy(x.astype(np.float16)))
    bf = torch.from_numpy(x).bfloat16()
    assert torch.equal(dense("BF16", bf.view(torch.int16).numpy().view(np.uint8), 3, 8), bf)


def test_unsupported_and_malformed_tensors_are_named():
    with pytest.raises(UnsupportedTensorType, match="blk.0.attn_q.weight is of GGUF type IQ2_XS"):
        repack("IQ2_XS", np.zeros(66, np.uint8), 1, 256, "blk.0.attn_q.weight")
    with pytest.raises(ValueError, match="not whole Q4_K blocks"):
        repack("Q4_K", np.zeros(144, np.uint8), 1, 128, "t")
    with pytest.raises(ValueError, match="bytes"):
        repack("Q8_0", np.zeros(30, np.uint8), 1, 32, "t")
