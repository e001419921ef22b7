"""RMSNorm (fp32 inside, like transformers) over the selected ops backend."""
from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, ops) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size), requires_grad=False)
        self.eps = eps
        self.ops = ops
        self.finalize()

    def finalize(self) -> None:
        """Plain reference to the weight for the hot path (call again after replacing it)."""
        self.__dict__["_w"] = self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.rms_norm(x, self._w, self.eps)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """residual += x; return (rms_norm(residual), residual). May reuse x's storage."""
        return self.ops.fused_add_rms_norm(x, residual, self._w, self.eps)


class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm: x * (1 + w). The checkpoint stores w; the ops get 1 + w computed once, kept in fp32: an
    fp32 weight makes them compute in fp32 throughout and round once at the end, as transformers' Gemma3RMSNorm
    does (a Llama norm rounds the normalized row before the weight)."""

    def finalize(self) -> None:
        w = self.weight
        self.__dict__["_w"] = w if w.device.type == "meta" else 1.0 + w.float()
