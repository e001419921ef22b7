"""Register a GGUF file in place: metadata -> config.json, tokenizer, chat template, generation config, and
gguf.json pointing at the file (engine/model_loader.py reads its weights, quantized, from there).

Everything is checked before anything is written (architecture, tensor types), and the folder
appears in the library only when complete.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from .types import DownloadProgress, StoreError, UnsupportedModelError

from .support import GGUF_ARCHITECTURES as ARCHITECTURES
POINTER = "gguf.json"
QUANT_SUFFIX = re.compile(r"[._-](?:[iu]?q\d\w*|bf16|f16|f32|fp16)$", re.IGNORECASE)


def base_name(stem: str) -> str:
    """The model a quant file was made from, by llama.cpp's naming: "SmolLM2-135M-Instruct-Q4_K_M" ->
    "SmolLM2-135M-Instruct" (so LoRA adapters trained on the original recognise their base)."""
    return QUANT_SUFFIX.sub("", stem) or stem


def quant_label(reader) -> str:
    """The file's quant as people name it (Q4_K_M, Q8_0...), from general.file_type, else its main tensor type."""
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


def _metadata_files(path: Path, out: Path, dtype: str, head_dim: int | None, reader, stem: str) -> None:
    """config.json, tokenizer files and generation_config.json from the GGUF metadata, into `out`."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from llmchat.engine.quant.gguf_tensors import field

    from .gguf_config import FAMILY_ARCHS, family_config
    arch = field(reader, "general.architecture")
    config = family_config(reader, arch)
    if config is None:
        config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        if head_dim:   # transformers does not map attention.key_length; Qwen3's config default (128) is not always it
            config.head_dim = head_dim
    config.architectures = [ARCHITECTURES.get(config.model_type) or ARCHITECTURES[arch]]   # a llama file may be mistral
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # activations and KV cache (weights stay quantized); "auto" leaves it to the engine: bf16 where the CPU has it
    config.dtype = None if dtype == "auto" else dtype
    config.save_pretrained(out)
    written = json.loads((out / "config.json").read_text())
    written["_name_or_path"] = base_name(stem)
    (out / "config.json").write_text(json.dumps(written, indent=2))
    from llmchat.engine.model_loader import _target, read_config
    from llmchat.engine.quant.gguf_model import check_shapes
    check_shapes(reader, read_config(out), path, _target)
    # AutoTokenizer reads the config through transformers' GGUF reader first, which refuses granite and smollm3;
    # the tokenizer itself is built from the same metadata by the same builders either way
    if arch in FAMILY_ARCHS:
        from transformers import PreTrainedTokenizerFast
        tok = PreTrainedTokenizerFast.from_pretrained(str(path.parent), gguf_file=path.name)
    else:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tok.save_pretrained(out)
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                     pad_token_id=getattr(config, "pad_token_id", None)).save_pretrained(out)


def register_gguf(store, path: Path, progress=None, name: str | None = None, dtype: str = "auto"):
    from llmchat.engine.quant.gguf_blocks import UnsupportedTensorType
    from llmchat.engine.quant.gguf_tensors import GGUFError, check_types, field, open_reader

    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise StoreError(f"dtype must be auto, float32, bfloat16 or float16, not {dtype!r}")
    stem = Path(path).stem            # named by the path given (a Hub cache link resolves to a hash-named blob)
    path = path.resolve()
    stat = path.stat()
    origin = {"path": str(path), "size": stat.st_size, "mtime": stat.st_mtime_ns, "in_place": True, "dtype": dtype}
    existing = store.registry.find_origin(origin)
    if existing is not None and name in (None, existing):
        model = store._from_registry(existing, store.registry.load()[existing])
        if model.supported:
            return model  # already registered: importing the same file again is instant
        store.registry.remove(existing)
    try:
        reader = open_reader(path)
        arch = field(reader, "general.architecture")
        if arch not in ARCHITECTURES:
            raise UnsupportedModelError(f"{path.name}: GGUF architecture {arch!r} cannot be used "
                                        f"(llmchat runs {', '.join(ARCHITECTURES)})")
        check_types(reader)
        # no chat template (a base model): it registers; the engine takes raw text or a known template for it
        # (engine/chat_templates.py), and a chat says so instead of failing
        quant = quant_label(reader)
        head_dim = field(reader, f"{arch}.attention.key_length")
        num_params = sum(int(t.n_elements) for t in reader.tensors)
    except (GGUFError, UnsupportedTensorType) as exc:
        raise StoreError(str(exc)) from None

    taken = {m.name for m in store.list()}
    if name and name in taken:
        raise StoreError(f"a model named {name!r} already exists")
    reg_name = name or store.registry.unique_name(stem, taken)
    out = store.registry.dir / reg_name
    tmp = store.registry.dir / (reg_name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _metadata_files(path, tmp, dtype, head_dim, reader, stem)
        (tmp / POINTER).write_text(json.dumps({"file": str(path), "size": stat.st_size, "quant": quant,
                                               "num_params": num_params}, indent=2))
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)  # the library only ever sees a finished folder
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, GGUFError):
            raise StoreError(str(exc)) from None
        if isinstance(exc, (KeyError, ValueError, OSError)) and not isinstance(exc, StoreError):
            raise StoreError(f"{path.name}: cannot read its metadata as a model ({exc})") from None
        raise
    if progress is not None:
        progress(DownloadProgress(path.name, "done", 1, 1, stat.st_size, stat.st_size, 0.0, 0.0, True))
    store.registry.add(reg_name, out, "gguf", owned=True, origin=origin)
    return store._from_registry(reg_name, {"path": str(out), "source": "gguf"})
