"""An adapter's LoRA per engine projection (SiteWeights), and how a step's tokens group by adapter.

For a (possibly fused) projection out = x @ W^T with slices [q; k; v] or [gate; up], an adapter's targeted
slices share one shrink (their A matrices concatenated along the rank) and one expand whose matrix is
block-diagonal: rank rows of slice i only reach slice i's output columns. Tokens of one adapter form one
contiguous segment of the batch (the runner orders chunks by adapter slot); see stack.py for the GEMMs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

# The torch path's weights and math (peft's precision). The fused kernel path stores weights in the model's
# dtype instead and accumulates in fp32 (stack.py).
COMPUTE_DTYPE = torch.float32


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


def uniform_groups(segments: list[tuple[int, int, int]]) -> tuple[int, int, int, int] | None:
    """(first slot, last slot + 1, first token, tokens per group) when the segments are consecutive slots with
    equal token counts back to back (e.g. decodes spread evenly over adapters): one batched GEMM then covers
    every group. None otherwise."""
    if len(segments) < 2:
        return None
    lo, start, _ = segments[0]
    size = segments[0][2] - start
    for i, (slot, s, e) in enumerate(segments):
        if slot != lo + i or s != start + i * size or e - s != size:
            return None
    return lo, lo + len(segments), start, size
