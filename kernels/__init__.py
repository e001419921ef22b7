"""llmchat kernels: compiled C++ CPU ops (paged attention, KV cache, norms, rotary, activation).

Each op is a torch custom op `torch.ops.llmchat.<name>`; the functions here are its typed wrappers.
`available()` tells whether the extension was built and loaded; `isa()` which vector path it runs.
"""
from ._loader import available, isa, load_error
from .ops import (
    copy_blocks,
    fused_add_rms_norm,
    paged_attention,
    rms_norm,
    rotary_embedding,
    silu_and_mul,
    write_kv_cache,
)

if available():
    from . import fake as _fake

    _fake.register()

__all__ = [
    "available",
    "copy_blocks",
    "fused_add_rms_norm",
    "isa",
    "load_error",
    "paged_attention",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "write_kv_cache",
]
