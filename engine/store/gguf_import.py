"""GGUF file -> a library entry. By default the file is registered in place: a small folder in llmchat's
data dir holds the config, tokenizer, chat template and generation config read from the GGUF metadata, plus
gguf.json pointing at the file, whose weights the engine runs quantized (engine/quant/). `dequantize=True`
writes a safetensors copy instead (16/32-bit floats).

The GGUF metadata decides the architecture. transformers parses the metadata into a config and a tokenizer;
when dequantizing, the tensors are dequantized one at a time with the `gguf` package (so progress is real and
memory stays at one shard), renamed with transformers' GGUF name map and its llama q/k un-permutation.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from ..quant.gguf_tensors import unreadable_message
from .support import SUPPORTED_ARCHITECTURES, SUPPORTED_TEXT
from .types import DownloadProgress, StoreError, UnsupportedModelError

GGUF_ARCHS = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}
SHARD_BYTES = 2 << 30


def _field(reader, key: str):
    from transformers.modeling_gguf_pytorch_utils import read_field
    value = read_field(reader, key)
    return value[0] if value else None


def _name_map(arch: str, skeleton) -> dict[str, str]:
    """GGUF tensor name -> HF parameter name (built once; transformers rebuilds it per submodule)."""
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map
    arch_enum = next(k for k, v in MODEL_ARCH_NAMES.items() if v == arch)
    tensor_map = get_tensor_name_map(arch_enum, skeleton.config.num_hidden_layers)
    out = {}
    for key in skeleton.state_dict():
        stem, _, suffix = key.rpartition(".")
        gguf_name = tensor_map.get_name(stem)
        if gguf_name is not None:
            out[f"{gguf_name}.{suffix}"] = key
    return out


def _choose_dtype(dtype: str, num_params: int):
    import torch
    if dtype == "auto":  # fp32 keeps small models exact; big ones would double the disk and RAM
        return torch.float32 if num_params < 2_000_000_000 else torch.bfloat16
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    except KeyError:
        raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, not {dtype!r}") from None


def _write_shards(tensors, out: Path, report) -> None:
    """Write (name, tensor) pairs as model.safetensors or shards + index, flushing every SHARD_BYTES."""
    from safetensors.torch import save_file
    shards, current, size, total = [], {}, 0, 0
    for name, tensor in tensors:
        current[name] = tensor
        size += tensor.numel() * tensor.element_size()
        if size >= SHARD_BYTES:
            shards.append(current)
            save_file(current, str(out / f"shard-{len(shards)}.tmp"), metadata={"format": "pt"})
            total += size
            current, size = {}, 0
        report(name)
    if current or not shards:
        shards.append(current)
        save_file(current, str(out / f"shard-{len(shards)}.tmp"), metadata={"format": "pt"})
        total += size
    if len(shards) == 1:
        os.replace(out / "shard-1.tmp", out / "model.safetensors")
        return
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        os.replace(out / f"shard-{i}.tmp", out / fname)
        weight_map.update({k: fname for k in shard})
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))


def import_gguf(store, path: Path, progress=None, name: str | None = None, dtype: str = "auto",
                dequantize: bool = False):
    if not dequantize:
        from .gguf_register import register_gguf
        return register_gguf(store, path, progress=progress, name=name, dtype=dtype)
    return dequantize_gguf(store, path, progress=progress, name=name, dtype=dtype)


def dequantize_gguf(store, path: Path, progress=None, name: str | None = None, dtype: str = "auto"):
    import numpy as np
    import torch
    from gguf import GGUFReader, dequantize
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor

    stat = path.stat()
    origin = {"path": str(path.resolve()), "size": stat.st_size, "mtime": stat.st_mtime_ns, "dtype": dtype}
    existing = store.registry.find_origin(origin)
    if existing is not None and name in (None, existing):
        model = store._from_registry(existing, store.registry.load()[existing])
        if model.supported:
            return model  # already converted: importing the same file again is instant
        store.registry.remove(existing)  # its folder is gone or broken: convert again
    try:
        reader = GGUFReader(str(path))
    except Exception:  # the gguf package raises numpy/struct errors on junk or truncation
        raise StoreError(unreadable_message(path)) from None
    arch = _field(reader, "general.architecture")
    if arch not in GGUF_ARCHS:
        raise UnsupportedModelError(f"{path.name}: GGUF architecture {arch!r} cannot be used ({SUPPORTED_TEXT})")
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    model_class = type(skeleton).__name__
    if model_class not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedModelError(f"{path.name}: {model_class} cannot be used ({SUPPORTED_TEXT})")
    num_params = sum(int(np.prod(t.shape)) for t in reader.tensors)
    torch_dtype = _choose_dtype(dtype, num_params)
    need = num_params * torch.finfo(torch_dtype).bits // 8
    data_root = store.registry.dir
    if need > store.free_space(data_root):
        from .pull import human_bytes
        raise StoreError(f"not enough disk space to import {path.name}: needs {human_bytes(need)}")

    taken = {m.name for m in store.list()}
    reg_name = name or store.registry.unique_name(path.stem, taken)
    if name and name in taken:
        raise StoreError(f"a model named {name!r} already exists")
    out = data_root / reg_name
    tmp = data_root / (reg_name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=config.to_dict())
        name_map = _name_map(arch, skeleton)
        total = sum(int(t.n_bytes) for t in reader.tensors)
        state = {"done": 0, "i": 0, "start": time.monotonic(), "last": 0.0}

        def report(tensor_name: str, finished: bool = False) -> None:
            if progress is None:
                return
            now = time.monotonic()
            if not finished and now - state["last"] < 0.1 and state["i"] < len(reader.tensors):
                return
            state["last"] = now
            rate = state["done"] / max(now - state["start"], 1e-9)
            eta = (total - state["done"]) / rate if rate > 0 else None
            progress(DownloadProgress(path.name, tensor_name, state["i"], len(reader.tensors), state["done"],
                                      total, rate, 0.0 if finished else eta, finished))

        def tensors():
            for t in reader.tensors:
                state["i"] += 1
                state["done"] += int(t.n_bytes)
                result = processor.process(weights=dequantize(t.data, t.tensor_type), name=t.name,
                                           tensor_key_mapping=name_map, parsed_parameters={})
                if result.name not in name_map:
                    continue  # e.g. rope_freqs: derived from the config, not a weight
                yield name_map[result.name], torch.from_numpy(np.array(result.weights)).to(torch_dtype)

        _write_shards(tensors(), tmp, report)
        config.architectures = [model_class]
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # the weights we wrote are plain floats
        config.dtype = torch_dtype
        config.save_pretrained(tmp)
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        template = _field(reader, "tokenizer.chat_template")
        if template and not getattr(tok, "chat_template", None):
            tok.chat_template = template
        tok.save_pretrained(tmp)
        GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                         pad_token_id=getattr(config, "pad_token_id", None)).save_pretrained(tmp)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)  # the library only ever sees a finished folder
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report("done", finished=True)
    store.registry.add(reg_name, out, "gguf", owned=True, origin=origin)
    return store._from_registry(reg_name, {"path": str(out), "source": "gguf"})
