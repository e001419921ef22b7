"""GGUF block tensors straight into the kernels' layouts, in C++ on the kernels' threads (csrc/core/gguf_tiles.h).

`from_gguf` gives the QuantWeight that repacking the blocks to rows and then `tiled_copy()` gives (x86's tile
layout, or ARM's on aarch64), byte for byte, in one pass over the file's bytes: no fp32 factors, no temporaries
of several bytes a weight; with tiles=False, the row repack's weight itself (x86 without AVX512-VNNI, or the
tiles switched off). A model load then holds what the kernels read and takes about as long as reading the file.
The row repack (engine/quant/gguf_blocks.py), followed by `tiled_copy()` for the tiles, is its oracle.
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


def takes(type_name: str, rows: int, cols: int, tiles: bool = True) -> bool:
    """Whether from_gguf makes this tensor: a block type it knows, in whole blocks (and for the tiles, whole
    16-row groups)."""
    return (type_name in TYPES and rows > 0 and (not tiles or rows % 16 == 0)
            and cols % BLOCK_ELEMENTS.get(type_name, 32) == 0)


def kind_of(type_name: str) -> str:
    if type_name == "Q6_K":
        return "q6" if holds_q6() else "q8h"
    return KINDS[type_name]


def specs(type_name: str, rows: int, cols: int, tiles: bool = True) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """(shape, dtype) of the weight's tensors, in QuantWeight.present() order (values, scales, mins, high)."""
    kind = kind_of(type_name)
    nibbles, supers, blocks = kind in ("q4", "q5", "q6"), cols // 256, cols // 32
    specs = [((rows, cols // 2 if nibbles else cols), torch.uint8 if nibbles else torch.int8)]
    if type_name in BLOCK_ELEMENTS and not tiles:   # fp32 factors per sub-block
        specs.append(((rows, cols // 16 if type_name == "Q6_K" else blocks), torch.float32))
    elif type_name == "Q6_K":
        specs.append(((rows, 18 * supers), torch.uint8))
    elif type_name in BLOCK_ELEMENTS:
        specs.append(((rows, 8 * supers), torch.uint8))
    else:
        specs.append(((rows, blocks), torch.float16))
    if type_name in WITH_MINS:
        specs.append(specs[-1])
    planes = {"q5": 1, "q6": 2}.get(kind, 0)
    if planes:
        specs.append(((rows, planes * blocks), torch.int32))
    return specs


def weight(type_name: str, tensors: list[torch.Tensor], tiles: bool = True) -> QuantWeight:
    """A QuantWeight of this type on `tensors` (shaped as specs), whatever they hold."""
    it = iter(tensors)
    values, scales = next(it), next(it)
    mins = next(it) if type_name in WITH_MINS else None
    high = next(it, None)
    return QuantWeight(kind_of(type_name), values, scales, mins, high, type_name, MIN_OFFSET.get(type_name, 0),
                       tiled=tiles)


def empty(type_name: str, rows: int, cols: int, tiles: bool = True) -> QuantWeight:
    """A weight of this type and shape on new, unwritten tensors (filled by from_gguf(into=...))."""
    return weight(type_name, [torch.empty(shape, dtype=dtype) for shape, dtype in specs(type_name, rows, cols, tiles)],
                  tiles)


def from_gguf(type_name: str, raw: np.ndarray | torch.Tensor, rows: int, cols: int,
              order: torch.Tensor | None = None, into: QuantWeight | None = None, tiles: bool = True) -> QuantWeight:
    """The tensor's raw blocks (uint8, rows * row bytes) as a QuantWeight of `rows` rows in the tile layout (or
    with tiles=False the row layout); `order`: output row n is the file's row order[n] (a permutation, e.g.
    llama.cpp's q/k rotary order undone). into: a weight of specs' shapes (e.g. rows of a larger one, laid out
    in advance) to write into, else new tensors."""
    require()
    if not takes(type_name, rows, cols, tiles):
        raise ValueError(f"a [{rows}, {cols}] {type_name} tensor does not {'tile (16-row groups' if tiles else 'repack ('}"
                         f"{' of' if tiles else ''} whole blocks)")
    shapes = specs(type_name, rows, cols, tiles)
    if into is None:
        w = empty(type_name, rows, cols, tiles)
    else:
        w = into
        if [(tuple(t.shape), t.dtype) for t in w.present()] != shapes or (w.kind, w.tiled) != (kind_of(type_name), tiles):
            raise ValueError(f"a [{rows}, {cols}] {type_name} tensor does not fit the weight it should fill")
    source = torch.from_numpy(np.ascontiguousarray(raw).reshape(-1).view(np.uint8)) if isinstance(raw, np.ndarray) \
        else raw.reshape(-1)
    layout = (2 if neon_layout.ACTIVE else 1) if tiles else 0
    torch.ops.llmchat.gguf_tiles(source, TYPES[type_name], rows, cols, order, layout, w.kind == "q8h",
                                 w.values, _NONE if w.high is None else w.high, w.scales,
                                 _NONE if w.mins is None else w.mins)
    return w


def register_fake() -> None:
    torch.library.register_fake("llmchat::gguf_tiles", lambda *args, **kwargs: None)
