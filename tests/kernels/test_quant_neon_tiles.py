"""The ARM tile layout of quantized weights (kernels/csrc/core/quant_tiles_neon.h, kernels/quant_neon_layout.py):
on aarch64 `tiled_copy()` interleaves row pairs in 8-byte chunks, SMMLA's operand order. Anywhere: the
reordering is exact and puts each byte where the header says. On an ARM machine (the emulated CI job): the op
matches the torch reference for every kind with every factor storage and dtype, rows keep their bits whatever M
or the thread count (decode on SDOT, prefill on SMMLA), row lookups and group slices work, for every kind."""
from __future__ import annotations

import pytest
import torch

import llmchat.kernels as K
from llmchat.kernels import quant_neon_layout as neon_layout
from llmchat.kernels.quant import reference_linear
from quant_helpers import FACTORS, random_weight
from test_quant_linear import TOL, relative_error

on_arm = pytest.mark.skipif(not (K.available() and K.tiles_isa() in ("neon+i8mm", "neon+dotprod", "neon", "scalar")
                                 and neon_layout.ACTIVE), reason="the ARM tile layout runs on aarch64")


@pytest.fixture
def arm_layout(monkeypatch):
    """QuantWeight's reordering as an aarch64 machine does it (pure torch: runs on any host)."""
    monkeypatch.setattr(neon_layout, "ACTIVE", True)


@pytest.mark.parametrize("kind", ["q8", "q8h", "q4", "q5"])
def test_bytes_lie_where_the_header_says(kind):
    w = random_weight(kind, 32, 96, seed=4)
    tiled = neon_layout.tile_values(w.values, kind)
    row_block, nb = (16 if kind in ("q4", "q5") else 32), 3
    flat_rows, flat_tiled = w.values.reshape(-1), tiled.reshape(-1)
    for r, b, i in [(0, 0, 0), (1, 0, 9), (5, 2, row_block - 1), (17, 1, 8), (30, 2, 3), (31, 0, row_block - 1)]:
        g, p, h, c, j = r // 16, r % 16 // 2, r % 2, i // 8, i % 8
        at = (g * nb + b) * 16 * row_block + p * 2 * row_block + c * 16 + h * 8 + j
        assert flat_tiled[at] == flat_rows[(r * nb + b) * row_block + i]
    assert torch.equal(neon_layout.untile_values(tiled, kind), w.values)


@pytest.mark.parametrize("kind", ["q8", "q8h", "q4", "q5"])
@pytest.mark.parametrize("factors", FACTORS)
@pytest.mark.parametrize("mins", [True, False])
def test_tiling_is_an_exact_reordering(arm_layout, kind, factors, mins):
    w = random_weight(kind, 48, 352, seed=5, factors=factors, mins=mins)
    assert w.tileable()
    tiled = w.tiled_copy()
    assert tiled.tiled and not tiled.wide_activations
    assert [t.shape for t in tiled.present()] == [t.shape for t in w.present()]
    assert not torch.equal(tiled.values, w.values)
    assert all(torch.equal(a, b) for a, b in zip(tiled.untiled().present(), w.present()))
    assert torch.equal(tiled.dequantize(), w.dequantize())
    in_place = w.with_tensors([t.clone() for t in w.present()]).tile_in_place()
    assert all(torch.equal(a, b) for a, b in zip(in_place.present(), tiled.present()))
    assert torch.equal(tiled.rows(slice(3, 21)).dequantize(), w.dequantize()[3:21])


def test_high_bits_lie_where_the_header_says():
    w = random_weight("q5", 32, 96, seed=6)
    tiled = neon_layout.tile_high(w.high).view(torch.int16).reshape(-1).to(torch.int64) & 0xFFFF
    rows = w.high.to(torch.int64) & 0xFFFFFFFF
    for r, b, e in [(0, 0, 0), (1, 0, 9), (5, 2, 31), (17, 1, 16), (30, 2, 7), (31, 0, 24)]:
        g, p, h, c, j = r // 16, r % 16 // 2, r % 2, e // 8, e % 8
        assert (tiled[(g * 3 + b) * 32 + 4 * p + c] >> (8 * h + j)) & 1 == (rows[r, b] >> e) & 1
    assert torch.equal(neon_layout.untile_high(neon_layout.tile_high(w.high)), w.high)


@on_arm
@pytest.mark.parametrize("kind", ["q8", "q8h", "q4", "q5"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 16, 32), (3, 48, 96), (16, 32, 576), (21, 80, 160), (70, 48, 64)])
@pytest.mark.parametrize("factors", FACTORS)
def test_matches_reference(kind, dtype, m, n, k, factors):
    w = random_weight(kind, n, k, seed=m * 1000 + n, factors=factors)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(n)).to(dtype)
    bias = torch.randn(n).to(dtype) if m % 2 else None
    assert relative_error(K.quant_linear(x, w.tiled_copy(), bias), reference_linear(x, w, bias)) <= TOL[dtype]


@on_arm
@pytest.mark.parametrize("kind", ["q8", "q8h", "q4", "q5"])
@pytest.mark.parametrize("factors", FACTORS)
def test_a_row_does_not_depend_on_the_batch_the_path_or_threads(kind, factors):
    """M = 1 runs SDOT block sums, M >= 2 SMMLA tiles (with i8mm), a lone last token its pair's first lane."""
    w = random_weight(kind, 80, 352, seed=3, factors=factors).tiled_copy()
    x = torch.randn(300, 352, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    full = K.quant_linear(x, w)
    threads = torch.get_num_threads()
    try:
        for m, nthreads in [(1, 1), (7, threads), (16, 1), (17, threads), (40, 1), (64, threads)]:
            torch.set_num_threads(nthreads)
            for start in (0, 5, 233):
                assert torch.equal(K.quant_linear(x[start:start + m], w), full[start:start + m]), (m, nthreads, start)
    finally:
        torch.set_num_threads(threads)


@on_arm
@pytest.mark.parametrize("kind", ["q8", "q8h", "q4", "q5"])
def test_row_lookups_and_slices(kind):
    w = random_weight(kind, 64, 128, seed=2)
    tiled = w.tiled_copy()
    ids = torch.tensor([0, 63, 17, 40, 17])
    assert torch.equal(K.quant_rows(tiled, ids, torch.float32), K.quant_rows(w, ids, torch.float32))
    x = torch.randn(5, 128)
    whole = tiled.rows(slice(16, 48))
    assert whole.tiled and torch.equal(K.quant_linear(x, whole), K.quant_linear(x, tiled)[:, 16:48])
