"""Checkpoint tensor names -> the engine's parameters: q/k/v and gate/up projections are fused, declared as data."""
from __future__ import annotations

# checkpoint projection -> (fused engine projection, slice index)
STACKED_PARAMS = {
    "q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
}


def parameter_target(name: str) -> tuple[str, int | None]:
    """Checkpoint tensor name -> (engine parameter name, fused slice index or None)."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in STACKED_PARAMS:
            fused, index = STACKED_PARAMS[part]
            return ".".join(parts[:i] + [fused] + parts[i + 1:]), index
    return name, None
