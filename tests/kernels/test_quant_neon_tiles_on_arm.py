"""The ARM tile layout of quantized weights on an ARM machine (the emulated CI job, .ci/arm/inside; on other hosts
tests/kernels/conftest.py leaves this file out): the op matches the torch reference for every kind, factor
storage and dtype, rows keep their bits whatever M or the thread count (decode on SDOT, prefill on SMMLA), and
row lookups and group slices work."""
from __future__ import annotations

import pytest
import torch

import llmchat.kernels as K
from llmchat.kernels import quant_neon_layout as neon_layout
from llmchat.kernels.quant import reference_linear
from quant_helpers import FACTORS, NEON_TILE_KINDS, assert_rows_keep_their_bits, random_weight
from test_quant_linear import TOL, relative_error


def test_this_machine_runs_the_arm_tile_layout():
    assert neon_layout.ACTIVE and K.tiles_isa() in ("neon+i8mm", "neon+dotprod", "neon", "scalar"), K.tiles_isa()


@pytest.mark.parametrize("kind", NEON_TILE_KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 16, 32), (3, 48, 96), (16, 32, 576), (21, 80, 160), (70, 48, 64)])
@pytest.mark.parametrize("factors", FACTORS)
def test_matches_reference(kind, dtype, m, n, k, factors):
    w = random_weight(kind, n, k, seed=m * 1000 + n, factors=factors)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(n)).to(dtype)
    bias = torch.randn(n).to(dtype) if m % 2 else None
    assert relative_error(K.quant_linear(x, w.tiled_copy(), bias), reference_linear(x, w, bias)) <= TOL[dtype]


@pytest.mark.parametrize("kind", NEON_TILE_KINDS)
@pytest.mark.parametrize("factors", FACTORS)
def test_a_row_does_not_depend_on_the_batch_the_path_or_threads(kind, factors):
    """M = 1 runs SDOT block sums, M >= 2 SMMLA tiles (with i8mm), a lone last token its pair's first lane."""
    assert_rows_keep_their_bits(random_weight(kind, 80, 352, seed=3, factors=factors).tiled_copy())


@pytest.mark.parametrize("kind", NEON_TILE_KINDS)
def test_row_lookups_and_slices(kind):
    w = random_weight(kind, 64, 128, seed=2)
    tiled = w.tiled_copy()
    ids = torch.tensor([0, 63, 17, 40, 17])
    assert torch.equal(K.quant_rows(tiled, ids, torch.float32), K.quant_rows(w, ids, torch.float32))
    x = torch.randn(5, 128)
    whole = tiled.rows(slice(16, 48))
    assert whole.tiled and torch.equal(K.quant_linear(x, whole), K.quant_linear(x, tiled)[:, 16:48])
