"""GGUF block types -> the kernels' QuantWeight (llmchat.kernels.quant), losslessly.

Each decoder mirrors the gguf package's dequantize for its type: it extracts the same integers and the same
fp32 per-block factors, so `QuantWeight.dequantize()` gives exactly what `gguf.quants.dequantize` gives.
Signed 4/5-bit types (Q4_0, Q5_0) become unsigned values with min = -8 d (-16 d), kept as min_offset and not
stored: d * q - 8 d is exact in fp32, so nothing rounds differently. Types whose factors are fp16 in the file
(Q8_0, Q4_0/1, Q5_0/1) keep them in fp16, so memory is the file's size. K-quants' 6-bit sub-block scales are
folded into fp32 scales per 32 (d * sc and dmin * m are exact products of an fp16 and a small integer), and
kept as the file has them too (`packed_factors`: the integers and the fp16 d, -dmin per 256), which the tile
layouts (x86, ARM) run instead: a Q4_K weight then takes the file's bytes, not 2 bits a weight more. Q6_K keeps its 6 bits
("q6") where a tile layout runs them (x86 with AVX512-VNNI, ARM), else it is widened to 8 ("q8h").
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from llmchat.kernels.gguf_tiles import MIN_OFFSET   # signed types: min = offset * scale
from llmchat.kernels.quant import QuantWeight, holds_q6

QK_K = 256
# type name -> (block elements, bytes per block)
BLOCKS = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
          "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210)}
DENSE = ("F32", "F16", "BF16")
SUPPORTED = DENSE + tuple(BLOCKS)
REPACK_CHUNK_BYTES = 16 << 20   # file bytes repacked at a time (see repack)


class UnsupportedTensorType(ValueError):
    pass


def _f16(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view(np.float16).astype(np.float32)


def _nibble_bytes(q: np.ndarray) -> np.ndarray:
    """u8 values [rows, K] (< 16 after masking) -> the kernels' nibbles [rows, K/2]: per block of 32, byte j
    holds element j (low) and element j + 16 (high)."""
    b = (q & 15).reshape(q.shape[0], -1, 2, 16)
    return (b[:, :, 0] | (b[:, :, 1] << 4)).reshape(q.shape[0], -1).astype(np.uint8)


def _high_bits(q: np.ndarray, planes: int = 1) -> np.ndarray:
    """Bits 4 .. 3 + planes of each value -> int32 [rows, planes K/32]: per block a word per bit, bit j =
    element j of the block (packed a byte per 8 bits: no wider temporaries than the values)."""
    rows = q.shape[0]
    words = [np.packbits(((q >> (4 + p)) & 1).astype(np.uint8).reshape(rows, -1, 32), axis=-1, bitorder="little")
             .view("<u4")[..., 0] for p in range(planes)]
    return np.stack(words, axis=-1).reshape(rows, -1).view(np.int32)


HALF_FACTORS = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")   # fp16 scales (and mins) in the file


def _packed(ints: np.ndarray, supers: np.ndarray, rows: int) -> torch.Tensor:
    """Integers [blocks, S] (u8 or i8) and fp16 bits [blocks] of 256-element super-blocks -> uint8 [rows, S' +
    2 supers]: a row's integers, then its fp16 super-factors (QuantWeight.packed_factors)."""
    ints = np.ascontiguousarray(ints).view(np.uint8).reshape(rows, -1)
    halves = np.ascontiguousarray(supers).view(np.uint8).reshape(rows, -1)
    return torch.from_numpy(np.concatenate([ints, halves], axis=1))


def _weight(kind: str, source: str, q: np.ndarray, scales: np.ndarray, mins: np.ndarray | None,
            packed: tuple | None = None) -> QuantWeight:
    rows = q.shape[0]
    dtype = np.float16 if source in HALF_FACTORS else np.float32   # fp16 -> fp32 -> fp16 is exact
    t = (lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32).astype(dtype).reshape(rows, -1)))
    if kind in ("q8", "q8h"):
        values = torch.from_numpy(np.ascontiguousarray(q.astype(np.int8)))
        return QuantWeight(kind, values, t(scales), None, None, source, packed_factors=packed)
    if kind == "q6":  # u = w + 32: nibbles and two bit planes (Q6_K's own 6 bits)
        u = (q + 32).astype(np.uint8)
        return QuantWeight(kind, torch.from_numpy(_nibble_bytes(u)), t(scales), None,
                           torch.from_numpy(_high_bits(u, planes=2)), source, packed_factors=packed)
    high = torch.from_numpy(_high_bits(q)) if kind == "q5" else None
    offset = MIN_OFFSET.get(source, 0)
    stored = None if offset else t(mins)
    return QuantWeight(kind, torch.from_numpy(_nibble_bytes(q)), t(scales), stored, high, source, offset,
                       packed_factors=packed)


def _q8_0(b):
    return "q8", b[:, 2:].view(np.int8), _f16(b[:, :2]), None


def _lo_hi(qs: np.ndarray) -> np.ndarray:
    """GGUF's 32-element nibble block (16 bytes: element j low, j + 16 high) -> u8 values [blocks, 32]."""
    return np.concatenate([qs & 15, qs >> 4], axis=-1)


def _qh(raw: np.ndarray) -> np.ndarray:
    """4 bytes of high bits -> bit 4 of each of 32 elements."""
    bits = np.ascontiguousarray(raw).view(np.uint32) >> np.arange(32, dtype=np.uint32)
    return ((bits & 1) << 4).astype(np.uint8)


def _q4_0(b):
    d = _f16(b[:, :2])
    return "q4", _lo_hi(b[:, 2:]), d, -8 * d


def _q4_1(b):
    return "q4", _lo_hi(b[:, 4:]), _f16(b[:, :2]), _f16(b[:, 2:4])


def _q5_0(b):
    d = _f16(b[:, :2])
    return "q5", _lo_hi(b[:, 6:]) | _qh(b[:, 2:6]), d, -16 * d


def _q5_1(b):
    return "q5", _lo_hi(b[:, 8:]) | _qh(b[:, 4:8]), _f16(b[:, :2]), _f16(b[:, 2:4])


def _k_scales(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: 12 bytes -> 8 six-bit scales and 8 six-bit mins (as gguf's Q4_K.get_scale_min)."""
    s = raw.reshape(-1, 3, 4)
    d, m, m_d = s[:, 0], s[:, 1], s[:, 2]
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc, mn


def _k_factors(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(scales, mins, the file's form: (sc, d bits, m, -dmin bits)) of Q4_K/Q5_K blocks."""
    d, dmin = _f16(b[:, :2]), _f16(b[:, 2:4])
    sc, mn = _k_scales(b[:, 4:16])
    neg_dmin = np.ascontiguousarray(b[:, 2:4]).view(np.uint16) ^ np.uint16(0x8000)   # -(dmin m) = m (-dmin)
    file_form = (sc, np.ascontiguousarray(b[:, :2]).view(np.uint16), mn, neg_dmin)
    return d * sc.astype(np.float32), -(dmin * mn.astype(np.float32)), file_form


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """128 bytes -> 8 sub-blocks of 32: sub-block 2i is the low nibbles of bytes 32i.., 2i + 1 the high ones."""
    qs = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (qs & 15).reshape(-1, 8, 32)


def _q4_k(b):
    scales, mins, file_form = _k_factors(b)
    return "q4", _k_nibbles(b[:, 16:]), scales, mins, file_form


def _q5_k(b):
    scales, mins, file_form = _k_factors(b)
    qh = b[:, 16:48].reshape(-1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    return "q5", _k_nibbles(b[:, 48:]) | ((qh & 1) << 4), scales, mins, file_form


def _q6_k(b):
    ql = b[:, :128].reshape(-1, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    ql = (ql & 15).reshape(-1, 8, 32)
    qh = b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    qh = (qh & 3).reshape(-1, 8, 32)
    q = (ql | (qh << 4)).astype(np.int16) - 32
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8)
    scales = sc.astype(np.float32) * _f16(b[:, 208:210])
    kind = "q6" if holds_q6() else "q8h"
    return kind, q, scales, None, (sc, np.ascontiguousarray(b[:, 208:210]).view(np.uint16), None, None)


DECODERS = {"Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1,
            "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}


def unsupported(type_name: str, tensor: str) -> UnsupportedTensorType:
    return UnsupportedTensorType(
        f"tensor {tensor} is of GGUF type {type_name}, which llmchat cannot run yet (it runs {', '.join(SUPPORTED)})")


def repack(type_name: str, raw: np.ndarray, rows: int, cols: int, tensor: str = "?") -> QuantWeight:
    """Raw GGUF blocks of a [rows, cols] tensor (any shape holding rows * blocks-per-row blocks) -> QuantWeight.
    A large tensor is repacked a group of rows at a time into the whole weight's tensors: numpy's temporaries
    (several bytes per weight) then never exist for all of a token table at once."""
    if type_name not in DECODERS:
        raise unsupported(type_name, tensor)
    elems, size = BLOCKS[type_name]
    if cols % elems:
        raise ValueError(f"tensor {tensor}: rows of {cols} are not whole {type_name} blocks of {elems}")
    blocks = np.ascontiguousarray(raw).reshape(-1)
    if blocks.size != rows * cols // elems * size:
        raise ValueError(f"tensor {tensor}: {blocks.size} bytes, a [{rows}, {cols}] {type_name} tensor has "
                         f"{rows * cols // elems * size}")
    row_bytes = cols // elems * size
    step = max(1, REPACK_CHUNK_BYTES // row_bytes)
    if rows <= step:
        return _repack_rows(type_name, blocks, rows, cols)
    whole = None
    for start in range(0, rows, step):
        count = min(step, rows - start)
        part = _repack_rows(type_name, blocks[start * row_bytes:(start + count) * row_bytes], count, cols)
        whole = whole if whole is not None else _rows_like(part, rows)
        for dst, src in zip(_row_tensors(whole), _row_tensors(part)):
            dst[start:start + count].copy_(src)
    return whole


def _repack_rows(type_name: str, blocks: np.ndarray, rows: int, cols: int) -> QuantWeight:
    _, size = BLOCKS[type_name]
    kind, q, scales, mins, *file_form = DECODERS[type_name](blocks.reshape(-1, size))
    packed = None
    if file_form:   # K-quants: the factors as the file has them, for the tile layout
        sc, d, mn, neg_dmin = file_form[0]
        packed = (_packed(sc, d, rows), None if mn is None else _packed(mn, neg_dmin, rows))
    return _weight(kind, type_name, np.asarray(q).reshape(rows, cols), np.asarray(scales).reshape(rows, -1),
                   None if mins is None else np.asarray(mins).reshape(rows, -1), packed)


def _row_tensors(w: QuantWeight) -> list[torch.Tensor]:
    """Every tensor of a row-layout weight whose first dimension is its rows."""
    tensors = [w.values, w.scales, w.mins, w.high, *(w.packed_factors or ())]
    return [t for t in tensors if t is not None]


def _rows_like(part: QuantWeight, rows: int) -> QuantWeight:
    """An uninitialized weight of `rows` rows shaped like `part` (filled by repack, group by group)."""
    empty = (lambda t: None if t is None else torch.empty((rows, *t.shape[1:]), dtype=t.dtype))
    packed = tuple(empty(t) for t in part.packed_factors) if part.packed_factors is not None else None
    return replace(part, values=empty(part.values), scales=empty(part.scales), mins=empty(part.mins),
                   high=empty(part.high), packed_factors=packed)


def dense(type_name: str, raw: np.ndarray, rows: int, cols: int) -> torch.Tensor:
    """F32/F16/BF16 GGUF data -> a float tensor [rows, cols] (or [cols] for rows == 0)."""
    shape = (rows, cols) if rows else (cols,)
    a = np.ascontiguousarray(raw).reshape(-1)
    if type_name == "F32":
        return torch.from_numpy(a.view(np.float32).copy()).reshape(shape)
    if type_name == "F16":
        return torch.from_numpy(a.view(np.float16).copy()).reshape(shape)
    return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).reshape(shape)
