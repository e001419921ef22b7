"""The small fused ops (norms, rotary, SiLU*mul, GELU*mul) behind one switch: llmchat.kernels or pure torch.

Layers call `ops.rms_norm(...)` etc. on the object chosen once at load time, so there is no backend
branching per layer per step.
"""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from .rotary import apply_rotary_torch, cos_sin_for

log = logging.getLogger(__name__)
_warned = False


class TorchOps:
    """Reference implementations, numerically the same as transformers' modules."""

    name = "torch"
    strided_rows = False  # the reference works on contiguous q/k/v

    def __init__(self) -> None:
        self._rope_key: tuple | None = None   # (positions, cache) of the last step: cos/sin reused by all layers
        self._rope_value = None

    @staticmethod
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """weight in x's dtype (Llama: the normalized row rounded, then weighted), or fp32 (Gemma's 1 + w:
        weighted in fp32, rounded once)."""
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        if weight.dtype != x.dtype:
            return (xf * weight).to(x.dtype)
        return weight * xf.to(x.dtype)

    @staticmethod
    def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        residual.add_(x)
        return TorchOps.rms_norm(residual, weight, eps), residual

    def rotary_embedding(self, positions, query, key, cos_sin_cache, head_dim) -> None:
        key_ = self._rope_key
        if key_ is None or key_[0] is not positions or key_[1] is not cos_sin_cache:
            self._rope_key, self._rope_value = (positions, cos_sin_cache), cos_sin_for(positions, cos_sin_cache)
        apply_rotary_torch(query, key, *self._rope_value, head_dim)

    @staticmethod
    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate).mul_(up)

    @staticmethod
    def gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
        """Gemma's GeGLU gate: gelu (tanh approximation) of the gate times up, as transformers."""
        gate, up = x.chunk(2, dim=-1)
        return F.gelu(gate, approximate="tanh").mul_(up)


class KernelOps:
    """llmchat.kernels (C++), same semantics; fused_add_rms_norm works in place.

    Calls the registered ops (torch.ops.llmchat.*.default, schemas in the contract) directly: the
    Python wrappers' checks cost more than the kernels themselves at decode sizes."""

    name = "kernels"
    strided_rows = True   # q/k/v may stay views into the fused qkv output (row stride > width): no copies

    def __init__(self, kernels) -> None:
        self.k = kernels
        ops = torch.ops.llmchat
        self._rms = ops.rms_norm.default
        self._add_rms = ops.fused_add_rms_norm.default
        self._rope = ops.rotary_embedding.default
        self._silu = ops.silu_and_mul.default
        self._gelu = ops.gelu_tanh_and_mul.default

    def rms_norm(self, x, weight, eps):
        out = torch.empty_like(x)
        self._rms(x, weight, eps, out)
        return out

    def fused_add_rms_norm(self, x, residual, weight, eps):
        self._add_rms(x, residual, weight, eps)
        return x, residual

    def rotary_embedding(self, positions, query, key, cos_sin_cache, head_dim) -> None:
        self._rope(positions, query, key, cos_sin_cache, head_dim, True)

    def silu_and_mul(self, x):
        out = x.new_empty(x.shape[0], x.shape[1] // 2)
        self._silu(x, out)
        return out

    def gelu_tanh_and_mul(self, x):
        out = x.new_empty(x.shape[0], x.shape[1] // 2)
        self._gelu(x, out)
        return out


def load_kernels():
    """The llmchat.kernels module if its extension is built, else None (after one warning)."""
    global _warned
    try:
        import llmchat.kernels as kernels   # optional: a failed build or load falls back to torch ops
        if getattr(kernels, "available", None) and kernels.available():
            return kernels
        reason = kernels.load_error() or "the C++ extension is not built"
    except Exception as exc:  # an import error of the extension must not stop the app
        reason = f"it failed to load ({exc})"
    if not _warned:
        log.warning("llmchat.kernels unavailable: %s; using the pure-torch attention backend", reason)
        _warned = True
    return None


def select_ops(backend: str):
    """(ops object, kernels module or None) for attention_backend "kernels" | "torch"."""
    if backend == "kernels":
        kernels = load_kernels()
        if kernels is not None:
            return KernelOps(kernels), kernels
    return TorchOps(), None
