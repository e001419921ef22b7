"""Multi-adapter LoRA on one projection: out[s:e] += (x[s:e] @ A_slot^T) @ B_slot for each token segment.

The stacked layout (one tensor per role for every resident adapter of the projection):
    a             [slots, R, in]      A rows of each slot's targeted slices, one after another
    b             [slots, P, R, 64]   (scale * B)^T [slots, R, out] in panels of 64 output columns
                                      (`pack_lora_b`); rank row r is only read over its own slice's columns
    rank_offsets  int32 [slots, S+1]  slice i of a slot uses rank rows rank_offsets[slot, i] .. [slot, i+1]
                                      (equal = slice not targeted; an all-equal row = no LoRA in that slot)
    slice_offsets int32 [S+1]         output columns of slice i (a fused qkv has S = 3)
    segments      int32 [N, 3]        (slot, start, end): ordered, disjoint token ranges of x
x, out, a and b share one dtype (float32, bfloat16, float16); the delta is accumulated in fp32 and added
to out in fp32, so out is rounded once.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._loader import require

PANEL = 64   # output columns per panel of b (kLoraPanel in kernels/csrc/core/lora.h)


def lora_apply(x: torch.Tensor, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, rank_offsets: torch.Tensor,
               slice_offsets: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """Adds every segment's LoRA delta into out [T, out] in place and returns out."""
    require()
    torch.ops.llmchat.lora_apply(x, out, a, b, rank_offsets, slice_offsets, segments)
    return out


def pack_lora_b(b: torch.Tensor) -> torch.Tensor:
    """[..., R, out] -> panels [..., ceil(out/64), R, 64] (zero padded): element (r, c) moves to
    [c // 64, r, c % 64], so the kernel reads one panel's rank rows of a slice as one contiguous run."""
    *lead, rank, out = b.shape
    padded = F.pad(b, (0, (-out) % PANEL))
    return padded.view(*lead, rank, -1, PANEL).transpose(-3, -2).contiguous()
