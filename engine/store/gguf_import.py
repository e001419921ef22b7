"""GGUF file -> a library entry. By default the file is registered in place (gguf_register.py): its weights
run quantized. `dequantize=True` writes a normal model folder instead: safetensors with Hugging Face tensor
names in 16/32-bit floats, beside the same config, tokenizer and generation config, which both the engine and
transformers load.

The weights come from the engine's own GGUF reader (engine/quant/gguf_export.py), so every family the engine
runs from a GGUF converts, including those transformers' GGUF reader does not know (granite, smollm3).
Tensors are dequantized one at a time, so progress is real and memory stays at one shard.
torch and the engine's GGUF readers are imported inside the functions that use them: every start imports the store.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .gguf_register import (library_name, open_checked, origin_of, previous_import, register_gguf, write_folder,
                            write_metadata)
from .pull import human_bytes
from .types import DownloadProgress, StoreError

SHARD_BYTES = 2 << 30


def import_gguf(store, path: Path, progress=None, name: str | None = None, dtype: str = "auto",
                dequantize: bool = False):
    if not dequantize:
        return register_gguf(store, path, progress=progress, name=name, dtype=dtype)
    return dequantize_gguf(store, path, progress=progress, name=name, dtype=dtype)


def _choose_dtype(dtype: str, num_params: int):
    import torch   # torch (~2 s): only when a .gguf file is dequantized
    if dtype == "auto":  # fp32 keeps small models exact; big ones would double the disk and RAM
        return torch.float32 if num_params < 2_000_000_000 else torch.bfloat16
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    except KeyError:
        raise StoreError(f"dtype must be auto, float32, bfloat16 or float16, not {dtype!r}") from None


def _write_shards(tensors, out: Path, report) -> list[str]:
    """Write (name, tensor) pairs as model.safetensors or shards + index, flushing every SHARD_BYTES.
    Returns the names written."""
    from safetensors.torch import save_file   # torch (~2 s): as above
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
    names = [k for shard in shards for k in shard]
    if len(shards) == 1:
        os.replace(out / "shard-1.tmp", out / "model.safetensors")
        return names
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        os.replace(out / f"shard-{i}.tmp", out / fname)
        weight_map.update({k: fname for k in shard})
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return names


class _Progress:
    """DownloadProgress per converted tensor, at most every 0.1 s (and always the last)."""

    def __init__(self, progress, filename: str, num_tensors: int, total_bytes: int):
        self.progress, self.filename, self.num, self.total = progress, filename, num_tensors, total_bytes
        self.i, self.done, self.start, self.last = 0, 0, time.monotonic(), 0.0

    def advance(self, nbytes: int) -> None:
        self.i += 1
        self.done += nbytes

    def __call__(self, tensor_name: str, finished: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if not finished and now - self.last < 0.1 and self.i < self.num:
            return
        self.last = now
        rate = self.done / max(now - self.start, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else None
        self.progress(DownloadProgress(self.filename, tensor_name, self.i, self.num, self.done, self.total, rate,
                                       0.0 if finished else eta, finished))


def dequantize_gguf(store, path: Path, progress=None, name: str | None = None, dtype: str = "auto"):
    # the model code and the GGUF reader (torch, gguf: ~2 s): only when a .gguf file is dequantized
    from llmchat.engine.model_loader import read_config
    from llmchat.engine.quant.gguf_export import dense_tensors

    stem = Path(path).stem
    path = Path(path).resolve()
    origin = origin_of(path, dtype)
    model = previous_import(store, origin, name)
    if model is not None:
        return model  # already converted: importing the same file again is instant
    reader, arch = open_checked(path)
    num_params = sum(int(t.n_elements) for t in reader.tensors)
    torch_dtype = _choose_dtype(dtype, num_params)
    need = num_params * (torch_dtype.itemsize)
    if need > store.free_space(store.registry.dir):
        raise StoreError(f"not enough disk space to import {path.name}: needs {human_bytes(need)}")
    # the file's tensor bytes, so the rate and ETA are of what is read (the F32 rope factors included)
    report = _Progress(progress, path.name, len(reader.tensors), sum(int(t.n_bytes) for t in reader.tensors))
    dtype_name = str(torch_dtype).removeprefix("torch.")

    def tensors(config: dict):
        for hf, tensor, nbytes in dense_tensors(reader, config, arch, torch_dtype):
            report.advance(nbytes)
            yield hf, tensor

    def fill(folder: Path) -> None:
        write_metadata(path, folder, dtype_name, reader, stem)   # checks every tensor's shape first
        config = read_config(folder)
        names = _write_shards(tensors(config), folder, report)
        # the file decides: a separate output head, or the token table tied to it (transformers must not
        # leave a missing lm_head random, nor the engine tie one it has)
        config["tie_word_embeddings"] = "lm_head.weight" not in names
        (folder / "config.json").write_text(json.dumps(config, indent=2))

    reg_name = library_name(store, stem, name)
    out = write_folder(store, reg_name, path, fill)
    report.i, report.done = report.num, report.total   # rope factors etc. are read into the config, not written
    report("done", finished=True)
    store.registry.add(reg_name, out, "gguf", owned=True, origin=origin)
    return store._from_registry(reg_name, {"path": str(out), "source": "gguf"})
