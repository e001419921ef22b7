"""llmchat kernels: compiled C++ CPU ops (paged attention, KV cache, norms, rotary, activation, small-M
linear, quantized linear, multi-adapter LoRA).

Each op is a torch custom op `torch.ops.llmchat.<name>`; the functions here are its typed wrappers.
`available()` tells whether the extension was built and loaded; `isa()` which vector path it runs; `level()`
which CPU level of a portable install loaded (kernels/variants.py).
"""
if __name__ == "kernels":
    # Imported as the top-level `kernels`: Python started in a checkout (the repo root first on sys.path) and
    # something asked for the PyPI package of that name (transformers does). Hand it that package, not this
    # folder, whose installed name is llmchat.kernels.
    import importlib.machinery as _machinery
    import importlib.util as _util
    import os as _os
    import sys as _sys

    _root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    _spec = _machinery.PathFinder.find_spec(
        "kernels", [p for p in _sys.path if _os.path.abspath(p or _os.curdir) != _root])
    if _spec is not None:
        _module = _util.module_from_spec(_spec)
        _sys.modules["kernels"] = _module  # what the import statement returns once this file ends
        _spec.loader.exec_module(_module)
    else:
        # Not installed. Raising ModuleNotFoundError here would break callers that found this folder with
        # find_spec and then import it unguarded: transformers' is_kernels_available() does. Give what Python
        # gives for a folder named kernels without an __init__.py instead: an empty namespace package, no
        # __file__, no __version__ (transformers reads that as "not installed"), nothing importable from it
        # (`from kernels import x` is an ImportError, `import kernels.x` a ModuleNotFoundError).
        import types as _types

        def _absent(name):
            raise AttributeError(f"module 'kernels' has no attribute {name!r}: the PyPI package kernels is not "
                                 f"installed (the folder {_root}{_os.sep}kernels is llmchat.kernels)")

        _module = _types.ModuleType("kernels")
        _module.__spec__ = _machinery.ModuleSpec("kernels", None, is_package=True)
        _module.__path__ = []
        _module.__getattr__ = _absent
        _sys.modules["kernels"] = _module
else:
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
        from .gguf_tiles import register_fake as _register_gguf_fake

        _register_gguf_fake()


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
