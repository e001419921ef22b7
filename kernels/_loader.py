"""Loads the compiled extension (llmchat.kernels._C), which registers the torch.ops.llmchat.* ops."""
from __future__ import annotations

import importlib

import torch

_error: str | None = None

try:
    importlib.import_module("llmchat.kernels._C")
except ImportError as exc:  # not built (no compiler at install time) or built for another torch
    _error = str(exc)
else:
    # a build made for a wider CPU (LLMCHAT_KERNELS_ARCH_FLAGS, a copied install) must not run its kernels here
    _missing = torch.ops.llmchat.missing_cpu_features()
    if _missing:
        _error = (f"they were compiled for CPU features this CPU lacks ({_missing}; built for "
                  f"{torch.ops.llmchat.compiled_cpu_features()}); rebuild them on this machine")


def available() -> bool:
    """True when the compiled kernels are loaded and torch.ops.llmchat.* can be called."""
    return _error is None


def load_error() -> str | None:
    """Why the extension did not load (None when it did)."""
    return _error


def require() -> None:
    if _error is not None:
        raise RuntimeError(
            "llmchat kernels are not built (" + _error + "). Reinstall with a C++ compiler present: "
            "`pip install --no-build-isolation -e .` (Debian/Ubuntu: `apt install g++`)."
        )


def isa() -> str:
    """The vector path the extension was compiled for: avx512+bf16, avx512, avx2, neon+bf16, neon or scalar."""
    require()
    return torch.ops.llmchat.isa()
