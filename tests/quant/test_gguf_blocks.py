"""Every GGUF block type the engine runs repacks losslessly: the kernels' weights dequantize bit for bit to
what the gguf package's dequantize gives for the same bytes (odd row counts, several blocks per row)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

import llmchat.kernels as K
import llmchat.kernels.quant_neon_layout as neon_layout
from gguf_models import K_QUANTS, random_k_blocks
from llmchat.engine.quant.gguf_blocks import UnsupportedTensorType, dense, repack
from llmchat.kernels.quant import QuantWeight, holds_q6, reference_linear, tiles_isa

ROUND_TRIP = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]   # the gguf package can write these itself


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
    assert w.kind == {"Q4_K": "q4", "Q5_K": "q5", "Q6_K": "q6" if holds_q6() else "q8h"}[type_name]
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


# Both tile layouts (x86's and ARM's) hold K-quants in the file's factors (small integers, one fp16 per 256). ARM's
# runs them as the same numbers as the fp32 factors of the layout without them (compact=False, the oracle), so
# the same bits; x86's runs whole super-blocks in integers (activations per 256, quant_tiles.h), so its oracle is
# that math's reference, and a row keeps its bits whatever the step size. bytes held : the file's, exactly (Q4_K/Q5_K's sc and m in their 6 bits: 144 and 176 bytes a
# super-block; Q6_K in its own 6 bits, 210, on x86; held as 8-bit values with its i8 sc elsewhere: 274)
COMPACT_BOUND = {"Q4_K": (144, 144), "Q5_K": (176, 176), "Q6_K": (210, 210) if holds_q6() else (274, 210)}


@pytest.mark.skipif(not K.tiles_native(), reason="a tile layout: x86 with AVX512-VNNI, or ARM (the CI's ARM job)")
@pytest.mark.parametrize("type_name", list(K_QUANTS))
def test_k_quant_tiles_keep_the_file_factors(type_name):
    rows, cols = 48, 512
    raw = random_k_blocks(type_name, rows, cols, seed=7)
    want = torch.from_numpy(dequantize(raw, T[type_name]))
    w = repack(type_name, raw, rows, cols)
    compact, fp32 = w.tiled_copy(), w.tiled_copy(compact=False)
    assert compact.compact and compact.scales.dtype == torch.uint8 and not fp32.compact
    held, file = COMPACT_BOUND[type_name]
    assert compact.nbytes * file <= held * raw.nbytes and fp32.nbytes * file > held * raw.nbytes
    assert torch.equal(compact.dequantize(), want) and torch.equal(compact.untiled().dequantize(), want)
    back = compact.untiled()
    assert all(torch.equal(a, b) for a, b in zip(back.present(), w.present()))
    assert all(torch.equal(a, b) for a, b in zip(back.tiled_copy().present(), compact.present()))
    assert compact.super_blocks == (not neon_layout.ACTIVE)
    for dtype in (torch.float32, torch.bfloat16):
        rows_x = torch.randn(40, cols, generator=torch.Generator().manual_seed(40)).to(dtype)
        full = K.quant_linear(rows_x, compact)
        for m in (1, 3, 16, 17, 33):   # VNNI, and AMX for whole 16-token tiles where granted; SDOT and SMMLA
            x = torch.randn(m, cols, generator=torch.Generator().manual_seed(m)).to(dtype)
            got = K.quant_linear(x, compact)
            if compact.super_blocks:  # one token tile, two and more (B planes), the VNNI tail: the same rows
                assert torch.equal(K.quant_linear(rows_x[5:5 + m], compact), full[5:5 + m]), (dtype, m)
            else:
                assert torch.equal(got, K.quant_linear(x, fp32)), (dtype, m)
            ref = reference_linear(x, compact).double()
            tol = {torch.float32: 2e-5, torch.bfloat16: 1e-2}[dtype]
            # (these random blocks make outputs of hundreds: the error is relative to the output's scale)
            assert ((got.double() - ref).abs() / (1 + ref.abs().amax())).max().item() < tol
    ids = torch.tensor([0, 47, 17, 30, 17, 5])
    assert torch.equal(K.quant_rows(compact, ids, torch.float32), K.quant_rows(fp32, ids, torch.float32))
    assert torch.equal(K.quant_rows(compact, ids, torch.float32), want[ids])
    x = torch.randn(5, cols)
    whole = compact.rows(slice(16, 48))   # whole groups: stays compact and tiled
    assert whole.compact and torch.equal(K.quant_linear(x, whole), K.quant_linear(x, compact)[:, 16:48])
    both = type(w).cat([compact.rows(slice(0, 16)), whole])
    assert torch.equal(K.quant_linear(x, both), K.quant_linear(x, compact))
    assert torch.equal(w.rows(slice(3, 21)).dequantize(), want[3:21])
    copy = w.with_tensors([t.clone() for t in w.present()])
    copy = type(w)(**{**copy.__dict__, "packed_factors": tuple(None if t is None else t.clone()
                                                               for t in w.packed_factors)})
    in_place = copy.tile_in_place()
    assert in_place.compact and torch.equal(K.quant_linear(x, in_place), K.quant_linear(x, compact))
    into = w.tile_into([torch.empty_like(t) for t in w.present_for_tiles()])
    assert all(torch.equal(a, b) for a, b in zip(into.present(), compact.present()))


@pytest.mark.parametrize("type_name,bits", [("Q4_K", ""), ("Q5_K", ""), ("Q6_K", ""), ("Q6_K", "8")])
def test_the_arm_tile_layout_keeps_the_file_factors_too(type_name, bits, monkeypatch):
    """On any host, the reordering an ARM machine does (pure torch): a K-quant tiles with the file's factor bytes
    (Q6_K in its 6 bits, and as 8-bit values with its i8 sc under LLMCHAT_Q6K_BITS=8), back to the same row
    weight, dequantized as the file is; the op on ARM runs it in the emulated CI job
    (test_k_quant_tiles_keep_the_file_factors)."""
    import llmchat.kernels.quant_neon_layout as neon_layout
    monkeypatch.setattr(neon_layout, "ACTIVE", True)
    monkeypatch.setenv("LLMCHAT_Q6K_BITS", bits)
    rows, cols = 48, 512
    raw = random_k_blocks(type_name, rows, cols, seed=9)
    want = torch.from_numpy(dequantize(raw, T[type_name]))
    w = repack(type_name, raw, rows, cols)
    assert w.kind in ("q4", "q5", "q6", "q8h") and neon_layout.takes(w.kind)
    compact, fp32 = w.tiled_copy(), w.tiled_copy(compact=False)
    assert compact.compact and not fp32.compact and torch.equal(compact.values, fp32.values)
    held, file = {"q4": (144, 144), "q5": (176, 176), "q6": (210, 210), "q8h": (274, 210)}[w.kind]
    assert compact.nbytes * file <= held * raw.nbytes < fp32.nbytes * file
    assert torch.equal(compact.dequantize(), want) and torch.equal(fp32.dequantize(), want)
    back = compact.untiled()
    assert all(torch.equal(a, b) for a, b in zip(back.present(), w.present()))
    assert all(torch.equal(a, b) for a, b in zip(back.packed_factors, w.packed_factors) if a is not None)
    assert all(torch.equal(a, b) for a, b in zip(back.tiled_copy().present(), compact.present()))
    into = w.tile_into([torch.empty_like(t) for t in w.present_for_tiles()])
    assert all(torch.equal(a, b) for a, b in zip(into.present(), compact.present()))
    assert torch.equal(compact.rows(slice(16, 48)).dequantize(), want[16:48])


@pytest.mark.skipif(not K.tiles_native(), reason="a tile layout (x86 with AVX512-VNNI, ARM) runs Q6_K in 6 bits")
def test_q6_k_in_its_own_6_bits_gives_the_bits_of_its_8_bit_form(monkeypatch):
    """Q6_K held as nibbles and two bit planes ("q6", the default here) dequantizes as the file does and is read
    into the same bytes its 8-bit form ("q8h": one int8 a weight, LLMCHAT_Q6K_BITS=8) holds, so every path gives
    the same bits, in the file's bytes."""
    rows, cols = 48, 768
    raw = random_k_blocks("Q6_K", rows, cols, seed=11)
    monkeypatch.setenv("LLMCHAT_Q6K_BITS", "8")
    assert not holds_q6()
    eight = repack("Q6_K", raw, rows, cols)
    monkeypatch.delenv("LLMCHAT_Q6K_BITS")
    assert holds_q6()
    six = repack("Q6_K", raw, rows, cols)
    want = torch.from_numpy(dequantize(raw, T["Q6_K"]))
    assert eight.kind == "q8h" and six.kind == "q6"
    assert torch.equal(six.dequantize(), want) and torch.equal(eight.dequantize(), want)
    ids = torch.tensor([0, 47, 17, 30, 17, 5])
    for a, b in [(six, eight), (six.tiled_copy(), eight.tiled_copy())]:
        assert a.nbytes < b.nbytes
        for dtype in (torch.float32, torch.bfloat16):
            for m in (1, 3, 16, 17, 33):   # VNNI, and AMX for whole 16-token tiles where granted; SDOT and SMMLA
                x = torch.randn(m, cols, generator=torch.Generator().manual_seed(m)).to(dtype)
                assert torch.equal(K.quant_linear(x, a), K.quant_linear(x, b)), (a.tiled, dtype, m)
        assert torch.equal(K.quant_rows(a, ids, torch.float32), K.quant_rows(b, ids, torch.float32))
    assert six.tiled_copy().nbytes == raw.nbytes   # 6 bits, int8 sub-block scales and an fp16 per 256


@pytest.mark.parametrize("type_name", ROUND_TRIP + list(K_QUANTS))
def test_a_large_tensor_repacked_in_row_groups_is_the_same_weight(type_name, monkeypatch):
    """Row groups (a few rows here, 16 MB of file in a real load) fill the same tensors as one repack."""
    import llmchat.engine.quant.gguf_blocks as blocks
    rows, cols = 23, 512
    if type_name in K_QUANTS:
        raw = random_k_blocks(type_name, rows, cols, seed=7)
    else:
        raw = quantize(np.random.default_rng(7).standard_normal((rows, cols)).astype(np.float32), T[type_name])
    whole = repack(type_name, raw, rows, cols)
    row_bytes = raw.size // rows
    monkeypatch.setattr(blocks, "REPACK_CHUNK_BYTES", 5 * row_bytes)   # groups of 5 rows, the last of 3
    grouped = repack(type_name, raw, rows, cols)
    pairs = [(whole.values, grouped.values), (whole.scales, grouped.scales), (whole.mins, grouped.mins),
             (whole.high, grouped.high)] + list(zip(whole.packed_factors or (), grouped.packed_factors or ()))
    for a, b in pairs:
        assert (a is None and b is None) or (a.dtype == b.dtype and torch.equal(a, b))
    assert (whole.kind, whole.source, whole.min_offset) == (grouped.kind, grouped.source, grouped.min_offset)
    assert torch.equal(grouped.dequantize(), torch.from_numpy(dequantize(raw, T[type_name])))
