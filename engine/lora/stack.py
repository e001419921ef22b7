"""SiteStack: every resident adapter's LoRA for one projection, stacked, and the two ways to apply it per step.

    a             [slots, R, in]      A rows of each slot's targeted slices, one after another (zero past its rank)
    b             [slots, R, out]     (scale * B)^T, block-diagonal over the projection's output slices
    b_packed, slice_ranks             fused path only: b without its zeros, in the kernel's layout (pack_lora_b)
    rank_offsets  int32 [slots, S+1]  slice i of a slot uses rank rows rank_offsets[slot, i] .. [slot, i + 1]
                                      (an empty range: slice not targeted; all empty: no LoRA in that slot)

Fused path (the engine's default when the kernels are built): weights in the model's dtype and one
llmchat.kernels.lora_apply per projection and step, which shrinks and expands every segment straight into
the projection's output (fp32 accumulation) and reads only each slice's own block of b.
Torch path (the oracle, and the fallback without kernels): fp32 grouped GEMMs. When the groups are
consecutive slots of equal size (decodes spread over adapters), one batched shrink and one batched expand
over a *view* of the stacks; otherwise one shrink and one expand per segment against its slot's view.

Concurrency: put() writes only a slot no running request uses and publishes new rank offsets, the new
packed b (and grown tensors) as one new StackTensors, so the engine thread can apply() at the same time
without a lock and always sees offsets and weights that fit together.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .compute import COMPUTE_DTYPE, SiteWeights


@dataclass(frozen=True)
class StackTensors:
    a: torch.Tensor
    b: torch.Tensor
    rank_offsets: torch.Tensor
    b_packed: torch.Tensor | None = None
    slice_ranks: torch.Tensor | None = None


class SiteStack:
    def __init__(self, in_features: int, slice_offsets: list[int], dtype: torch.dtype = COMPUTE_DTYPE,
                 pack_b: Callable | None = None) -> None:
        """pack_b: llmchat.kernels.pack_lora_b to keep b in the fused kernel's layout as well (the dense b
        stays: it is what the packed one is rebuilt from when ranks or slots change, and the torch path's)."""
        self.in_features = in_features
        self.pack_b = pack_b
        self.out_features = slice_offsets[-1]
        self.slice_offsets = list(slice_offsets)          # output columns of each slice: [0, ..., out]
        self.slice_offsets_t = torch.tensor(slice_offsets, dtype=torch.int32)
        self.dtype = dtype
        self.tensors: StackTensors | None = None          # replaced as a whole
        self.active: set[int] = set()                     # slots with LoRA on this projection

    # ---- loading (under the registry lock) ----------------------------------------------------
    def put(self, slot: int, weights: SiteWeights | None) -> None:
        """Write `weights` into `slot` (None clears it). The stack always grows to cover `slot`, so every
        projection accepts every resident slot, with or without LoRA on it."""
        self.active.discard(slot)
        current = self.tensors
        slots, rank = (current.a.shape[0], current.a.shape[1]) if current is not None else (0, 0)
        need = weights.a.shape[0] if weights is not None else 0
        if current is None or slot >= slots or need > rank:
            current = self._grown(current, max(slots, slot + 1), max(rank, need))
        offsets = current.rank_offsets.clone()
        offsets[slot] = 0
        if weights is None:            # stop reading the slot first, then clear it
            self._publish(current, offsets)
            current.a[slot].zero_()
            current.b[slot].zero_()
            return
        a = current.a[slot]
        a.zero_()
        a[:need] = weights.a
        b = torch.zeros(current.a.shape[1], self.out_features, dtype=self.dtype)
        for out0, out1, r0, r1, b_t in weights.parts:
            b[r0:r1, out0:out1] = b_t
        current.b[slot] = b
        offsets[slot] = torch.tensor(self._rank_offsets(weights), dtype=torch.int32)
        self._publish(current, offsets)            # after the weights are written
        self.active.add(slot)

    def _publish(self, current: StackTensors, offsets: torch.Tensor) -> None:
        packed = (None, None) if self.pack_b is None else self.pack_b(current.b, offsets, self.slice_offsets_t)
        self.tensors = StackTensors(current.a, current.b, offsets, *packed)

    def _rank_offsets(self, weights: SiteWeights) -> list[int]:
        """[0, end of slice 0's rank rows, ...]: targeted slices follow each other in rank order."""
        ranks = {out0: (r0, r1) for out0, _, r0, r1, _ in weights.parts}
        row = [0]
        for out0 in self.slice_offsets[:-1]:
            r0, r1 = ranks.get(out0, (row[-1], row[-1]))
            if r0 != row[-1]:
                raise ValueError(f"LoRA slices out of rank order at output column {out0}")
            row.append(r1)
        return row

    def _grown(self, current: StackTensors | None, slots: int, rank: int) -> StackTensors:
        grown = StackTensors(torch.zeros(slots, rank, self.in_features, dtype=self.dtype),
                             torch.zeros(slots, rank, self.out_features, dtype=self.dtype),
                             torch.zeros(slots, len(self.slice_offsets), dtype=torch.int32))
        if current is not None:
            old_slots, old_rank = current.a.shape[:2]
            grown.a[:old_slots, :old_rank] = current.a
            grown.b[:old_slots, :old_rank] = current.b
            grown.rank_offsets[:old_slots] = current.rank_offsets
        return grown

    # ---- per step (engine thread) --------------------------------------------------------------
    def fused_tensors(self) -> list[torch.Tensor] | None:
        """(a, packed b, rank offsets, slice offsets, slice ranks) as published now, what lora_apply takes
        (the decoder stack too); None while no slot has LoRA on this projection."""
        t = self.tensors
        if t is None or not self.active or t.b_packed is None:
            return None
        return [t.a, t.b_packed, t.rank_offsets, self.slice_offsets_t, t.slice_ranks]

    def apply_fused(self, op, x: torch.Tensor, out: torch.Tensor, segments: torch.Tensor) -> None:
        """One llmchat.kernels.lora_apply (`op`) for all segments (int32 [N, 3] of (slot, start, end))."""
        tensors = self.fused_tensors()
        if tensors is not None:
            op(x, out, *tensors, segments)

    def apply(self, x: torch.Tensor, out: torch.Tensor, segments: list[tuple[int, int, int]],
              uniform: tuple[int, int, int, int] | None) -> None:
        """Torch path: out[s:e] += (x[s:e] @ A_slot^T) @ (scale * B_slot)^T for each (slot, s, e) segment."""
        t = self.tensors
        if t is None or not self.active:
            return
        a_t, b = t.a.transpose(1, 2).to(COMPUTE_DTYPE), t.b.to(COMPUTE_DTYPE)   # views for fp32 stacks
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
