"""Loads the compiled extension, which registers the torch.ops.llmchat.* ops: llmchat.kernels._C, built for the
CPU of the install, or in a portable install the best of its levels this CPU runs (kernels/variants.py)."""
from __future__ import annotations

import importlib
import importlib.util
import os
import platform

import torch

import llmchat.kernels.variants as variants

_error: str | None = None
_level: str | None = None  # the portable level loaded; None for a build made for one CPU


def _built_levels() -> tuple[variants.Variant, ...]:
    return tuple(v for v in variants.for_machine(platform.machine())
                 if importlib.util.find_spec(f"llmchat.kernels._C_{v.name}") is not None)


def _choose(levels: tuple[variants.Variant, ...]) -> variants.Variant:
    """The best level this CPU runs, or the one LLMCHAT_KERNELS_LEVEL names (to compare levels on one machine)."""
    has = importlib.import_module("llmchat.kernels._cpu").has
    forced = os.environ.get("LLMCHAT_KERNELS_LEVEL", "").strip()
    if forced:
        named = [v for v in levels if v.name == forced]
        if not named:
            raise ImportError(f"LLMCHAT_KERNELS_LEVEL={forced} is not one of this install's levels "
                              f"({', '.join(v.name for v in levels)})")
        chosen = named[0]
    else:
        chosen = variants.best(levels, has)
    if chosen is None:
        lowest = levels[-1]
        raise ImportError(f"this CPU runs none of this install's kernel levels ({', '.join(v.name for v in levels)}): "
                          f"the lowest, {lowest.name}, needs {','.join(f for f in lowest.features if not has(f))}; "
                          "rebuild them on this machine")
    if not all(has(f) for f in chosen.features):
        raise ImportError(f"LLMCHAT_KERNELS_LEVEL={chosen.name} needs "
                          f"{','.join(f for f in chosen.features if not has(f))}, which this CPU lacks")
    return chosen


def _load() -> None:
    global _level
    levels = () if importlib.util.find_spec("llmchat.kernels._C") is not None else _built_levels()
    if levels:
        chosen = _choose(levels)
        importlib.import_module(f"llmchat.kernels._C_{chosen.name}")
        _level = chosen.name
    else:
        importlib.import_module("llmchat.kernels._C")


try:
    _load()
except ImportError as exc:  # not built (no compiler at install time), built for another torch, or no level runs here
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


def level() -> str | None:
    """The level of a portable install that runs here (e.g. "armv8_2"), None for kernels built for one CPU."""
    return _level


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
