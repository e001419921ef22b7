"""Register a GGUF file in place: metadata -> config.json, tokenizer, chat template, generation config, and
gguf.json pointing at the file (engine/model_loader.py reads its weights, quantized, from there).

Everything is checked before anything is written (architecture, tensor types, tensor shapes), and the folder
appears in the library only when complete. The checks, the metadata files and the staging folder are shared
with `--dequantize` (gguf_import.py), which writes safetensors instead of gguf.json.
torch, transformers and gguf are imported inside the functions that use them: every start imports the store.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from .gguf_config import FAMILY_ARCHS, family_config
from .support import GGUF_ARCHITECTURES as ARCHITECTURES
from .types import DownloadProgress, StoreError, UnsupportedModelError

POINTER = "gguf.json"
QUANT_SUFFIX = re.compile(r"[._-](?:[iu]?q\d\w*|bf16|f16|f32|fp16)$", re.IGNORECASE)


def base_name(stem: str) -> str:
    """The model a quant file was made from, by llama.cpp's naming: "SmolLM2-135M-Instruct-Q4_K_M" ->
    "SmolLM2-135M-Instruct" (so LoRA adapters trained on the original recognise their base)."""
    return QUANT_SUFFIX.sub("", stem) or stem


def quant_label(reader) -> str:
    """The file's quant as people name it (Q4_K_M, Q8_0...), from general.file_type, else its main tensor type."""
    # gguf and the GGUF reader (torch, gguf: ~2 s): only for a .gguf file
    from gguf import LlamaFileType

    from llmchat.engine.quant.gguf_tensors import field, tensor_types
    ftype = field(reader, "general.file_type")
    if ftype is not None:
        try:
            return LlamaFileType(int(ftype)).name.removeprefix("MOSTLY_").replace("ALL_", "")
        except ValueError:
            pass
    types = {k: v for k, v in tensor_types(reader).items() if k not in ("F32",)}
    return max(types, key=types.get) if types else "F32"


def write_metadata(path: Path, out: Path, dtype: str | None, reader, stem: str) -> None:
    """config.json, tokenizer files and generation_config.json from the GGUF metadata, into `out`; dtype: the
    config's dtype (None: the engine chooses). Raises GGUFError if a tensor does not fit the config."""
    # transformers and the GGUF reader (torch, gguf: ~2 s): only when a .gguf file is registered
    from transformers import GenerationConfig

    from llmchat.engine.quant.gguf_tensors import field

    from .gguf_hf import hf_config, hf_tokenizer
    arch = field(reader, "general.architecture")
    head_dim = field(reader, f"{arch}.attention.key_length")
    config = family_config(reader, arch)
    if config is None:
        config = hf_config(reader)
        if head_dim:   # transformers does not map attention.key_length; Qwen3's config default (128) is not always it
            config.head_dim = head_dim
    config.architectures = [ARCHITECTURES.get(config.model_type) or ARCHITECTURES[arch]]   # a llama file may be mistral
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = dtype
    config.save_pretrained(out)
    written = json.loads((out / "config.json").read_text())
    written["_name_or_path"] = base_name(stem)
    (out / "config.json").write_text(json.dumps(written, indent=2))
    # the model code (torch, ~2 s): to check the file's tensors against the model, at registration only
    from llmchat.engine.model_loader import read_config
    from llmchat.engine.models import parameter_target
    from llmchat.engine.quant.gguf_model import check_shapes
    check_shapes(reader, read_config(out), path, parameter_target)
    # transformers' GGUF reader refuses granite and smollm3: those take the generic class; the tokenizer itself
    # is built from the same metadata by the same builders either way
    tok = hf_tokenizer(path, None if arch in FAMILY_ARCHS else config.model_type)
    tok.save_pretrained(out)
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                     pad_token_id=getattr(config, "pad_token_id", None)).save_pretrained(out)


def open_checked(path: Path):
    """(reader, architecture) of a GGUF file the engine can run, checked before anything is written; a
    StoreError with one clear line otherwise (junk, truncated, unknown architecture, unsupported type)."""
    # the GGUF reader (torch, gguf: ~2 s): only for a .gguf file
    from llmchat.engine.quant.gguf_blocks import UnsupportedTensorType
    from llmchat.engine.quant.gguf_tensors import GGUFError, check_types, field, open_reader
    try:
        reader = open_reader(path)
        arch = field(reader, "general.architecture")
        if arch not in ARCHITECTURES:
            raise UnsupportedModelError(f"{path.name}: GGUF architecture {arch!r} cannot be used "
                                        f"(llmchat runs {', '.join(ARCHITECTURES)})")
        check_types(reader)
    except (GGUFError, UnsupportedTensorType) as exc:
        raise StoreError(str(exc)) from None
    return reader, arch


def origin_of(path: Path, dtype: str, **extra) -> dict:
    """What identifies an import of this file: importing the same unchanged file again finds it."""
    stat = path.stat()
    return {"path": str(path), "size": stat.st_size, "mtime": stat.st_mtime_ns, **extra, "dtype": dtype}


def previous_import(store, origin: dict, name: str | None):
    """The library entry this same import already made, if it still works (else it is dropped)."""
    existing = store.registry.find_origin(origin)
    if existing is None or name not in (None, existing):
        return None
    model = store._from_registry(existing, store.registry.load()[existing])
    if model.supported:
        return model
    store.registry.remove(existing)   # its folder is gone or broken: import again
    return None


def library_name(store, stem: str, name: str | None) -> str:
    taken = {m.name for m in store.list()}
    if name and name in taken:
        raise StoreError(f"a model named {name!r} already exists")
    return name or store.registry.unique_name(stem, taken)


def write_folder(store, reg_name: str, path: Path, fill) -> Path:
    """fill(folder) into a fresh `.part` folder, then moved into place: the library only ever sees a finished
    folder, and a failure leaves nothing behind. Errors about the file become one-line StoreErrors."""
    # the GGUF reader (torch, gguf: ~2 s): only for a .gguf file
    from llmchat.engine.quant.gguf_tensors import GGUFError
    out = store.registry.dir / reg_name
    tmp = store.registry.dir / (reg_name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        fill(tmp)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, GGUFError):
            raise StoreError(str(exc)) from None
        if isinstance(exc, (KeyError, ValueError, OSError)) and not isinstance(exc, StoreError):
            raise StoreError(f"{path.name}: cannot read its metadata as a model ({exc})") from None
        raise
    return out


def register_gguf(store, path: Path, progress=None, name: str | None = None, dtype: str = "auto"):
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise StoreError(f"dtype must be auto, float32, bfloat16 or float16, not {dtype!r}")
    stem = Path(path).stem            # named by the path given (a Hub cache link resolves to a hash-named blob)
    path = path.resolve()
    origin = origin_of(path, dtype, in_place=True)
    model = previous_import(store, origin, name)
    if model is not None:
        return model  # already registered: importing the same file again is instant
    # no chat template (a base model): it registers; the engine takes raw text or a known template for it
    # (engine/chat_templates.py), and a chat says so instead of failing
    reader, _arch = open_checked(path)
    quant = quant_label(reader)
    num_params = sum(int(t.n_elements) for t in reader.tensors)
    size = path.stat().st_size

    def fill(folder: Path) -> None:
        # activations and KV cache (weights stay quantized); "auto" leaves it to the engine: bf16 where the CPU has it
        write_metadata(path, folder, None if dtype == "auto" else dtype, reader, stem)
        (folder / POINTER).write_text(json.dumps({"file": str(path), "size": size, "quant": quant,
                                                  "num_params": num_params}, indent=2))

    reg_name = library_name(store, stem, name)
    out = write_folder(store, reg_name, path, fill)
    if progress is not None:
        progress(DownloadProgress(path.name, "done", 1, 1, size, size, 0.0, 0.0, True))
    store.registry.add(reg_name, out, "gguf", owned=True, origin=origin)
    return store._from_registry(reg_name, {"path": str(out), "source": "gguf"})
