"""The ARM tile layout of quantized weights (csrc/core/quant_tiles_neon.h): what `QuantWeight.tiled_copy()`
makes on an aarch64 machine, where x86's order (csrc/core/quant_tiles.h) would serve no kernel. Groups of 16
rows, each block's row pairs interleaved in 8-byte chunks: the order SMMLA reads its weight operand in, so the
kernels interleave nothing per call. A byte permutation of the values, q5's high bits (and q6's two planes) as
one 16-bit mask per SMMLA operand; factors go group-major as on x86, compact K-quant factors in x86's bytes.
Every kind tiles (`takes` says which kinds may)."""
from __future__ import annotations

import platform

import numpy as np
import torch

ACTIVE = platform.machine().lower() in ("aarch64", "arm64")  # the layout `tiled` means on this machine
KINDS = ("q8", "q8h", "q4", "q5", "q6")
ROWS = 16


def takes(kind: str) -> bool:
    """Whether a weight of this kind can be tiled here (KINDS: every kind, on x86 and ARM)."""
    return not ACTIVE or kind in KINDS


def _dims(values: torch.Tensor, kind: str) -> tuple[int, int, int]:
    row_block = 16 if kind in ("q4", "q5", "q6") else 32  # bytes of one row's block: nibbles or int8
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


GROUPS_AT_ONCE = 2048  # 16-row groups of a bit plane reordered at a time: a byte per bit, ~50 MB of temporaries


def tile_high(high: torch.Tensor, planes: int = 1) -> torch.Tensor:
    """q5's high bits [N, nb] int32 (bit e = bit 4 of element e) -> 64 bytes a group's block, [p / 2][8h + j]: bit
    4 (p % 2) + c = bit 4 of element 8c + j of row 16g + 2p + h (same shape and dtype). planes = 2: q6's [N, 2 nb], per block
    a word of bit 4 then one of bit 5 -> 128 bytes a group's block, [p][8h + j]: bits 2c + plane = that plane's
    bit of element 8c + j of row 16g + 2p + h."""
    n, nb = high.shape[0], high.shape[1] // planes
    groups = n // ROWS
    rows = np.ascontiguousarray(high.numpy()).view(np.uint8).reshape(groups, ROWS // 2, 2, nb, planes, 4)
    out = np.empty((groups, nb, ROWS // 2, 2, 8) if planes == 2 else (groups, nb, ROWS // 4, 2, 8), dtype=np.uint8)
    for g in range(0, groups, GROUPS_AT_ONCE):
        bits = np.unpackbits(rows[g:g + GROUPS_AT_ONCE], axis=-1, bitorder="little")   # [g, p, h, b, plane, e]
        bits = bits.reshape(*bits.shape[:5], 4, 8)                                       # e = 8c + j
        if planes == 2:   # -> [g, b, p, h, j, c, plane]: a byte of 4 crumbs a lane
            bits = bits.transpose(0, 3, 1, 2, 6, 5, 4)
            out[g:g + GROUPS_AT_ONCE] = np.packbits(bits.reshape(*bits.shape[:5], 8), axis=-1, bitorder="little")[..., 0]
        else:             # p = 2q + odd -> [g, b, q, h, j, odd, c]: a byte of two row pairs' 4 bits a lane
            bits = bits[:, :, :, :, 0].reshape(bits.shape[0], ROWS // 4, 2, 2, nb, 4, 8).transpose(0, 4, 1, 3, 6, 2, 5)
            out[g:g + GROUPS_AT_ONCE] = np.packbits(bits.reshape(*bits.shape[:5], 8), axis=-1, bitorder="little")[..., 0]
    return torch.from_numpy(out.reshape(n, -1).view(np.int32).reshape(high.shape))


def untile_high(high: torch.Tensor, planes: int = 1) -> torch.Tensor:
    n, nb = high.shape[0], high.shape[1] // planes
    groups = n // ROWS
    tiles = np.ascontiguousarray(high.numpy()).view(np.uint8)
    out = np.empty((groups, ROWS // 2, 2, nb, planes, 4), dtype=np.uint8)
    for g in range(0, groups, GROUPS_AT_ONCE):
        if planes == 2:   # [g, b, p, h, j, crumb bits (c, plane)] -> [g, p, h, b, plane, c, j]
            part = tiles.reshape(groups, nb, ROWS // 2, 2, 8, 1)[g:g + GROUPS_AT_ONCE]
            bits = np.unpackbits(part, axis=-1, bitorder="little").reshape(*part.shape[:5], 4, 2)
            bits = bits.transpose(0, 2, 3, 1, 6, 5, 4)
        else:             # [g, b, q, h, j, (odd, c)] -> [g, p = 2q + odd, h, b, plane, c, j]
            part = tiles.reshape(groups, nb, ROWS // 4, 2, 8, 1)[g:g + GROUPS_AT_ONCE]
            bits = np.unpackbits(part, axis=-1, bitorder="little").reshape(*part.shape[:5], 2, 4)
            bits = bits.transpose(0, 2, 5, 3, 1, 6, 4).reshape(part.shape[0], ROWS // 2, 2, nb, 1, 4, 8)
        out[g:g + GROUPS_AT_ONCE] = np.packbits(bits.reshape(*bits.shape[:5], 32), axis=-1, bitorder="little")
    return torch.from_numpy(out.reshape(n, -1).view(np.int32).reshape(high.shape))
