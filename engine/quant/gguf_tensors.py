"""A GGUF file's tensors under Hugging Face names, quantized ones as QuantWeight, dense ones as tensors.

Names are declared as data (GGUF's llama-family names, which qwen2/qwen3 files share). llama files store
q/k rows interleaved for llama.cpp's rotary layout; those rows are put back in Hugging Face order here, which
is exact for quantized rows too (rows are independent blocks).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from llmchat.kernels.quant import QuantWeight

from .gguf_blocks import BLOCKS, DENSE, dense, repack, unsupported

TOP_LEVEL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
PER_LAYER = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
IGNORED = ("rope_freqs.weight",)   # derived from the config by the engine
LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")
PERMUTED_ARCHS = ("llama",)        # as transformers' LlamaTensorProcessor: q/k rows interleaved on disk


class GGUFError(ValueError):
    """A GGUF file that cannot be read as a model, with a message fit for the user."""


def open_reader(path: Path):
    from gguf import GGUFReader
    try:
        return GGUFReader(str(path))
    except Exception:  # the gguf package raises numpy/struct errors on junk or truncation: say what it means
        raise GGUFError(unreadable_message(Path(path))) from None


def unreadable_message(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        return f"cannot read {path.name}: {exc.strerror or exc}"
    if magic != b"GGUF":
        return f"{path.name} is not a GGUF file (it does not start with the GGUF signature)"
    return (f"{path.name} is damaged or cut short ({path.stat().st_size:,} bytes; an interrupted download?): "
            "download or copy it again")


def field(reader, key: str):
    f = reader.fields.get(key)
    if f is None or not f.data:
        return None
    part = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(part).decode("utf-8", errors="replace")
    return part.tolist()[0] if hasattr(part, "tolist") else part


def hf_name(name: str) -> str | None:
    """GGUF tensor name -> Hugging Face parameter name; None for tensors the engine derives itself."""
    if name in IGNORED:
        return None
    if name in TOP_LEVEL:
        return TOP_LEVEL[name]
    m = LAYER_NAME.match(name)
    if m and m.group(2) in PER_LAYER:
        return f"model.layers.{m.group(1)}.{PER_LAYER[m.group(2)]}.{m.group(3)}"
    raise GGUFError(f"tensor {name} is not one llmchat knows how to place (unknown name)")


def _unpermute(rows: int, heads: int) -> torch.Tensor:
    """Row order that undoes llama.cpp's q/k permutation (transformers' reverse_permute_weights)."""
    return torch.arange(rows).reshape(heads, rows // heads // 2, 2).transpose(1, 2).reshape(-1)


def tensor_types(reader) -> dict[str, int]:
    """GGUF type name -> how many tensors of the file have it."""
    counts: dict[str, int] = {}
    for t in reader.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return counts


def check_types(reader) -> None:
    """Refuse a file with a tensor type the engine cannot run, before any weight is read."""
    for t in reader.tensors:
        if t.tensor_type.name not in DENSE and t.tensor_type.name not in BLOCKS:
            raise unsupported(t.tensor_type.name, t.name)


def read_tensors(reader, config: dict, arch: str) -> Iterator[tuple[str, torch.Tensor | QuantWeight, int]]:
    """(Hugging Face name, dense tensor or QuantWeight, bytes in the file) for every weight of the file."""
    check_types(reader)
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        shape = [int(s) for s in t.shape]            # ggml order: shape[0] is the row length
        cols, rows = shape[0], int(np.prod(shape[1:])) if len(shape) > 1 else 0
        raw = np.asarray(t.data).view(np.uint8)
        type_name = t.tensor_type.name
        value = dense(type_name, raw, rows, cols) if type_name in DENSE else repack(type_name, raw, rows, cols, t.name)
        if arch in PERMUTED_ARCHS and (".q_proj." in name or ".k_proj." in name):
            order = _unpermute(value.shape[0] if isinstance(value, torch.Tensor) else value.n,
                               heads if ".q_proj." in name else kv_heads)
            value = value[order] if isinstance(value, torch.Tensor) else value.rows(order)
        yield name, value, int(t.n_bytes)
