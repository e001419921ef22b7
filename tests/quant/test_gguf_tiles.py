"""GGUF blocks straight into the tile layout (kernels/gguf_tiles.py, the C++ op) give the bytes of the row repack
followed by tiled_copy(), its oracle, for every block type, in x86's layout and in ARM's (the op is plain C++ and
makes either on any host), with a row order applied as QuantWeight.rows() would."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

import llmchat.kernels as K
import llmchat.kernels.quant_neon_layout as neon_layout
from gguf_models import K_QUANTS, random_k_blocks
from llmchat.engine import LLM
from llmchat.engine.layers.linear import Linear
from llmchat.engine.quant.gguf_blocks import repack
from llmchat.kernels.gguf_tiles import TYPES, takes, tiled_from_gguf

pytestmark = pytest.mark.skipif(not K.available(), reason="needs the compiled kernels")
LEGACY = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]


def file_blocks(type_name: str, rows: int, cols: int, seed: int) -> np.ndarray:
    if type_name in K_QUANTS:
        return random_k_blocks(type_name, rows, cols, seed)
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    return quantize(x, T[type_name])


def same_weight(got, want) -> None:
    assert (got.kind, got.source, got.min_offset, got.tiled) == (want.kind, want.source, want.min_offset, True)
    assert [(t.shape, t.dtype) for t in got.present()] == [(t.shape, t.dtype) for t in want.present()]
    for a, b in zip(got.present(), want.present()):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("arm", [False, True], ids=["x86", "arm"])
@pytest.mark.parametrize("type_name,bits", [(t, "") for t in TYPES] + [("Q6_K", "8")])
def test_the_op_makes_the_oracles_bytes(type_name, bits, arm, monkeypatch):
    """bits "8": Q6_K held as int8 values (LLMCHAT_Q6K_BITS=8)."""
    monkeypatch.setattr(neon_layout, "ACTIVE", arm)
    monkeypatch.setenv("LLMCHAT_Q6K_BITS", bits)
    rows, cols = 48, 512
    raw = file_blocks(type_name, rows, cols, seed=len(type_name) + rows)
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(3))
    oracle = repack(type_name, raw, rows, cols)
    got = tiled_from_gguf(type_name, raw, rows, cols)
    same_weight(got, oracle.tiled_copy(wide_q8=False))
    same_weight(tiled_from_gguf(type_name, raw, rows, cols, order), oracle.rows(order).tiled_copy(wide_q8=False))
    # and it means the file's numbers: dequantized through the layout's own inverse
    assert torch.equal(got.dequantize(), torch.from_numpy(dequantize(raw, T[type_name])).reshape(rows, cols))


def test_the_op_runs_in_the_kernels_as_the_oracle_does():
    """A weight made by the op multiplies as the oracle's tiled weight does (where this machine has tiles)."""
    if not K.tiles_native():
        pytest.skip("no tile layout runs on this machine")
    raw = random_k_blocks("Q4_K", 32, 512, seed=5)
    x = torch.randn(3, 512)
    want = repack("Q4_K", raw, 32, 512).tiled_copy()
    assert torch.equal(K.quant_linear(x, tiled_from_gguf("Q4_K", raw, 32, 512)), K.quant_linear(x, want))


def test_bad_tensors_get_clear_errors():
    raw = random_k_blocks("Q4_K", 16, 256, seed=1)
    assert not takes("Q4_K", 8, 256) and not takes("Q4_K", 16, 96) and not takes("IQ2_XS", 16, 256)
    with pytest.raises(ValueError, match="16-row groups"):
        tiled_from_gguf("Q4_K", raw[:8], 8, 256)
    with pytest.raises(ValueError, match="raw must hold"):
        tiled_from_gguf("Q4_K", raw.reshape(-1)[:-1], 16, 256)
    with pytest.raises(ValueError, match="order must lie"):
        tiled_from_gguf("Q4_K", raw, 16, 256, torch.arange(16) + 1)


@pytest.mark.skipif(not K.tiles_native(), reason="a load tiles where the kernels run a tile layout (x86 VNNI, ARM)")
@pytest.mark.parametrize("arch", ["llama", "qwen2"])   # llama: q/k rows reordered from llama.cpp's order
def test_a_load_writes_every_weight_once_in_place(store, tiny_gguf, arch):
    """A GGUF load tiles each file tensor straight into its rows of its projection's run, all in one buffer
    (engine/quant/gguf_tile_plan.py): the weights are those of the row repack (a load without tiles), number for
    number, and no run was concatenated or copied after it was written."""
    path = str(store.import_path(tiny_gguf(arch, "mixed")).path)
    tiled = LLM(path, dtype="float32", kv_cache_gb=0.02, prepared_cache=False).engine.runner.model
    rows = LLM(path, dtype="float32", kv_cache_gb=0.02, prepared_cache=False, quant_tiles=False).engine.runner.model
    def runs(model):
        return {m.prefix: m.quantized_run_calls() for m in model.modules() if isinstance(m, Linear) and m.is_quantized}
    placed, oracle = runs(tiled), runs(rows)
    assert placed.keys() == oracle.keys()
    weights = [w for calls in placed.values() for _, w in calls] + [tiled.quantized_embedding]
    assert all(w.tiled for w in weights)
    assert len({w.values.untyped_storage().data_ptr() for w in weights}) == 1   # one buffer, laid out up front
    for prefix, calls in placed.items():
        want = torch.cat([w.dequantize() for _, w in oracle[prefix]])
        assert torch.equal(torch.cat([w.dequantize() for _, w in calls]), want), prefix
    assert torch.equal(tiled.quantized_embedding.dequantize(), rows.quantized_embedding.dequantize())
