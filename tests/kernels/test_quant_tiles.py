"""The tile layout of quantized weights (kernels/csrc/core/quant_tiles.h): on x86 with AVX512-VNNI a weight of
16-row groups is reordered so the VNNI block dots and the AMX-INT8 tiles read one copy. The reordering is
exact, the op matches the torch reference of the same math for every kind, dtype and M (AMX for whole 16-token
tiles, VNNI for the rest), and a row's bits do not depend on M, the path or the thread count."""
from __future__ import annotations

import pytest
import torch

import llmchat.kernels as K
from llmchat.kernels.quant import reference_linear
from quant_helpers import FACTORS, KINDS, assert_rows_keep_their_bits, random_weight
from test_quant_linear import TOL, relative_error

pytestmark = pytest.mark.skipif(not K.tiles_isa().startswith("avx512"),  # ARM's layout: test_quant_neon_tiles.py
                                reason="the tile layout is built on x86 with AVX512-VNNI")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("factors", FACTORS)
@pytest.mark.parametrize("mins", [True, False])
def test_tiling_is_an_exact_reordering(kind, factors, mins):
    w = random_weight(kind, 48, 352, seed=5, factors=factors, mins=mins)
    tiled = w.tiled_copy()
    assert tiled.tiled and [t.shape for t in tiled.present()] == [t.shape for t in w.present()]
    assert any(not torch.equal(a, b) for a, b in zip(tiled.present(), w.present()))  # really reordered
    back = tiled.untiled()
    assert all(torch.equal(a, b) for a, b in zip(back.present(), w.present()))
    assert torch.equal(tiled.dequantize(), w.dequantize())
    in_place = w.rows(slice(0, 48)).with_tensors([t.clone() for t in w.present()]).tile_in_place()
    assert all(torch.equal(a, b) for a, b in zip(in_place.present(), tiled.present()))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 16, 32), (3, 48, 96), (16, 32, 576), (21, 80, 160), (33, 16, 256),
                                   (70, 48, 64), (512, 32, 128)])
@pytest.mark.parametrize("factors", FACTORS)
def test_matches_reference(kind, dtype, m, n, k, factors):
    w = random_weight(kind, n, k, seed=m * 1000 + n, factors=factors)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(n)).to(dtype)
    bias = torch.randn(n).to(dtype) if m % 2 else None
    tiled = w.tiled_copy()
    got = K.quant_linear(x, tiled, bias)
    assert relative_error(got, reference_linear(x, tiled, bias)) <= TOL[dtype]


@pytest.mark.parametrize("m", [1, 5, 16, 40])
def test_q8_takes_16_bit_activations_on_tiles(m):
    """A tiled Q8 weight quantizes its activations to 16 bits: against the float product of the same weight
    its error is far below the row layout's 8-bit activations (whose error is mostly that quantization)."""
    w = random_weight("q8", 48, 576, seed=m, factors="f16")
    tiled = w.tiled_copy()
    assert tiled.wide_activations and not w.wide_activations and tiled.code == 12
    x = torch.randn(m, 576, generator=torch.Generator().manual_seed(m)) * torch.logspace(-2, 1, 576)
    exact = x.double() @ w.dequantize().double().T
    wide_error = (K.quant_linear(x, tiled).double() - exact).abs().mean()
    row_error = (K.quant_linear(x, w).double() - exact).abs().mean()
    assert wide_error * 100 < row_error
    assert not tiled.untiled().wide_activations and tiled.rows(slice(16, 32)).wide_activations


def test_16_bit_activations_match_torch():
    from llmchat.kernels.quant import quantize_activations
    x = torch.randn(9, 96) * torch.logspace(-3, 2, 96)
    x[2] = 0
    q, d, dsum = quantize_activations(x, wide=True)
    assert (q.abs() <= 32639).all() and torch.all(d[2] == 0) and q.abs().max() == 32639
    recon = (q.view(9, 3, 32).float() * d.unsqueeze(-1)).view(9, 96)
    # x * (1 / d) rounds twice in float: a value may land up to ~32639 * 2^-23 of a step past the half
    assert ((recon - x).abs() <= d.repeat_interleave(32, 1) * (0.5 + 32639 * 3e-7) + 1e-12).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("factors", FACTORS)
def test_a_row_does_not_depend_on_the_batch_the_path_or_threads(kind, factors):
    """Whole 16-token tiles run on AMX where granted and the rest on VNNI: a row's bits are the same in a
    1-row decode, a 7-row batch (VNNI), a 16-row tile, a 40-row step (2 x 2 tiles and a tail) and a prefill."""
    assert_rows_keep_their_bits(random_weight(kind, 80, 352, seed=3, factors=factors).tiled_copy())


@pytest.mark.parametrize("kind", KINDS)
def test_row_lookups_and_slices(kind):
    w = random_weight(kind, 64, 128, seed=2)
    tiled = w.tiled_copy()
    ids = torch.tensor([0, 63, 17, 40, 17])
    assert torch.equal(K.quant_rows(tiled, ids, torch.float32), K.quant_rows(w, ids, torch.float32))
    x = torch.randn(5, 128)
    whole = tiled.rows(slice(16, 48))   # whole groups: a view that stays tiled
    assert whole.tiled and whole.values.data_ptr() == tiled.values.data_ptr() + 16 * tiled.values.stride(0)
    assert torch.equal(K.quant_linear(x, whole), K.quant_linear(x, tiled)[:, 16:48])
    part = tiled.rows(slice(3, 21))     # not whole groups: the row layout, the same values
    assert not part.tiled and torch.equal(part.dequantize(), w.dequantize()[3:21])


def test_bad_tiled_weights_are_refused():
    w = random_weight("q8", 16, 64)
    values, high, scales, mins = w.tensors()
    with pytest.raises(ValueError, match="multiple of 16 rows"):
        torch.ops.llmchat.quant_linear(torch.randn(1, 64), values[:8], high, scales[:8], mins, 4, 0, None,
                                       torch.empty(1, 8))
    with pytest.raises(ValueError, match="N = 20"):
        random_weight("q4", 20, 64).tiled_copy()
