"""SiteStack: every resident adapter's LoRA for one projection in two stacked fp32 tensors, and the grouped GEMMs.

    a_t [slots, in, R]    A^T of each slot (its targeted slices side by side, zero-padded to the widest rank)
    b   [slots, R, out]   (scale * B)^T of each slot, block-diagonal over the projection's output slices

Per step, tokens are grouped by slot into contiguous segments. When the groups are consecutive slots of
equal size (decodes spread over adapters), the whole projection is one batched shrink and one batched
expand over a *view* of the stacks; otherwise each segment does one shrink and one expand against its
slot's view. Weights are never gathered per token, nor copied per step.

Concurrency: put() writes only a slot no running request uses, and swaps in grown tensors as one tuple,
so the engine thread can run apply() at the same time without a lock.
"""
from __future__ import annotations

import torch

from .compute import COMPUTE_DTYPE, SiteWeights


class SiteStack:
    def __init__(self, in_features: int, out_features: int) -> None:
        self.in_features = in_features
        self.out_features = out_features
        self.tensors: tuple[torch.Tensor, torch.Tensor] | None = None   # (a_t, b), replaced as a whole
        self.active: set[int] = set()                                   # slots with LoRA on this projection

    # ---- loading (under the registry lock) ----------------------------------------------------
    def put(self, slot: int, weights: SiteWeights | None) -> None:
        """Write `weights` into `slot` (None clears it)."""
        self.active.discard(slot)
        current = self.tensors
        slots, rank = (current[0].shape[0], current[0].shape[2]) if current is not None else (0, 0)
        if weights is None:
            if slot < slots:
                current[0][slot].zero_()
                current[1][slot].zero_()
            return
        need = weights.a.shape[0]
        if current is None or slot >= slots or need > rank:
            grown = (torch.zeros(max(slots, slot + 1), self.in_features, max(rank, need), dtype=COMPUTE_DTYPE),
                     torch.zeros(max(slots, slot + 1), max(rank, need), self.out_features, dtype=COMPUTE_DTYPE))
            if current is not None:
                grown[0][:slots, :, :rank] = current[0]
                grown[1][:slots, :rank] = current[1]
            self._write(grown, slot, weights)
            self.tensors = grown
        else:
            self._write(current, slot, weights)
        self.active.add(slot)

    @staticmethod
    def _write(tensors, slot: int, weights: SiteWeights) -> None:
        a_t, b = tensors[0][slot], tensors[1][slot]
        a_t.zero_()
        b.zero_()
        a_t[:, :weights.a.shape[0]] = weights.a.t()
        for out0, out1, r0, r1, b_t in weights.parts:
            b[r0:r1, out0:out1] = b_t

    # ---- per step (engine thread) --------------------------------------------------------------
    def apply(self, x: torch.Tensor, out: torch.Tensor, segments: list[tuple[int, int, int]],
              uniform: tuple[int, int, int, int] | None) -> None:
        """out[s:e] += (x[s:e] @ A_slot^T) @ (scale * B_slot)^T for each (slot, s, e) segment."""
        tensors = self.tensors
        if tensors is None or not self.active:
            return
        a_t, b = tensors
        direct = out.dtype == COMPUTE_DTYPE      # else: fp32 deltas, added to the bf16/fp16 output once
        if uniform is not None and uniform[1] <= a_t.shape[0]:
            lo, hi, start, size = uniform
            end = start + (hi - lo) * size
            xs = x[start:end].to(COMPUTE_DTYPE).view(hi - lo, size, -1)
            h = torch.bmm(xs, a_t[lo:hi])                                  # shrink, all groups at once
            rows = out[start:end].view(hi - lo, size, -1)
            if direct:
                rows.baddbmm_(h, b[lo:hi])                                 # expand, in place
            else:
                rows.add_(torch.bmm(h, b[lo:hi]))
            return
        xc = None
        for slot, start, end in segments:
            if slot not in self.active:
                continue
            if xc is None:
                xc = x.to(COMPUTE_DTYPE)
            h = torch.mm(xc[start:end], a_t[slot])
            if direct:
                out[start:end].addmm_(h, b[slot])
            else:
                out[start:end].add_(torch.mm(h, b[slot]))
