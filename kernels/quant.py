"""Quantized linear (GGUF-style block weights): out = x @ W.T (+ bias) on integer block dots.

A `QuantWeight` is the kernels' layout of one [N, K] weight in blocks of 32 (see csrc/core/quant_linear.h):
    "q8"  int8 values [N, K], scales [N, K/32]                     (GGUF Q8_0)
    "q8h" int8 values [N, K], scales [N, K/16]                     (GGUF Q6_K: 16-element sub-blocks)
    "q4"  nibbles [N, K/2] (block b: 16 bytes, low nibble = element j, high = j + 16), scales and mins
          [N, K/32]: w = scale * q + min                            (Q4_0, Q4_1, Q4_K)
    "q5"  as q4 plus high bits [N, K/32] int32 (bit j = bit 4 of element j)  (Q5_0, Q5_1, Q5_K)
    "q6"  q8h in 6 bits: u = w + 32 as q4's nibbles [N, K/2], high bits [N, K/16] int32 (per block two words:
          bit j = bit 4, then bit 5, of element j), scales [N, K/16]  (GGUF Q6_K where x86's tiles
          run it, unless LLMCHAT_Q6K_BITS=8; else q8h: `holds_q6()`)
Scales and mins are float32, or float16 where the GGUF file's are (Q8_0, Q4_0/1, Q5_0/1 keep their bytes);
`min_offset` (Q4_0: -8, Q5_0: -16) stands for min = min_offset * scale without storing mins.
K-quants (Q4_K, Q5_K, Q6_K) carry their factors as the file has them too (`packed_factors`, row order): a small
integer per block (Q4_K/Q5_K: sc and m, 0..63, u8; Q6_K: sc per 16, i8) and one fp16 per 256 elements (d, and
-dmin for the mins), as uint8 [N, S + 2 K/256] a row: S integers, then K/256 fp16. The x86 tile layout runs them
in that compact form (scales and mins uint8, quant_tiles.h), and so does the ARM tile layout (the same factor
bytes beside its own order of values); the row layout has the fp32 products instead, exactly the same numbers
(an 11-bit times an 8-bit significand is exact in fp32).
Activations are quantized per call to int8 in blocks of 32 (d = max|x| / 127, q = round-half-even(x / d)).
`reference_linear` is the same math in torch (the oracle of the op); `dequantize` gives the weight as floats,
exactly as the gguf package dequantizes the file it came from.
On x86 with AVX512-VNNI (`tiles_native()`), `tiled()` reorders a weight of N % 16 == 0 rows into 16-row
groups (csrc/core/quant_tiles.h): the same tensors' shapes and bytes, in the order the VNNI block dots and the
AMX-INT8 tiles read. A tiled weight is the only copy; `untiled()` gives the row layout back, exactly.
On aarch64 `tiled()` gives every kind the ARM layout instead (quant_neon_layout.py, csrc/core/quant_tiles_neon.h):
row pairs in 8-byte chunks, SMMLA's operand order, read by SMMLA prefill tiles and SDOT decode.
A tiled "q8" weight (Q8_0) takes 16-bit activations (`wide_activations`: d = max|x| / 32639, computed as two
int8 halves on the same integer dots): quantizing the activations is the largest error of an 8-bit weight's
dot, and at 16 bits it is 256x smaller, for twice the integer work.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import torch

import llmchat.kernels.quant_neon_layout as neon_layout
from ._loader import require

KINDS = {"q8": 0, "q8h": 1, "q4": 2, "q5": 3, "q6": 16}
BLOCK = 32
SUPER_BLOCK = 256  # a K-quant super-block
TILE_ROWS = 16  # weight rows per group of the tile layout
NIBBLE_KINDS = ("q4", "q5", "q6")  # values as nibbles [N, K/2]
HALVES_KINDS = ("q8h", "q6")       # a scale per 16 elements
SIX_BIT_FACTOR_KINDS = ("q4", "q5")  # K-quants whose sc and m are 6 bits, in the file and the compact tile layout
_EMPTY_I32 = torch.empty(0, dtype=torch.int32)
_EMPTY_F32 = torch.empty(0, dtype=torch.float32)


@dataclass
class QuantWeight:
    kind: str
    values: torch.Tensor
    scales: torch.Tensor
    mins: torch.Tensor | None = None
    high: torch.Tensor | None = None
    source: str = ""          # the GGUF type it came from, e.g. "Q4_K"
    min_offset: int = 0       # without mins: min = min_offset * scale
    tiled: bool = False       # the 16-row tile layout (csrc/core/quant_tiles.h), else rows
    wide_activations: bool = False  # 16-bit activations (a tiled q8 weight), else 8-bit
    packed_factors: tuple | None = None  # a row-layout K-quant's compact (scales, mins or None), row order

    @property
    def compact(self) -> bool:
        """Scales (and mins) as the file's integers and fp16 super-factors (a tiled K-quant)."""
        return self.scales.dtype == torch.uint8

    @property
    def super_blocks(self) -> bool:
        """Runs a K-quant's whole super-blocks in integers (x86's tile layout with compact factors, quant_tiles.h)."""
        return self.compact and self.tiled and not neon_layout.ACTIVE

    @property
    def n(self) -> int:
        return self.values.shape[0]

    @property
    def k(self) -> int:
        return self.values.shape[1] * (2 if self.kind in NIBBLE_KINDS else 1)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (self.values, self.scales, self.mins, self.high) if t is not None)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(values, high, scales, mins) as the op takes them (empty tensors where absent)."""
        return (self.values, self.high if self.high is not None else _EMPTY_I32, self.scales,
                self.mins if self.mins is not None else _EMPTY_F32)

    def present(self) -> list[torch.Tensor]:
        """The tensors this weight has (values, scales, then mins and high bits where present)."""
        return [t for t in (self.values, self.scales, self.mins, self.high) if t is not None]

    def with_tensors(self, tensors: list[torch.Tensor]) -> QuantWeight:
        """The same weight on other copies of `present()`, in that order."""
        it = iter(tensors)
        values, scales = next(it), next(it)
        mins = next(it) if self.mins is not None else None
        high = next(it) if self.high is not None else None
        return QuantWeight(self.kind, values, scales, mins, high, self.source, self.min_offset, self.tiled,
                           self.wide_activations, self.packed_factors)

    @property
    def code(self) -> int:
        """The op's kind argument: KINDS, plus 4 for the tile layout, plus 8 for 16-bit activations."""
        return KINDS[self.kind] + (4 if self.tiled else 0) + (8 if self.wide_activations else 0)

    def tileable(self) -> bool:
        return not self.tiled and self.n % TILE_ROWS == 0 and neon_layout.takes(self.kind)

    def _compacts(self, compact: bool) -> bool:
        return compact and self.packed_factors is not None

    def tiled_copy(self, wide_q8: bool = True, compact: bool = True) -> QuantWeight:
        """The weight in the 16-row tile layout (see the module doc): a reordering, exact. wide_q8: a q8 weight
        takes 16-bit activations where the layout has them (x86). compact: a K-quant keeps the file's integer
        factors (else fp32 factors, the same numbers)."""
        if not self.tileable():
            raise ValueError(f"only a row-layout weight of N % 16 == 0 rows tiles, got N = {self.n}"
                             f"{' (already tiled)' if self.tiled else ''}")
        if self._compacts(compact):  # the same factor bytes in both tile layouts
            six = self.kind in SIX_BIT_FACTOR_KINDS
            scales, mins = (None if t is None else _compact_group_major(t, self.k // 256, six)
                            for t in self.packed_factors)
        else:
            scales, mins = _group_major(self.scales), _group_major(self.mins)
        if neon_layout.ACTIVE:  # ARM: SMMLA's operand order (csrc/core/quant_tiles_neon.h)
            high = None if self.high is None else neon_layout.tile_high(self.high, 2 if self.kind == "q6" else 1)
            return replace(self, values=neon_layout.tile_values(self.values, self.kind), high=high,
                           scales=scales, mins=mins, tiled=True, packed_factors=None)
        groups, nb = self.n // TILE_ROWS, self.k // BLOCK
        if self.kind in ("q8", "q8h"):  # [g, n, b, r, j] -> [g, b, r, n, j], as u8 (w + 128)
            v = self.values.view(groups, TILE_ROWS, nb, 8, 4).permute(0, 2, 3, 1, 4) ^ -128
        else:                           # nibble bytes [g, n, b, r, j] -> [g, b, r, n, j]
            v = self.values.view(groups, TILE_ROWS, nb, 4, 4).permute(0, 2, 3, 1, 4)
        values = v.contiguous().view(self.values.shape)
        high = None
        if self.high is not None:      # per block 8 words (q6: 8 for bit 4, then 8 for bit 5)
            planes = self.high.view(groups * TILE_ROWS, nb, -1)
            words = torch.stack([_tile_plane(planes[:, :, p], groups) for p in range(planes.shape[2])], dim=2)
            high = words.contiguous().view(torch.int32).view(self.high.shape)
        return QuantWeight(self.kind, values, scales, mins, high, self.source, self.min_offset,
                           True).with_wide_q8(wide_q8)

    def with_wide_q8(self, wide_q8: bool) -> QuantWeight:
        """A tiled q8 weight taking 16-bit activations where the layout has them and wide_q8 asks for them
        (tiled_copy's choice, for a weight tiled elsewhere, e.g. from the file by kernels/gguf_tiles.py)."""
        return replace(self, wide_activations=self.tiled and self.kind == "q8" and wide_q8 and _wide_q8())

    def present_for_tiles(self, compact: bool = True) -> list[torch.Tensor]:
        """Tensors of the shapes and dtypes of tiled_copy(compact=compact).present(), in order: this weight's
        (its compact factors where the tiled copy takes them)."""
        if not self._compacts(compact):
            return self.present()
        return [t for t in (self.values, *map(self._compact_slot, self.packed_factors), self.high) if t is not None]

    def _compact_slot(self, t: torch.Tensor | None) -> torch.Tensor | None:
        """A view of the first bytes of row-order compact factors, shaped as their tile layout (Q4_K/Q5_K's
        integers shrink to 6 bits there)."""
        if t is None or self.kind not in SIX_BIT_FACTOR_KINDS:
            return t
        return t.view(-1)[:self.n * 8 * (self.k // 256)].view(self.n, 8 * (self.k // 256))

    def tile_into(self, tensors: list[torch.Tensor], wide_q8: bool = True, compact: bool = True) -> QuantWeight:
        """tiled_copy() written into `tensors` (shaped as present_for_tiles()), which it then owns."""
        tiled = self.tiled_copy(wide_q8, compact)
        for dst, src in zip(tensors, tiled.present(), strict=True):
            dst.copy_(src)
        return tiled.with_tensors(tensors)

    def tile_in_place(self, wide_q8: bool = True, compact: bool = True) -> QuantWeight:
        """tiled_copy() written over this weight's own tensors, which it then owns: compact factors (smaller
        than the fp32 ones) into the first bytes of the fp32 tensors. (To hold no more than the compact bytes,
        give tile_into() tensors shaped as present_for_tiles().)"""
        if not self._compacts(compact):
            return self.tile_into(self.present(), wide_q8, compact)
        own = {"values": self.values, "scales": self.scales, "mins": self.mins, "high": self.high}
        dst = []
        for name, t in zip(("values", "scales", "mins", "high"),
                           (self.values, *map(self._compact_slot, self.packed_factors), self.high)):
            if t is not None:
                dst.append(own[name] if name in ("values", "high") else
                           own[name].view(-1).view(torch.uint8)[:t.numel()].view(t.shape))
        return self.tile_into(dst, wide_q8, compact)

    def untiled(self) -> QuantWeight:
        """The row layout of a tiled weight (itself when it is not tiled)."""
        if not self.tiled:
            return self
        groups, nb = self.n // TILE_ROWS, self.k // BLOCK
        scales, mins, packed = _row_major(self.scales), _row_major(self.mins), None
        if self.compact:  # the fp32 factors of the row layout, and the compact ones to tile again
            subs = nb * (2 if self.kind in HALVES_KINDS else 1)
            six = self.kind in SIX_BIT_FACTOR_KINDS
            packed = tuple(None if t is None else _compact_row_major(t, self.k // 256, six)
                           for t in (self.scales, self.mins))
            scales = _expand_compact(packed[0], subs, signed=self.kind in HALVES_KINDS)
            mins = None if packed[1] is None else _expand_compact(packed[1], nb, signed=False)
        if neon_layout.ACTIVE:
            high = neon_layout.untile_high(self.high, 2 if self.kind == "q6" else 1) if self.high is not None else None
            return replace(self, values=neon_layout.untile_values(self.values, self.kind), high=high,
                           scales=scales, mins=mins, tiled=False, packed_factors=packed)
        if self.kind in ("q8", "q8h"):
            v = (self.values.view(groups, nb, 8, TILE_ROWS, 4) ^ -128).permute(0, 3, 1, 2, 4)
        else:
            v = self.values.view(groups, nb, 4, TILE_ROWS, 4).permute(0, 3, 1, 2, 4)
        values = v.contiguous().view(self.values.shape)
        high = None
        if self.high is not None:
            words = self.high.reshape(-1).view(torch.int64).view(groups, nb, -1, 8)
            planes = [_untile_plane(words[:, :, p], groups) for p in range(words.shape[2])]
            high = torch.stack(planes, dim=2).reshape(self.high.shape)
        return QuantWeight(self.kind, values, scales, mins, high, self.source, self.min_offset, False,
                           packed_factors=packed)

    def effective_mins(self) -> torch.Tensor | None:
        """fp32 mins [N, K/32]: stored ones, or min_offset * scale, or None."""
        if self.tiled:
            return self.untiled().effective_mins()
        if self.mins is not None:
            return self.mins.float()
        return self.min_offset * self.scales.float() if self.min_offset else None

    def rows(self, index: torch.Tensor | slice) -> QuantWeight:
        """The weight of rows `index` (a slice or a permutation): rows are independent blocks, so exact. A tiled
        weight keeps its layout for a slice of whole groups (a view), else gives rows in the row layout."""
        if self.tiled:
            if isinstance(index, slice) and index.step in (None, 1):
                lo, hi, _ = index.indices(self.n)
                if lo % TILE_ROWS == 0 and hi % TILE_ROWS == 0:
                    return self._group_slice(lo // TILE_ROWS, hi // TILE_ROWS)
            return self.untiled().rows(index)
        pick = (lambda t: None if t is None else t[index].contiguous())
        packed = None if self.packed_factors is None else tuple(pick(t) for t in self.packed_factors)
        return QuantWeight(self.kind, pick(self.values), pick(self.scales), pick(self.mins), pick(self.high),
                           self.source, self.min_offset, packed_factors=packed)

    def _group_slice(self, g0: int, g1: int) -> QuantWeight:
        def part(t):  # every tensor of a tiled weight is group-major: groups [g0, g1) are one contiguous run
            if t is None:
                return None
            per = t.shape[0] // (self.n // TILE_ROWS)
            return t[g0 * per:g1 * per]
        return QuantWeight(self.kind, part(self.values), part(self.scales), part(self.mins), part(self.high),
                           self.source, self.min_offset, True, self.wide_activations)

    @staticmethod
    def cat(parts: list[QuantWeight]) -> QuantWeight:
        """Row-wise concatenation of weights of one kind (fused projections)."""
        if len({p.layout for p in parts}) != 1:
            raise ValueError(f"cannot concatenate quantized weights of layouts {sorted({p.layout for p in parts})}")
        join = (lambda ts: None if ts[0] is None else torch.cat(ts))
        packed = None
        if all(p.packed_factors is not None for p in parts) and len({p.k for p in parts}) == 1:
            packed = tuple(join([p.packed_factors[i] for p in parts]) for i in range(2))
        return QuantWeight(parts[0].kind, join([p.values for p in parts]), join([p.scales for p in parts]),
                           join([p.mins for p in parts]), join([p.high for p in parts]),
                           "+".join(sorted({p.source for p in parts})), parts[0].min_offset, parts[0].tiled,
                           parts[0].wide_activations, packed)

    @property
    def layout(self) -> tuple:
        """What must agree for two weights to run as one op call."""
        return self.kind, self.mins is None, self.scales.dtype, self.min_offset, self.tiled, self.wide_activations

    def integers(self) -> torch.Tensor:
        """The quantized values as int32 [N, K] (u 0..31 for q4/q5, signed for q8/q8h/q6)."""
        if self.tiled:
            return self.untiled().integers()
        if self.kind in ("q8", "q8h"):
            return self.values.to(torch.int32)
        v = self.values.view(self.n, -1, 16).to(torch.int32)
        q = torch.cat([v & 15, v >> 4], dim=-1)                      # [N, nb, 32]
        if self.kind in ("q5", "q6"):
            planes = self.high.view(self.n, -1, 1 if self.kind == "q5" else 2, 1)
            bits = (planes >> torch.arange(32, dtype=torch.int32)) & 1    # [N, nb, plane, j]
            for p in range(bits.shape[2]):
                q = q | (bits[:, :, p] << (4 + p))
        if self.kind == "q6":
            q = q - 32
        return q.reshape(self.n, -1)

    def dequantize(self) -> torch.Tensor:
        """fp32 [N, K]: scale * q (+ min), rounded as the gguf package does (never a fused multiply-add)."""
        if self.tiled:
            return self.untiled().dequantize()
        q = self.integers().float().view(self.n, -1, 16 if self.kind in HALVES_KINDS else BLOCK)
        w = q * self.scales.float().unsqueeze(-1)
        mins = self.effective_mins()
        if mins is not None:
            w = w.view(self.n, -1, BLOCK) + mins.unsqueeze(-1)
        return w.reshape(self.n, self.k)


PLANE_GROUPS = 2048  # 16-row groups of a bit plane reordered at a time: its temporaries stay ~50 MB


def _tile_plane(high: torch.Tensor, groups: int) -> torch.Tensor:
    """One bit plane [N, nb] int32 (bit j: element j) -> int64 words [groups, nb, 8]: bit 4n + j of word r is the
    bit of element 4r + j of row n (a byte mask of B row r, quant_tiles.h). A byte per bit while reordering, a
    slice of groups at a time: a token table's plane is hundreds of millions of bits."""
    nb = high.shape[1]
    rows = np.ascontiguousarray(high.numpy()).view(np.uint8).reshape(groups, TILE_ROWS, nb, 4)
    out = np.empty((groups, nb, 8, 8), dtype=np.uint8)
    for g in range(0, groups, PLANE_GROUPS):
        bits = np.unpackbits(rows[g:g + PLANE_GROUPS], axis=-1, bitorder="little")      # [g, n, b, 32]
        bits = bits.reshape(-1, TILE_ROWS, nb, 8, 4).transpose(0, 2, 3, 1, 4).reshape(-1, nb, 8, 64)
        out[g:g + PLANE_GROUPS] = np.packbits(bits, axis=-1, bitorder="little")          # [g, b, r, 8 bytes]
    return torch.from_numpy(out.view(np.int64).reshape(groups, nb, 8))


def _untile_plane(words: torch.Tensor, groups: int) -> torch.Tensor:
    """_tile_plane's inverse: words [groups, nb, 8] int64 -> [N, nb] int32."""
    nb = words.shape[1]
    tiles = np.ascontiguousarray(words.numpy()).view(np.uint8).reshape(groups, nb, 8, 8)
    out = np.empty((groups, TILE_ROWS, nb, 4), dtype=np.uint8)
    for g in range(0, groups, PLANE_GROUPS):
        bits = np.unpackbits(tiles[g:g + PLANE_GROUPS], axis=-1, bitorder="little")     # [g, b, r, 4n + j]
        bits = bits.reshape(-1, nb, 8, TILE_ROWS, 4).transpose(0, 3, 1, 2, 4).reshape(-1, TILE_ROWS, nb, 32)
        out[g:g + PLANE_GROUPS] = np.packbits(bits, axis=-1, bitorder="little")          # [g, n, b, 4 bytes]
    return torch.from_numpy(out.view(np.int32).reshape(groups * TILE_ROWS, nb))


def holds_q6() -> bool:
    """Whether GGUF Q6_K is held in its own 6 bits ("q6", the file's bytes): where a tile layout runs it (x86
    with AVX512-VNNI, ARM), by default. There decode reads the fewest bytes and is faster for it
    (docs/performance.md); LLMCHAT_Q6K_BITS=8 widens it to 8 bits ("q8h", 1.3x those tensors' bytes) instead.
    Elsewhere (AVX2) it is always widened: only the tiles rebuild its bytes in registers (the row paths unpack 6
    bits one by one)."""
    if os.environ.get("LLMCHAT_Q6K_BITS", "").strip() == "8":
        return False
    try:
        return tiles_native()
    except RuntimeError:  # no compiled kernels: nothing runs the layout here
        return False


def _wide_q8() -> bool:
    """Whether the tile layout here runs Q8 with 16-bit activations: x86's does (quant_tiles.h)."""
    try:
        return tiles_isa().startswith("avx512")
    except RuntimeError:  # no compiled kernels: nothing runs the layout here
        return False


def _group_major(t: torch.Tensor | None) -> torch.Tensor | None:
    """Per-block factors [N, S] -> [N / 16, S, 16] order (same shape): 16 rows' factors side by side."""
    if t is None:
        return None
    return t.view(-1, TILE_ROWS, t.shape[1]).transpose(1, 2).contiguous().view(t.shape)


def _row_major(t: torch.Tensor | None) -> torch.Tensor | None:
    if t is None:
        return None
    return t.view(-1, t.shape[1], TILE_ROWS).transpose(1, 2).contiguous().view(t.shape)


def _compact_group_major(t: torch.Tensor, supers: int, six_bit: bool = False) -> torch.Tensor:
    """Compact factors uint8 [N, S + 2 supers], row order -> the tile layout's: per group of 16 rows, the
    integers [S][16] (six_bit: packed in 6 bits, [N, 8 supers] in all), then the fp16 super-factors
    [supers][16] (quant_tiles.h)."""
    n, subs = t.shape[0], t.shape[1] - 2 * supers
    groups = n // TILE_ROWS
    if six_bit:
        ints = _pack_six_bits(t[:, :subs].reshape(groups, TILE_ROWS, supers, 8)).view(groups, -1)
    else:
        ints = _group_major(t[:, :subs].contiguous()).view(groups, -1)
    supers_ = _group_major(t[:, subs:].contiguous().view(torch.float16)).view(torch.uint8).view(groups, -1)
    return torch.cat([ints, supers_], dim=1).view(n, -1)


def _compact_row_major(t: torch.Tensor, supers: int, six_bit: bool = False) -> torch.Tensor:
    """The inverse of _compact_group_major: row-order [N, S + 2 supers]."""
    n = t.shape[0]
    subs = 8 * supers if six_bit else t.shape[1] - 2 * supers
    per_group = t.view(n // TILE_ROWS, -1)
    int_bytes = per_group.shape[1] - 2 * TILE_ROWS * supers
    if six_bit:
        ints = _unpack_six_bits(per_group[:, :int_bytes], supers).reshape(n, subs)
    else:
        ints = _row_major(per_group[:, :int_bytes].reshape(n, subs))
    halves = per_group[:, int_bytes:].contiguous().view(torch.float16).reshape(n, supers)
    # (flat first: with one super-block a row, the [N, 1] result may carry any stride in its size-1 dimension)
    return torch.cat([ints, _row_major(halves).reshape(-1).view(torch.uint8).view(n, 2 * supers)], dim=1)


def _pack_six_bits(ints: torch.Tensor) -> torch.Tensor:
    """u6 integers [groups, 16 rows, supers, 8] -> per super-block [4][16] bytes of nibble pairs (j, j + 4),
    then [2][16] bytes of four 2-bit high parts each (j = 4h + i at bits 2i): quant_tiles.h's u6 order."""
    x = ints.to(torch.int32).permute(0, 2, 3, 1)                      # [g, super, j, row]
    low = (x[:, :, :4] & 15) | (x[:, :, 4:] & 15) << 4
    high = (x >> 4 & 3).view(*x.shape[:2], 2, 4, TILE_ROWS)
    high = sum(high[:, :, :, i] << 2 * i for i in range(4))
    return torch.cat([low, high], dim=2).to(torch.uint8)


def _unpack_six_bits(packed: torch.Tensor, supers: int) -> torch.Tensor:
    """The inverse of _pack_six_bits: [groups, 16 rows, supers, 8] uint8."""
    x = packed.reshape(packed.shape[0], supers, 6, TILE_ROWS).to(torch.int32)
    low = torch.cat([x[:, :, :4] & 15, x[:, :, :4] >> 4], dim=2)   # [g, super, j, row]
    high = torch.stack([x[:, :, 4:] >> 2 * i & 3 for i in range(4)], dim=3).reshape(low.shape)
    return (low | high << 4).permute(0, 3, 1, 2).to(torch.uint8)


def _expand_compact(t: torch.Tensor, subs: int, signed: bool) -> torch.Tensor:
    """Compact factors (row order) -> fp32 [N, subs]: integer * fp16 super-factor, exact."""
    ints = t[:, :subs].contiguous()
    ints = ints.view(torch.int8) if signed else ints
    supers = t[:, subs:].contiguous().view(torch.float16).float()
    return ints.float() * supers.repeat_interleave(subs // supers.shape[1], dim=1)


def quantize_activations(x: torch.Tensor, wide: bool = False,
                         block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Torch version of the op's activation quantization: (q int32 [M, K], d [M, K/block], d * sum(q)
    [M, K/block]); wide: 16 bits (q in [-32639, 32639]); block: 32, or 256 for K-quants' super-blocks."""
    top = 32639.0 if wide else 127.0
    blocks = x.float().reshape(x.shape[0], -1, block)
    d = blocks.abs().amax(-1) / top
    inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
    q = torch.round(blocks * inv.unsqueeze(-1)).clamp(-top, top)
    return q.to(torch.int32).reshape(x.shape[0], -1), d, d * q.sum(-1)


def reference_linear(x: torch.Tensor, w: QuantWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The op's math in torch, in float64 (exact integer dots): the oracle for quant_linear. Returns x.dtype."""
    if w.super_blocks:
        return _reference_super(x, w, bias)
    q, d, dsum = quantize_activations(x, wide=w.wide_activations)
    w = w.untiled()
    m, nb = q.shape[0], w.k // BLOCK
    qa = q.view(m, nb, BLOCK).double()
    qw = w.integers().view(w.n, nb, BLOCK).double()
    scales = w.scales.double()
    if w.kind in HALVES_KINDS:  # two 16-element halves, each with its own scale
        isum = torch.einsum("mbhj,nbhj->mnbh", qa.view(m, nb, 2, 16), qw.view(w.n, nb, 2, 16))
        out = (isum * scales.view(1, w.n, nb, 2) * d.double().view(m, 1, nb, 1)).sum((-1, -2))
    else:
        isum = torch.einsum("mbj,nbj->mnb", qa, qw)
        out = (isum * scales.unsqueeze(0) * d.double().unsqueeze(1)).sum(-1)
    mins = w.effective_mins()
    if mins is not None:
        out = out + dsum.double() @ mins.double().T
    if bias is not None:
        out = out + bias.double()
    return out.to(x.dtype)


def _reference_super(x: torch.Tensor, w: QuantWeight, bias: torch.Tensor | None) -> torch.Tensor:
    """reference_linear for K-quants on x86's tile layout (csrc/core/quant_tiles.h): activations per 256, each
    super-block's sum of sc * (w . q) and of m * sum(q) in integers, then one float step each."""
    m, supers = x.shape[0], w.k // SUPER_BLOCK
    q, d, _ = quantize_activations(x, block=SUPER_BLOCK)
    rows = w.untiled()
    signed = w.kind in HALVES_KINDS
    subs = w.k // (16 if signed else BLOCK)

    def split(t: torch.Tensor, count: int, signed_ints: bool) -> tuple[torch.Tensor, torch.Tensor]:
        ints = t[:, :count].contiguous()
        ints = ints.view(torch.int8) if signed_ints else ints
        return ints.double(), t[:, count:].contiguous().view(torch.float16).double()  # [N, count], [N, supers]

    def per_super(ints: torch.Tensor, sums: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
        total = (sums * ints.unsqueeze(0)).view(m, w.n, supers, -1).sum(-1)      # exact integers, [M, N, supers]
        return (total * factor.unsqueeze(0) * d.double().unsqueeze(1)).sum(-1)

    sc, dw = split(rows.packed_factors[0], subs, signed)
    qa = q.view(m, subs, -1).double()
    out = per_super(sc, torch.einsum("msj,nsj->mns", qa, rows.integers().view(w.n, subs, -1).double()), dw)
    if rows.packed_factors[1] is not None:
        mn, dmin = split(rows.packed_factors[1], w.k // BLOCK, False)
        out = out + per_super(mn, q.view(m, -1, BLOCK).sum(-1).double().unsqueeze(1), dmin)
    if bias is not None:
        out = out + bias.double()
    return out.to(x.dtype)


def quant_linear(x: torch.Tensor, w: QuantWeight, bias: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] (float32, bfloat16 or float16, last dim contiguous) -> out [M, N] of x's dtype. `out` may be a
    column slice of a wider tensor (fused projections with parts of different kinds)."""
    require()
    if out is None:
        out = torch.empty(x.shape[0], w.n, dtype=x.dtype)
    values, high, scales, mins = w.tensors()
    torch.ops.llmchat.quant_linear(x, values, high, scales, mins, w.code, w.min_offset, bias, out)
    return out


def quant_rows(w: QuantWeight, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rows `ids` of the weight dequantized to `dtype` (embedding lookups from a quantized token table)."""
    require()
    out = torch.empty(ids.shape[0], w.k, dtype=dtype)
    values, high, scales, mins = w.tensors()
    torch.ops.llmchat.quant_rows(ids.contiguous(), values, high, scales, mins, w.code, w.min_offset, out)
    return out


def quant_isa() -> str:
    """The block-dot path compiled in: avx2, neon+dotprod+i8mm (SMMLA tiles), neon+dotprod, neon or scalar."""
    require()
    return torch.ops.llmchat.quant_isa()


def tiles_isa() -> str:
    """The tile layout's path here: "avx512+vnni", "avx512+vnni+amx" (AMX-INT8 for 16-token tiles); on ARM
    "neon+i8mm", "neon+dotprod" or "neon" (quant_neon_layout.py); or "" (no tile layout)."""
    require()
    return torch.ops.llmchat.quant_tiles_isa()


def tiles_native() -> bool:
    """True when this build runs weights in the tile layout (x86 with AVX512-VNNI, or ARM)."""
    return bool(tiles_isa())


def register_fake() -> None:
    for name in ("quant_linear", "quant_rows"):
        torch.library.register_fake(f"llmchat::{name}", lambda *args, **kwargs: None)
