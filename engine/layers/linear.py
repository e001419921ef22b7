"""Every projection of the model (qkv, o, gate_up, down) is this one class, so LoRA has one place to hook.

A `Linear` may be *fused*: its weight is the row-wise concatenation of several checkpoint projections
(`slice_names`, `output_sizes`), e.g. qkv_proj = [q_proj; k_proj; v_proj], gate_up_proj = [gate; up].

LoRA hook (no LoRA logic lives here): set `layer.lora` to any object with
    lora.apply(layer: Linear, x: Tensor [T, in], out: Tensor [T, sum(output_sizes)]) -> None
which adds the per-token adapter deltas into `out` in place, slice by slice (`layer.slice_offsets`).
Which adapter each token uses is per-step state the LoRA manager keeps itself; the model runner hands it
over before each forward (see ModelRunner.lora_manager).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    def __init__(self, in_features: int, output_sizes: list[int], *, bias: bool = False,
                 slice_names: list[str] | None = None, prefix: str = "") -> None:
        super().__init__()
        self.in_features = in_features
        self.output_sizes = list(output_sizes)
        self.out_features = sum(output_sizes)
        self.slice_names = list(slice_names or [prefix.rsplit(".", 1)[-1]])
        offsets = [0]
        for size in self.output_sizes:
            offsets.append(offsets[-1] + size)
        self.slice_offsets = offsets          # slice i = out[:, offsets[i]:offsets[i+1]]
        self.prefix = prefix                  # engine-side name, e.g. "layers.3.self_attn.qkv_proj"
        self.weight = nn.Parameter(torch.empty(self.out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(self.out_features), requires_grad=False) if bias else None
        self.lora = None                      # LoRA hook object, or None for the base model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight, self.bias)
        if self.lora is not None:
            self.lora.apply(self, x, out)
        return out

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.output_sizes}, bias={self.bias is not None}"
