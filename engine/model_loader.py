"""Load a model folder straight into the engine's modules (fused qkv / gate_up), from safetensors (single file
or sharded with model.safetensors.index.json), or from the GGUF file a library folder points at (gguf.json,
weights kept quantized; engine/quant/). No transformers model is built."""
from __future__ import annotations

import json
import logging
import platform
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open

from .architectures import ARCHITECTURE_NOTES
from .config import DEFAULT_SMALL_M_MAX
from .models import MODEL_CLASSES, CausalLM, ModelArgs, parameter_target
from .quant.gguf_model import load_gguf_weights
from .quant.prepared_cache import PreparedCache
from .quant.prepared_cache import identity as prepared_identity
from .quant.quantize import quantize_model

log = logging.getLogger(__name__)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# checkpoint tensors the engine recomputes itself
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
# (bytes done, bytes in all) while a model loads: the checkpoint's bytes as they are read, then its projection
# weights' bytes as they are prepared (packed for the kernels), so the share reaches 1 when the model can run.
LoadProgress = Callable[[int, int], None]


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None


def read_config(folder: Path) -> dict:
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder not found: {folder}")
    path = folder / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{folder} has no config.json (not a Hugging Face model folder)")
    return read_json(path)


def cpu_supports_fp16() -> bool:
    """True when the CPU computes in fp16 natively (AVX512-FP16 on x86, FEAT_FP16 on ARM)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine() == "arm64"  # Apple silicon
    flags = set(text.split())
    return bool(flags & {"avx512_fp16", "amx_fp16"}) or {"fphp", "asimdhp"} <= flags


def resolve_dtype(requested: str, config: dict, quantized: bool = False) -> torch.dtype:
    """"auto" = the checkpoint's dtype; fp16 only where the CPU has it, else bf16. For quantized weights (a
    GGUF file: its config names no dtype) "auto" means the activations and KV cache: fp32, as llama.cpp computes
    them. bf16 activations add their own rounding to the weights' (docs/performance.md: KL vs the fp32 model
    0.0046 against 0.0033 on SmolLM2 Q4_0) and gain little once the projections run on integer tiles."""
    name = requested
    if requested == "auto" and quantized and not (config.get("dtype") or config.get("torch_dtype")):
        return torch.float32
    if requested == "auto":
        name = str(config.get("dtype") or config.get("torch_dtype") or "float32").replace("torch.", "")
        if name not in DTYPES:
            name = "float32"
    if name not in DTYPES:
        raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {requested!r}")
    if name == "float16" and not cpu_supports_fp16():
        log.warning("this CPU has no native float16; using bfloat16 instead")
        name = "bfloat16"
    return DTYPES[name]


GGUF_POINTER = "gguf.json"   # {"file": "/abs/model.gguf", "size": bytes}: a GGUF registered in place


def gguf_source(folder: Path) -> Path | None:
    """The GGUF file a library folder runs from, or None for a safetensors folder."""
    pointer = Path(folder) / GGUF_POINTER
    if not pointer.exists():
        return None
    info = read_json(pointer)
    path = Path(info.get("file", ""))
    if not path.is_file():
        raise FileNotFoundError(f"{folder.name}: its GGUF file {path} is gone (moved or deleted); import it again")
    if info.get("size") not in (None, path.stat().st_size):
        raise ValueError(f"{folder.name}: {path} changed since it was imported; import it again")
    return path


def weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(read_json(index).get("weight_map", {}).values()))
        missing = [n for n in names if not (folder / n).exists()]
        if missing:
            raise FileNotFoundError(f"{folder}: shard(s) listed in the index are missing: {', '.join(missing)}")
        return [folder / n for n in names]
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return files
    if list(folder.glob("*.bin")) or list(folder.glob("*.pt")) or list(folder.glob("*.pth")):
        raise ValueError(f"{folder} holds only PyTorch .bin/.pt weights; llmchat loads safetensors "
                         "(convert with transformers: save_pretrained(..., safe_serialization=True))")
    if list(folder.glob("*.gguf")):
        raise ValueError(f"{folder} holds a GGUF file; import it with `llmchat models import` first")
    raise FileNotFoundError(f"{folder} has no *.safetensors weights")


def _renamed(key: str, renames: tuple[tuple[str, str], ...]) -> str:
    """A checkpoint name under the engine's prefix (the text part of a multimodal checkpoint)."""
    for old, new in renames:
        if key.startswith(old):
            return new + key[len(old):]
    return key


def _empty_on_cpu(model: torch.nn.Module) -> None:
    """model.to_empty(device="cpu") for the meta tensors, without torch's meta-tensor refs (whose import of torch.fx
    and sympy costs ~35 MB resident). A tensor shared by two modules stays shared."""
    made: dict[int, torch.Tensor] = {}

    def empty(t: torch.Tensor, parameter: bool) -> torch.Tensor:
        if id(t) not in made:
            e = torch.empty(t.shape, dtype=t.dtype)
            made[id(t)] = torch.nn.Parameter(e, requires_grad=t.requires_grad) if parameter else e
        return made[id(t)]

    for module in model.modules():
        for table, parameter in ((module._parameters, True), (module._buffers, False)):
            for name, t in table.items():
                if t is not None and t.device.type == "meta":
                    table[name] = empty(t, parameter)


def build_model(folder: Path, config: dict, dtype: torch.dtype, max_positions: int, ops, kernels,
                progress: LoadProgress | None = None, quantize: str | None = None,
                deterministic: bool = True, small_m_max: int = DEFAULT_SMALL_M_MAX, pack_bf16: bool = True,
                decoder_stack: bool = True, quant_tiles: bool = True, q8_wide_activations: bool = True,
                prepared_cache: bool = True, prepared_mmap: bool = True) -> CausalLM:
    """quantize: "q8_0" | "q4_0" | "q4_k" quantizes a 16/32-bit checkpoint's projections while loading.
    deterministic: projections whose rows do not depend on the step's size (EngineConfig.deterministic).
    small_m_max, pack_bf16, decoder_stack, quant_tiles, q8_wide_activations: EngineConfig's switches for A/B
    runs (CausalLM.finish_init). prepared_cache: a GGUF model's quantized weights are kept in the kernels'
    layout in a cache file and used from there on the next start, mapped (prepared_mmap) or read
    (engine/quant/prepared_cache.py)."""
    args = ModelArgs.from_config(config)
    if args.architecture in ARCHITECTURE_NOTES:
        log.warning("%s: %s", args.architecture, ARCHITECTURE_NOTES[args.architecture])
    with torch.device("meta"):
        model = MODEL_CLASSES[args.architecture](args, ops, kernels)
    model = model.to(dtype)
    gguf = gguf_source(Path(folder))
    if gguf is not None:
        if quantize:
            log.warning("%s is already quantized (GGUF); --quantize %s is ignored", gguf.name, quantize)
        read_bytes = total = gguf.stat().st_size
        cache = None
        if prepared_cache:
            cache = PreparedCache(prepared_identity(gguf, kernels, quant_tiles, q8_wide_activations),
                                  mapped=prepared_mmap)
        layout = None if kernels is None else "tiles" if quant_tiles and kernels.tiles_native() else "rows"
        if load_gguf_weights(model, gguf, dtype, parameter_target, progress and (lambda done, _: progress(done, total)),
                             cache, layout=layout):
            cache = None   # came from there: nothing to write
    else:
        cache = None
        _empty_on_cpu(model)
        files = weight_files(Path(folder))
        read_bytes = sum(path.stat().st_size for path in files)
        total = read_bytes + model.preparation_bytes()
        load_weights(model, files, progress and (lambda done, _: progress(done, total)))
        if quantize:
            quantize_model(model, quantize)
            total = read_bytes + model.preparation_bytes()
    model.finish_init(max_positions, progress and (lambda done: progress(read_bytes + done, total)),
                      deterministic=deterministic, small_m_max=small_m_max, pack_bf16=pack_bf16,
                      decoder_stack=decoder_stack, quant_tiles=quant_tiles, q8_wide_activations=q8_wide_activations)
    if cache is not None:
        cache.save_in_background(model)   # the model answers meanwhile; the process's exit waits for it
    if progress is not None:
        progress(total, total)
    return model.eval()


def load_weights(model: CausalLM, files: list[Path], progress: LoadProgress | None = None) -> None:
    """Copy the checkpoint into the model; progress(bytes read, bytes of the checkpoint files) after each tensor
    and once at the end with both equal (build_model rescales it to the whole load)."""
    total = sum(path.stat().st_size for path in files)
    done = 0
    params = dict(model.named_parameters())
    if model.args.tie_word_embeddings:
        params.pop("lm_head.weight", None)
    expected = {}
    for name in params:
        module = model.get_submodule(name.rsplit(".", 1)[0])
        slices = getattr(module, "output_sizes", None)
        expected[name] = set(range(len(slices))) if slices and len(slices) > 1 else {None}
    loaded: dict[str, set] = {name: set() for name in params}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                if key.endswith(IGNORED_SUFFIXES):
                    continue
                name, index = parameter_target(_renamed(key, model.args.renames))
                param = params.get(name)
                if param is None:
                    continue  # e.g. lm_head.weight of a tied checkpoint
                tensor = f.get_tensor(key)
                dest = param.data
                if index is not None:
                    module = model.get_submodule(name.rsplit(".", 1)[0])
                    start = module.slice_offsets[index]
                    dest = dest.narrow(0, start, module.output_sizes[index])
                if tuple(dest.shape) != tuple(tensor.shape):
                    raise ValueError(f"{path.name}: {key} has shape {tuple(tensor.shape)}, "
                                     f"the config expects {tuple(dest.shape)}")
                dest.copy_(tensor)
                # a fused checkpoint tensor (Phi-3's qkv_proj, gate_up_proj) fills every slice at once
                loaded[name].update(expected[name] if index is None else {index})
                if progress is not None:
                    done += tensor.nbytes
                    progress(min(done, total), total)
    if progress is not None:
        progress(total, total)
    missing = sorted(n for n in params if loaded[n] != expected[n])
    if missing:
        shown = ", ".join(missing[:5]) + (f" (+{len(missing) - 5} more)" if len(missing) > 5 else "")
        raise ValueError(f"the checkpoint is missing weights: {shown}")
