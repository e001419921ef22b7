"""The ARM tile layout of quantized weights (kernels/csrc/core/quant_tiles_neon.h, kernels/quant_neon_layout.py):
on aarch64 `tiled_copy()` interleaves row pairs in 8-byte chunks, SMMLA's operand order. On any host: the
reordering is exact and puts each byte where the header says. The op itself on ARM:
test_quant_neon_tiles_on_arm.py."""
from __future__ import annotations

import pytest
import torch

from llmchat.kernels import quant_neon_layout as neon_layout
from quant_helpers import FACTORS, random_weight


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


@pytest.mark.parametrize("kind", ["q8", "q8h", "q4", "q5", "q6"])
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
    tiled = neon_layout.tile_high(w.high).view(torch.uint8).reshape(-1).to(torch.int64)
    rows = w.high.to(torch.int64) & 0xFFFFFFFF
    for r, b, e in [(0, 0, 0), (1, 0, 9), (5, 2, 31), (17, 1, 16), (30, 2, 7), (31, 0, 24), (3, 1, 13)]:
        g, p, h, c, j = r // 16, r % 16 // 2, r % 2, e // 8, e % 8
        assert (tiled[(g * 3 + b) * 64 + 16 * (p // 2) + 8 * h + j] >> (4 * (p % 2) + c)) & 1 == (rows[r, b] >> e) & 1
    assert torch.equal(neon_layout.untile_high(neon_layout.tile_high(w.high)), w.high)


def test_q6_high_bit_planes_lie_where_the_header_says():
    """Q6_K's bits 4 and 5 ([N, 2 nb]: per block a word of each): 128 bytes a group's block, [p][8h + j], bits
    2c + plane."""
    w = random_weight("q6", 32, 96, seed=8)
    tiled = neon_layout.tile_high(w.high, planes=2).view(torch.uint8).reshape(-1).to(torch.int64)
    rows = w.high.to(torch.int64) & 0xFFFFFFFF
    for r, b, e, plane in [(0, 0, 0, 0), (1, 0, 9, 1), (5, 2, 31, 1), (17, 1, 16, 0), (30, 2, 7, 1), (31, 0, 24, 0)]:
        g, p, h, c, j = r // 16, r % 16 // 2, r % 2, e // 8, e % 8
        got = tiled[(g * 3 + b) * 128 + 16 * p + 8 * h + j] >> (2 * c + plane) & 1
        assert got == (rows[r, 2 * b + plane] >> e) & 1
    assert torch.equal(neon_layout.untile_high(neon_layout.tile_high(w.high, planes=2), planes=2), w.high)
