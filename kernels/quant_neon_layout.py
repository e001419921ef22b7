"""The ARM tile layout of quantized weights (csrc/core/quant_tiles_neon.h): what `QuantWeight.tiled_copy()`
makes on an aarch64 machine, where x86's order (csrc/core/quant_tiles.h) would serve no kernel. Groups of 16
rows, each block's row pairs interleaved in 8-byte chunks: the order SMMLA reads its weight operand in, so the
kernels interleave nothing per call. A byte permutation of the values; factors go group-major as on x86.
Kinds q8, q8h and q4: q5 stays in the row layout (`takes`)."""
from __future__ import annotations

import platform

import torch

ACTIVE = platform.machine().lower() in ("aarch64", "arm64")  # the layout `tiled` means on this machine
KINDS = ("q8", "q8h", "q4")
ROWS = 16


def takes(kind: str) -> bool:
    """Whether a weight of this kind can be tiled here (every kind on x86, all but q5 on ARM)."""
    return not ACTIVE or kind in KINDS


def _dims(values: torch.Tensor, kind: str) -> tuple[int, int, int]:
    row_block = 16 if kind == "q4" else 32  # bytes of one row's block: nibbles or int8
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
