"""kernels.linear_small_m vs torch F.linear: shapes, dtypes, bias, packed bf16 panels, threads, opcheck; the packed
path this build runs (packed_isa) and its rows' bits at every M (on ARM with bf16: BFDOT decode, BFMMLA tiles for
two or more tokens)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import llmchat.kernels as K


def reference(x, w, b):
    return F.linear(x.double(), w.double(), None if b is None else b.double())


def tol(dtype):
    return {torch.float32: 1e-4, torch.bfloat16: 1e-2}[dtype]


def assert_close(got, want, dtype):
    err = ((got.double() - want).abs() / (1 + want.abs())).max().item()
    assert err <= tol(dtype), f"max relative error {err}"


def test_extension_is_built():
    assert K.available(), K.load_error()


@pytest.mark.parametrize("dtype,packed", [(torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (1, 576, 576), (2, 33, 64), (3, 17, 31), (7, 100, 48),
                                   (16, 35, 577), (25, 64, 96), (40, 21, 130)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_f_linear(dtype, packed, m, n, k, bias):
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = torch.randn(n, k, generator=g).to(dtype)
    b = torch.randn(n, generator=g).to(dtype) if bias else None
    weight = K.pack_linear_weight(w) if packed else w
    out = K.linear_small_m(x, weight, b, out_features=n)
    assert out.shape == (m, n) and out.dtype == dtype
    assert_close(out, reference(x, w, b), dtype)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_give_the_same_result(threads):
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(9, 576, generator=g).bfloat16(), torch.randn(1000, 576, generator=g).bfloat16()
    packed = K.pack_linear_weight(w)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        want = K.linear_small_m(x, packed, out_features=1000)
        torch.set_num_threads(threads)
        got = K.linear_small_m(x, packed, out_features=1000)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(got, want)  # each output is computed by one thread in a fixed order


# the vector path of the build -> what must run its packed panels
PACKED_PATHS = {"neon+bf16": {"neon+bf16+bfmmla"}, "avx512+bf16": {"avx512+bf16", "avx512+bf16+amx"}}


def test_packed_isa_names_the_path():
    assert K.packed_isa() in PACKED_PATHS.get(K.isa(), {"scalar"}), (K.isa(), K.packed_isa())
    assert K.packed_native() == (K.packed_isa() != "scalar")


@pytest.mark.parametrize("n,k", [(16, 4), (37, 31), (40, 6), (21, 130), (64, 577), (5, 1), (150, 203)])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_rows_have_the_same_bits_at_every_m(n, k, bias):
    """A token's row computed alone (decode: BFDOT on ARM) has the bits it has inside every step of 2..17 tokens
    (BFMMLA tiles on ARM with bf16): ragged N, every K mod 4, odd K."""
    g = torch.Generator().manual_seed(n * 1000 + k)
    x = (torch.randn(17, k, generator=g) * 4).bfloat16()
    w, b = torch.randn(n, k, generator=g).bfloat16(), torch.randn(n, generator=g).bfloat16() if bias else None
    packed = K.pack_linear_weight(w)
    alone = torch.cat([K.linear_small_m(x[t:t + 1], packed, b, out_features=n) for t in range(17)])
    for m in range(2, 18):
        got = K.linear_small_m(x[:m], packed, b, out_features=n)
        assert torch.equal(got.view(torch.int16), alone[:m].view(torch.int16)), f"M={m}"


def test_strided_rows_and_out_buffer():
    x = torch.randn(4, 80)[:, :64]  # row stride 80
    w, b = torch.randn(24, 64), torch.randn(24)
    out = torch.full((4, 40), 7.0)[:, 8:32]
    K.linear_small_m(x, w, b, out=out)
    assert_close(out, reference(x, w, b), torch.float32)


def test_pack_layout():
    w = torch.arange(17 * 3, dtype=torch.float32).view(17, 3).bfloat16()
    p = K.pack_linear_weight(w)
    assert p.shape == (2, 2, 32)
    assert p[0, 0, 2 * 5 + 1] == w[5, 1] and p[1, 1, 0] == w[16, 2] and p[1, 1, 1] == 0 and p[1, 0, 2] == 0


def test_bad_inputs_raise_value_error():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="weight"):
        K.linear_small_m(x, torch.randn(4, 9))
    with pytest.raises(ValueError, match="dtype"):
        K.linear_small_m(x, torch.randn(4, 8).bfloat16())
    with pytest.raises(ValueError, match="bias"):
        K.linear_small_m(x, torch.randn(4, 8), torch.randn(5))
    with pytest.raises(ValueError, match="packed"):
        K.linear_small_m(x, torch.randn(1, 4, 32), out_features=4)
    with pytest.raises(ValueError, match="bfloat16"):
        K.pack_linear_weight(torch.randn(4, 8))


@pytest.mark.parametrize("packed", [False, True])
def test_opcheck(packed):
    w = torch.randn(40, 48).bfloat16()
    weight = K.pack_linear_weight(w) if packed else w
    args = (torch.randn(3, 48).bfloat16(), weight, torch.randn(40).bfloat16(), torch.empty(3, 40).bfloat16())
    torch.library.opcheck(torch.ops.llmchat.linear_small_m.default, args)
