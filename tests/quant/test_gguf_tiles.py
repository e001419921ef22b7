"""GGUF blocks straight into the kernels' layouts (kernels/gguf_tiles.py, the C++ op) give the bytes of the row
repack, followed by tiled_copy() for the tiles, its oracle: for every block type, in the row layout, x86's tile
layout and ARM's (the op is plain C++ and makes each on any host), with a row order applied as QuantWeight.rows()
would."""
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
from llmchat.engine.quant import gguf_model, gguf_tensors
from llmchat.engine.quant.gguf_blocks import repack
from llmchat.engine.quant.gguf_tensors import read_tensors
from llmchat.kernels.gguf_tiles import TYPES, from_gguf, takes

pytestmark = pytest.mark.skipif(not K.available(), reason="needs the compiled kernels")
LEGACY = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]


def file_blocks(type_name: str, rows: int, cols: int, seed: int) -> np.ndarray:
    if type_name in K_QUANTS:
        return random_k_blocks(type_name, rows, cols, seed)
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    return quantize(x, T[type_name])


def same_weight(got, want) -> None:
    assert (got.kind, got.source, got.min_offset, got.tiled) == (want.kind, want.source, want.min_offset, want.tiled)
    assert [(t.shape, t.dtype) for t in got.present()] == [(t.shape, t.dtype) for t in want.present()]
    for a, b in zip(got.present(), want.present()):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("layout", ["x86", "arm", "rows"])
@pytest.mark.parametrize("type_name,bits", [(t, "") for t in TYPES] + [("Q6_K", "8")])
def test_the_op_makes_the_oracles_bytes(type_name, bits, layout, monkeypatch):
    """bits "8": Q6_K held as int8 values (LLMCHAT_Q6K_BITS=8). The row layout takes any row count."""
    monkeypatch.setattr(neon_layout, "ACTIVE", layout == "arm")
    monkeypatch.setenv("LLMCHAT_Q6K_BITS", bits)
    tiles = layout != "rows"
    rows, cols = (48, 512) if tiles else (37, 512)
    raw = file_blocks(type_name, rows, cols, seed=len(type_name) + rows)
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(3))
    oracle = repack(type_name, raw, rows, cols)
    laid_out = (lambda w: w.tiled_copy(wide_q8=False)) if tiles else (lambda w: w)
    got = from_gguf(type_name, raw, rows, cols, tiles=tiles)
    same_weight(got, laid_out(oracle))
    same_weight(from_gguf(type_name, raw, rows, cols, order, tiles=tiles), laid_out(oracle.rows(order)))
    # and it means the file's numbers: dequantized through the layout's own inverse
    assert torch.equal(got.dequantize(), torch.from_numpy(dequantize(raw, T[type_name])).reshape(rows, cols))


def test_the_op_runs_in_the_kernels_as_the_oracle_does():
    """A weight made by the op multiplies as the oracle's tiled weight does (where this machine has tiles)."""
    if not K.tiles_native():
        pytest.skip("no tile layout runs on this machine")
    raw = random_k_blocks("Q4_K", 32, 512, seed=5)
    x = torch.randn(3, 512)
    want = repack("Q4_K", raw, 32, 512).tiled_copy()
    assert torch.equal(K.quant_linear(x, from_gguf("Q4_K", raw, 32, 512)), K.quant_linear(x, want))


def test_bad_tensors_get_clear_errors():
    raw = random_k_blocks("Q4_K", 16, 256, seed=1)
    assert not takes("Q4_K", 8, 256) and not takes("Q4_K", 16, 96) and not takes("IQ2_XS", 16, 256)
    assert takes("Q4_K", 8, 256, tiles=False) and not takes("Q4_K", 8, 96, tiles=False)
    with pytest.raises(ValueError, match="16-row groups"):
        from_gguf("Q4_K", raw[:8], 8, 256)
    with pytest.raises(ValueError, match="raw must hold"):
        from_gguf("Q4_K", raw.reshape(-1)[:-1], 16, 256)
    with pytest.raises(ValueError, match="order must lie"):
        from_gguf("Q4_K", raw, 16, 256, torch.arange(16) + 1)
    with pytest.raises(ValueError, match="does not fit"):
        from_gguf("Q4_K", raw, 16, 256, into=from_gguf("Q4_K", raw, 16, 256, tiles=False))


@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "chunked"])
@pytest.mark.parametrize("quant_tiles", [True, False], ids=["tiles", "rows"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])   # llama: q/k rows reordered from llama.cpp's order
def test_a_load_writes_every_weight_once_in_place(store, tiny_gguf, arch, quant_tiles, chunked, monkeypatch):
    """A GGUF load writes each file tensor straight into its rows of its projection's run, all in one buffer
    (engine/quant/gguf_load_plan.py), in the tile layout where one runs (else, or with quant_tiles=False, the row
    layout): the weights are those of the numpy row repack, number for number, and no run was concatenated or
    copied after it was written. chunked: every tensor read 16 rows at a time (as a large table is)."""
    if chunked:
        monkeypatch.setattr(gguf_tensors, "READ_CHUNK", 1)
    path = str(store.import_path(tiny_gguf(arch, "mixed")).path)
    placed = LLM(path, dtype="float32", kv_cache_gb=0.02, prepared_cache=False,
                 quant_tiles=quant_tiles).engine.runner.model
    with pytest.MonkeyPatch.context() as mp:   # the oracle: the same load through the numpy repack (layout None)
        mp.setattr(gguf_model, "read_tensors", lambda *args, **kw: read_tensors(*args, **{**kw, "layout": None}))
        mp.setattr(gguf_model, "plan_load", lambda *args: gguf_model.LoadPlan())
        oracle = LLM(path, dtype="float32", kv_cache_gb=0.02, prepared_cache=False,
                     quant_tiles=quant_tiles).engine.runner.model
    def runs(model):
        return {m.prefix: m.quantized_run_calls() for m in model.modules() if isinstance(m, Linear) and m.is_quantized}
    got, want = runs(placed), runs(oracle)
    assert got.keys() == want.keys()
    weights = [w for calls in got.values() for _, w in calls] + [placed.quantized_embedding]
    tiles = quant_tiles and K.tiles_native()
    assert all(w.tiled == tiles for w in weights)
    assert len({w.values.untyped_storage().data_ptr() for w in weights}) == 1   # one buffer, laid out up front
    for prefix, calls in got.items():
        assert [(start, w.layout, w.n) for start, w in calls] == [(start, w.layout, w.n) for start, w in want[prefix]]
        for (_, a), (_, b) in zip(calls, want[prefix]):
            assert all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(a.present(), b.present()))
    table, table_want = placed.quantized_embedding, oracle.quantized_embedding
    assert all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(table.present(), table_want.present()))
