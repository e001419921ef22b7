"""GGUF block tensors straight into the tile layout, in C++ on the kernels' threads (csrc/core/gguf_tiles.h).

`tiled_from_gguf` gives the QuantWeight that repacking the blocks to rows and then `tiled_copy()` gives (x86's
layout, or ARM's on aarch64), byte for byte, in one pass over the file's bytes: no fp32 factors, no temporaries
of several bytes a weight. A model load then holds about the file's bytes and takes about as long as reading it.
The row repack (engine/quant/gguf_blocks.py) followed by `tiled_copy()` is its oracle, and stays the path for
weights the tiles do not take.
"""
from __future__ import annotations

import numpy as np
import torch

import llmchat.kernels.quant_neon_layout as neon_layout
from ._loader import require
from .quant import QuantWeight, holds_q6

TYPES = {"Q8_0": 0, "Q4_0": 1, "Q4_1": 2, "Q5_0": 3, "Q5_1": 4, "Q4_K": 5, "Q5_K": 6, "Q6_K": 7}
BLOCK_ELEMENTS = {"Q4_K": 256, "Q5_K": 256, "Q6_K": 256}   # 32 for the others
KINDS = {"Q8_0": "q8", "Q4_0": "q4", "Q4_1": "q4", "Q5_0": "q5", "Q5_1": "q5", "Q4_K": "q4", "Q5_K": "q5"}
MIN_OFFSET = {"Q4_0": -8, "Q5_0": -16}
WITH_MINS = ("Q4_1", "Q5_1", "Q4_K", "Q5_K")
_NONE = torch.empty(0, dtype=torch.uint8)


def takes(type_name: str, rows: int, cols: int) -> bool:
    """Whether tiled_from_gguf makes this tensor: a block type it knows, in whole 16-row groups and blocks."""
    return type_name in TYPES and rows > 0 and rows % 16 == 0 and cols % BLOCK_ELEMENTS.get(type_name, 32) == 0


def kind_of(type_name: str) -> str:
    if type_name == "Q6_K":
        return "q6" if holds_q6() else "q8h"
    return KINDS[type_name]


def tiled_from_gguf(type_name: str, raw: np.ndarray | torch.Tensor, rows: int, cols: int,
                    order: torch.Tensor | None = None) -> QuantWeight:
    """The tensor's raw blocks (uint8, rows * row bytes) as a tiled QuantWeight of `rows` rows; `order`: output
    row n is the file's row order[n] (a permutation, e.g. llama.cpp's q/k rotary order undone)."""
    require()
    if not takes(type_name, rows, cols):
        raise ValueError(f"a [{rows}, {cols}] {type_name} tensor does not tile (16-row groups of whole blocks)")
    kind = kind_of(type_name)
    nibbles, supers, blocks = kind in ("q4", "q5", "q6"), cols // 256, cols // 32
    values = torch.empty(rows, cols // 2 if nibbles else cols, dtype=torch.uint8 if nibbles else torch.int8)
    planes = {"q5": 1, "q6": 2}.get(kind, 0)
    high = torch.empty(rows, planes * blocks, dtype=torch.int32) if planes else None
    if type_name == "Q6_K":
        scales = torch.empty(rows, 18 * supers, dtype=torch.uint8)
    elif type_name in BLOCK_ELEMENTS:
        scales = torch.empty(rows, 8 * supers, dtype=torch.uint8)
    else:
        scales = torch.empty(rows, blocks, dtype=torch.float16)
    mins = torch.empty_like(scales) if type_name in WITH_MINS else None
    source = torch.from_numpy(np.ascontiguousarray(raw).reshape(-1).view(np.uint8)) if isinstance(raw, np.ndarray) \
        else raw.reshape(-1)
    torch.ops.llmchat.gguf_tiles(source, TYPES[type_name], rows, cols, order, neon_layout.ACTIVE, kind == "q8h",
                                 values, _NONE if high is None else high, scales, _NONE if mins is None else mins)
    return QuantWeight(kind, values, scales, mins, high, type_name, MIN_OFFSET.get(type_name, 0), tiled=True)


def register_fake() -> None:
    torch.library.register_fake("llmchat::gguf_tiles", lambda *args, **kwargs: None)
