"""The grouped LoRA delta: tokens of one adapter form one contiguous segment; per segment, shrink then expand.

For a (possibly fused) projection out = x @ W^T with slices [q; k; v] or [gate; up], an adapter's targeted
slices share one shrink matmul (their A matrices concatenated along the rank), then each slice's expand adds
h[:, r_i] @ (scale * B_i)^T into its own columns of `out`, in place. Work per segment is two small GEMMs on
views of the activations; adapter weights are never gathered or copied per token.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class SiteWeights:
    """One adapter's LoRA for one engine projection (all its targeted slices)."""
    a: torch.Tensor                                        # [R, in], A of each targeted slice stacked
    parts: tuple[tuple[int, int, int, int, torch.Tensor], ...]  # (out0, out1, r0, r1, (scale*B)^T [r, out])

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.a, *(p[4] for p in self.parts)))


@dataclass(frozen=True)
class PreparedAdapter:
    """An adapter in compute form: SiteWeights per hooked projection (None where it has no LoRA)."""
    name: str
    path: Path
    identity: str                                          # name@content-hash: the prefix-cache key
    sites: tuple[SiteWeights | None, ...]
    nbytes: int


def build_site_weights(slices: list[tuple[int, int, torch.Tensor, torch.Tensor] | None]) -> SiteWeights | None:
    """slices[i] = (out0, out1, A_i [r, in], scaledB_i [out_i, r]) for targeted slices, None elsewhere."""
    targeted = [s for s in slices if s is not None]
    if not targeted:
        return None
    parts, r0 = [], 0
    for out0, out1, a, b in targeted:
        parts.append((out0, out1, r0, r0 + a.shape[0], b.t().contiguous()))
        r0 += a.shape[0]
    a_cat = torch.cat([a for _, _, a, _ in targeted], dim=0).contiguous()
    return SiteWeights(a=a_cat, parts=tuple(parts))


def add_lora_deltas(x: torch.Tensor, out: torch.Tensor, segments: list[tuple[int, int, int]],
                    by_slot: list[SiteWeights | None]) -> None:
    """out[s:e] += LoRA_slot(x[s:e]) for each (slot, s, e); slots without weights here are skipped."""
    for slot, start, end in segments:
        w = by_slot[slot]
        if w is None:
            continue
        h = F.linear(x[start:end], w.a)                 # shrink: [n, R]
        rows = out[start:end]
        for out0, out1, r0, r1, b_t in w.parts:          # expand each slice into its own columns
            rows[:, out0:out1].addmm_(h[:, r0:r1], b_t)


def segments_from_runs(runs: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(slot, start, end) token segments from (slot, num_tokens) per chunk in batch order; adjacent chunks of
    one adapter merge into one segment, base-model chunks (slot < 0) are dropped."""
    segments: list[tuple[int, int, int]] = []
    pos = 0
    for slot, n in runs:
        if slot >= 0 and n > 0:
            if segments and segments[-1][0] == slot and segments[-1][2] == pos:
                segments[-1] = (slot, segments[-1][1], pos + n)
            else:
                segments.append((slot, pos, pos + n))
        pos += n
    return segments
