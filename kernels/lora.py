"""Multi-adapter LoRA on one projection: out[s:e] += (x[s:e] @ A_slot^T) @ B_slot for each token segment.

The stacked layout (one tensor per role for every resident adapter of the projection):
    a             [slots, R, in]      A rows of each slot's targeted slices, one after another
    rank_offsets  int32 [slots, S+1]  slice i of a slot uses rank rows rank_offsets[slot, i] .. [slot, i+1]
                                      (equal = slice not targeted; an all-equal row = no LoRA in that slot)
    slice_offsets int32 [S+1]         output columns of slice i (a fused qkv has S = 3)
    b, slice_ranks                    (scale * B)^T of each slice on its own, no block-diagonal zeros
                                      (`pack_lora_b` builds them from the block-diagonal [slots, R, out])
    segments      int32 [N, 3]        (slot, start, end): ordered, disjoint token ranges of x
x, out, a and b share one dtype (float32, bfloat16, float16); the delta is accumulated in fp32 and added
to out in fp32, so out is rounded once.
"""
from __future__ import annotations

import torch

from ._loader import require

PANEL = 64   # output columns per panel of b (kLoraPanel in kernels/csrc/core/lora.h)


def lora_apply(x: torch.Tensor, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, rank_offsets: torch.Tensor,
               slice_offsets: torch.Tensor, slice_ranks: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """Adds every segment's LoRA delta into out [T, out] in place and returns out."""
    require()
    torch.ops.llmchat.lora_apply(x, out, a, b, rank_offsets, slice_offsets, slice_ranks, segments)
    return out


def lora_path() -> str:
    """What runs bf16 LoRA here: "amx" (AMX tiles, where the CPU and OS grant them), "bfmmla" (ARM with bf16)
    or "vector". On tiles every bf16 segment, decode included, takes them, with h rounded to bf16 before the
    expand (as torch's bf16 LoRA rounds it)."""
    require()
    return str(torch.ops.llmchat.lora_path())


def pack_lora_b(b: torch.Tensor, rank_offsets: torch.Tensor, slice_offsets: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-diagonal b [slots, R, out] -> (packed [slots, L], slice_ranks int32 [S]).

    Each slot's packed row is slice after slice; slice i is ceil(width_i / 64) panels of cap_i x 64, where
    cap_i = slice_ranks[i] is the largest rank any slot has on slice i: panel p, row j holds
    b[slot, rank_offsets[slot, i] + j, slice_offsets[i] + 64 p : + 64] (zero padded). So the kernel reads a
    slice's B as one contiguous run, and none of the block-diagonal zeros."""
    slots = b.shape[0]
    ro, so = rank_offsets.tolist(), slice_offsets.tolist()
    caps = [max([row[i + 1] - row[i] for row in ro], default=0) for i in range(len(so) - 1)]
    parts = []
    for i, cap in enumerate(caps):
        width = so[i + 1] - so[i]
        panels = -(-width // PANEL)
        region = b.new_zeros(slots, cap, panels * PANEL)
        for s, row in enumerate(ro):
            region[s, :row[i + 1] - row[i], :width] = b[s, row[i]:row[i + 1], so[i]:so[i + 1]]
        parts.append(region.view(slots, cap, panels, PANEL).transpose(1, 2).reshape(slots, -1))
    packed = torch.cat(parts, dim=1) if parts else b.new_zeros(slots, 0)
    return packed.contiguous(), torch.tensor(caps, dtype=torch.int32)
