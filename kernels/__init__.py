"""llmchat kernels: compiled C++ CPU ops (paged attention, KV cache, norms, rotary, activation, small-M
linear, quantized linear, multi-adapter LoRA).

Each op is a torch custom op `torch.ops.llmchat.<name>`; the functions here are its typed wrappers.
`available()` tells whether the extension was built and loaded; `isa()` which vector path it runs; `level()`
which CPU level of a portable install loaded (kernels/variants.py).
"""
from ._loader import available, isa, level, load_error
from .linear import linear_small_m, pack_linear_weight, packed_isa, packed_native, packed_rows
from .lora import lora_apply, lora_path, pack_lora_b
from .quant import QuantWeight, quant_isa, quant_linear, quant_rows, tiles_isa, tiles_native
from .ops import (
    copy_blocks,
    fused_add_rms_norm,
    paged_attention,
    read_runs_sum,
    read_sum,
    rms_norm,
    rotary_embedding,
    silu_and_mul,
    gelu_tanh_and_mul,
    write_kv_cache,
)

if available():
    from . import fake as _fake

    _fake.register()
    from .linear import register_fake as _register_linear_fake

    _register_linear_fake()
    from .quant import register_fake as _register_quant_fake

    _register_quant_fake()

__all__ = [
    "available",
    "copy_blocks",
    "fused_add_rms_norm",
    "isa",
    "level",
    "linear_small_m",
    "load_error",
    "lora_apply",
    "lora_path",
    "pack_lora_b",
    "pack_linear_weight",
    "QuantWeight",
    "quant_isa",
    "quant_linear",
    "quant_rows",
    "tiles_isa",
    "tiles_native",
    "packed_isa",
    "packed_native",
    "packed_rows",
    "paged_attention",
    "read_runs_sum",
    "read_sum",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "gelu_tanh_and_mul",
    "write_kv_cache",
]
