"""Read what a model folder is without loading it: config, safetensors headers, completeness, support."""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from .support import ARCHITECTURE_NOTES, INDEX_FILE, adapter_reason, architecture_reason

_DTYPE_NAMES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64", "I8": "int8",
                "U8": "uint8", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I32": "int32", "I64": "int64"}


@dataclass
class FolderInfo:
    kind: str                  # "model" | "adapter" | "unknown"
    architecture: str | None
    num_params: int | None
    dtype: str | None
    context_length: int | None
    complete: bool
    supported: bool
    reason: str
    base_model: str | None = None
    quant: str | None = None          # a GGUF registered in place: its quant (e.g. Q4_K_M)
    gguf_file: Path | None = None     # ... and the file it runs from


def read_json(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def safetensors_header(path: Path) -> tuple[dict, int] | None:
    """(header, expected file size) or None if the file is missing, truncated or not safetensors."""
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100_000_000:
                return None
            header = json.loads(f.read(n))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        return header, 8 + n + end
    except (OSError, ValueError, struct.error, KeyError, TypeError):
        return None


def weight_files(folder: Path, kind: str) -> list[str] | None:
    """Weight files the folder must hold; None if it names none."""
    if kind == "adapter":
        return ["adapter_model.safetensors"] if (folder / "adapter_model.safetensors").exists() else None
    index = read_json(folder / INDEX_FILE)
    if index and isinstance(index.get("weight_map"), dict):
        return sorted(set(index["weight_map"].values()))
    files = sorted(p.name for p in folder.glob("*.safetensors") if not p.name.startswith("consolidated"))
    return files or None


def _scan_weights(folder: Path, files: list[str]) -> tuple[bool, str, int, dict[str, int]]:
    """(complete, problem, num_params, elements per dtype) from the safetensors headers."""
    params, per_dtype = 0, {}
    for name in files:
        path = folder / name
        info = safetensors_header(path)
        if info is None:
            return False, f"{name} is missing or unreadable (incomplete download?)", 0, {}
        header, expected = info
        if os.path.getsize(path) != expected:
            return False, f"{name} is truncated (incomplete download?)", 0, {}
        for key, t in header.items():
            if key == "__metadata__":
                continue
            count = 1
            for d in t["shape"]:
                count *= d
            params += count
            per_dtype[t["dtype"]] = per_dtype.get(t["dtype"], 0) + count
    return True, "", params, per_dtype


def _context_length(config: dict) -> int | None:
    cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    for key in ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"):
        if isinstance(cfg.get(key), int):
            return cfg[key]
    return None


def describe_folder(folder: Path) -> FolderInfo:
    folder = Path(folder)
    config = read_json(folder / "config.json")
    adapter = read_json(folder / "adapter_config.json")
    kind = "model" if config is not None else "adapter" if adapter is not None else "unknown"
    if kind == "unknown":
        return FolderInfo("unknown", None, None, None, None, False, False, "no config.json or adapter_config.json")
    pointer = read_json(folder / "gguf.json") if kind == "model" else None
    if pointer is not None:
        return _describe_gguf(folder, config, pointer)
    files = weight_files(folder, kind)
    if files is None:
        bin_only = any(folder.glob("*.bin"))
        reason = ("only PyTorch .bin weights: llmchat loads safetensors only" if bin_only
                  else "no safetensors weights")
        complete, params, per_dtype = False, None, {}
    else:
        complete, reason, params, per_dtype = _scan_weights(folder, files)
    weights_dtype = _DTYPE_NAMES.get(max(per_dtype, key=per_dtype.get), None) if per_dtype else None
    if kind == "adapter":
        support = adapter_reason(adapter)
        return FolderInfo("adapter", "LoRA adapter", params or None, weights_dtype, None, complete,
                          complete and not support, reason or support,
                          base_model=adapter.get("base_model_name_or_path"))
    has_tokenizer = (folder / "tokenizer.json").exists() or (folder / "tokenizer.model").exists()
    support = architecture_reason(config)
    if complete and not support and not has_tokenizer:
        support = "no tokenizer files (tokenizer.json or tokenizer.model)"
    arch = (config.get("architectures") or [None])[0]
    dtype = weights_dtype or config.get("dtype") or config.get("torch_dtype")
    return FolderInfo("model", arch, params or None, dtype, _context_length(config), complete,
                      complete and not support, reason or support or ARCHITECTURE_NOTES.get(arch, ""))


def _describe_gguf(folder: Path, config: dict, pointer: dict) -> FolderInfo:
    """A library folder pointing at a GGUF file (registered in place)."""
    gguf = Path(str(pointer.get("file", "")))
    complete = gguf.is_file() and gguf.stat().st_size == pointer.get("size")
    reason = "" if complete else f"its GGUF file {gguf} is gone or changed: import it again"
    support = architecture_reason(config)
    arch = (config.get("architectures") or [None])[0]
    return FolderInfo("model", arch, pointer.get("num_params"), config.get("dtype"), _context_length(config),
                      complete, complete and not support, reason or support, quant=pointer.get("quant"),
                      gguf_file=gguf)


def folder_size(folder: Path) -> int:
    """Bytes on disk of the files a folder holds (symlinks followed, each blob counted once)."""
    seen, total = set(), 0
    for root, _dirs, names in os.walk(folder):
        for name in names:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total
