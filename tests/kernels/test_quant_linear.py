"""The quantized linear op against its torch reference (same activation quantization, exact integer dots in
float64): every weight kind, every dtype, M from 1 to 512, odd N, strided outputs; rows independent of M and
of the thread count; row dequantization exact."""
from __future__ import annotations

import pytest
import torch

import llmchat.kernels as K
from llmchat.kernels.quant import quantize_activations, reference_linear
from quant_helpers import FACTORS, KINDS, random_weight

TOL = {torch.float32: 2e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want.double()).abs() / (1 + want.double().abs())).max().item()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 1, 32), (1, 37, 64), (2, 16, 96), (3, 50, 576), (5, 33, 256),
                                   (17, 21, 160), (64, 40, 128), (512, 24, 64)])
@pytest.mark.parametrize("factors", FACTORS)
def test_matches_reference(kind, dtype, m, n, k, factors):
    w = random_weight(kind, n, k, seed=m * 1000 + n, factors=factors)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(n)).to(dtype)
    bias = torch.randn(n).to(dtype) if n % 2 else None
    got = K.quant_linear(x, w, bias)
    want = reference_linear(x, w, bias)
    assert relative_error(got, want) <= TOL[dtype]


@pytest.mark.parametrize("kind", KINDS)
def test_without_mins_and_into_a_column_slice(kind):
    w = random_weight(kind, 19, 128, mins=False)
    x = torch.randn(6, 128)
    wide = torch.full((6, 40), 7.0)
    K.quant_linear(x, w, out=wide[:, 5:24])
    assert relative_error(wide[:, 5:24], reference_linear(x, w)) <= TOL[torch.float32]
    assert (wide[:, :5] == 7).all() and (wide[:, 24:] == 7).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("factors", FACTORS)
def test_a_row_does_not_depend_on_the_batch_or_threads(kind, factors):
    """The Determinism issue's rule for projections: a row's bits are the same in a 1-row decode, a small
    batch and a prefill chunk, on any number of threads."""
    w = random_weight(kind, 70, 352, seed=3, factors=factors)
    x = torch.randn(300, 352, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    full = K.quant_linear(x, w)
    threads = torch.get_num_threads()
    try:
        for m, nthreads in [(1, 1), (2, threads), (3, 1), (7, threads), (64, 1)]:
            torch.set_num_threads(nthreads)
            for start in (0, 5, 233):
                part = K.quant_linear(x[start:start + m], w)
                assert torch.equal(part, full[start:start + m]), (m, nthreads, start)
    finally:
        torch.set_num_threads(threads)


def test_activation_quantization_matches_torch():
    x = torch.randn(9, 96) * torch.logspace(-3, 2, 96)
    x[2] = 0  # an all-zero block quantizes to zeros with d = 0
    q, d, dsum = quantize_activations(x)
    assert (q.abs() <= 127).all() and torch.all(d[2] == 0)
    recon = (q.view(9, 3, 32).float() * d.unsqueeze(-1)).view(9, 96)
    assert ((recon - x).abs() <= d.repeat_interleave(32, 1) / 2 + 1e-12).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("factors", FACTORS)
def test_rows_dequantize_exactly(kind, dtype, factors):
    w = random_weight(kind, 30, 96, seed=7, factors=factors)
    ids = torch.tensor([0, 29, 3, 3, 17])
    got = K.quant_rows(w, ids, dtype)
    assert torch.equal(got, w.dequantize()[ids].to(dtype))


def test_bad_inputs_are_clear_errors():
    w = random_weight("q4", 8, 64)
    with pytest.raises(ValueError, match="x must be"):
        K.quant_linear(torch.randn(2, 32), w)
    with pytest.raises(ValueError, match="ids must lie"):
        K.quant_rows(w, torch.tensor([8]), torch.float32)
    values, high, scales, mins = w.tensors()
    with pytest.raises(ValueError, match="kind must be"):
        torch.ops.llmchat.quant_linear(torch.randn(1, 64), values, high, scales, mins, 9, 0, None, torch.empty(1, 8))
    with pytest.raises(ValueError, match="min_offset must be"):
        torch.ops.llmchat.quant_linear(torch.randn(1, 64), values, high, scales, mins, 2, -3, None, torch.empty(1, 8))
