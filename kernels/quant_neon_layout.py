"""The ARM tile layout of quantized weights (csrc/core/quant_tiles_neon.h): what `QuantWeight.tiled_copy()`
makes on an aarch64 machine, where x86's order (csrc/core/quant_tiles.h) would serve no kernel. Groups of 16
rows, each block's row pairs interleaved in 8-byte chunks: the order SMMLA reads its weight operand in, so the
kernels interleave nothing per call. A byte permutation of the values, q5's high bits as one 16-bit mask per
SMMLA operand; factors go group-major as on x86. Every kind tiles (`takes` says which kinds may)."""
from __future__ import annotations

import platform

import torch

ACTIVE = platform.machine().lower() in ("aarch64", "arm64")  # the layout `tiled` means on this machine
KINDS = ("q8", "q8h", "q4", "q5")
ROWS = 16


def takes(kind: str) -> bool:
    """Whether a weight of this kind can be tiled here (KINDS: every kind, on x86 and ARM)."""
    return not ACTIVE or kind in KINDS


def _dims(values: torch.Tensor, kind: str) -> tuple[int, int, int]:
    row_block = 16 if kind in ("q4", "q5") else 32  # bytes of one row's block: nibbles or int8
    return values.shape[0] // ROWS, values.shape[1] // row_block, row_block // 8


def tile_values(values: torch.Tensor, kind: str) -> torch.Tensor:
    """Row-layout values [N, bytes] -> the layout's order, same shape: [g, p, h, b, c, j] -> [g, b, p, c, h, j]
    (row 16g + 2p + h, block b, chunk c of 8 bytes j)."""
    groups, nb, chunks = _dims(values, kind)
    v = values.view(groups, ROWS // 2, 2, nb, chunks, 8).permute(0, 3, 1, 4, 2, 5)
    return v.contiguous().view(values.shape)


def untile_values(values: torch.Tensor, kind: str) -> torch.Tensor:
    groups, nb, chunks = _dims(values, kind)
    v = values.view(groups, nb, ROWS // 2, chunks, 2, 8).permute(0, 2, 4, 1, 3, 5)
    return v.contiguous().view(values.shape)


def tile_high(high: torch.Tensor) -> torch.Tensor:
    """q5's high bits [N, nb] int32 (bit e = bit 4 of element e) -> 32 uint16 a group's block, [p][c]: bit 8h + j
    = bit 4 of element 8c + j of row 16g + 2p + h (same shape and dtype)."""
    n, nb = high.shape
    groups = n // ROWS
    bits = (high.to(torch.int64).view(groups, ROWS // 2, 2, nb, 1) >> torch.arange(32)) & 1   # [g, p, h, b, e]
    bits = bits.view(groups, ROWS // 2, 2, nb, 4, 8).permute(0, 3, 1, 4, 2, 5).reshape(groups, nb, ROWS // 2, 4, 16)
    words = (bits << torch.arange(16)).sum(-1)                                  # [g, b, p, c] as 0..65535
    return words.to(torch.int32).to(torch.int16).contiguous().view(torch.int32).view(high.shape)  # wraps like uint16


def untile_high(high: torch.Tensor) -> torch.Tensor:
    n, nb = high.shape
    groups = n // ROWS
    words = high.contiguous().view(torch.int16).to(torch.int64).view(groups, nb, ROWS // 2, 4, 1) & 0xFFFF
    bits = (words >> torch.arange(16)) & 1                                      # [g, b, p, c, h j]
    bits = bits.view(groups, nb, ROWS // 2, 4, 2, 8).permute(0, 2, 4, 1, 3, 5).reshape(n, nb, 32)
    return (bits << torch.arange(32)).sum(-1).to(torch.int32)                   # wraps like uint32
