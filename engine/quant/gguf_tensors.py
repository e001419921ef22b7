"""A GGUF file's tensors under Hugging Face names, quantized ones as QuantWeight, dense ones as tensors.

Names are declared as data (GGUF's llama-family names, which qwen2/qwen3/granite/smollm3 files share, and what
phi3 and gemma3 name differently). llama, granite and smollm3 files store q/k rows interleaved for llama.cpp's
rotary layout; those rows are put back in Hugging Face order here, which is exact for quantized rows too (rows
are independent blocks). gemma3 files store each norm as 1 + w; the engine's Gemma norm adds the 1 itself.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from llmchat.kernels import gguf_tiles
from llmchat.kernels.quant import QuantWeight

from .gguf_blocks import BLOCKS, DENSE, dense, repack, unsupported
from .gguf_file import GGUFFile, GGUFFormatError

TOP_LEVEL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
PER_LAYER = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
ARCH_PER_LAYER = {
    "phi3": {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},   # fused in the file
    "gemma3": {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
               "post_ffw_norm": "post_feedforward_layernorm"},
}
# derived from the config by the engine (phi3's LongRoPE factors are read into config.json at import)
IGNORED = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")
# llama.cpp's LlamaModel converter and its subclasses: q/k rows interleaved on disk
PERMUTED_ARCHS = ("llama", "granite", "smollm3")
NORMS_PLUS_ONE = ("gemma3",)


class GGUFError(ValueError):
    """A GGUF file that cannot be read as a model, with a message fit for the user."""


def open_reader(path: Path) -> GGUFFile:
    try:
        return GGUFFile(Path(path))
    except (GGUFFormatError, UnicodeDecodeError, ValueError, OverflowError, MemoryError):
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


def field(reader: GGUFFile, key: str):
    """A metadata value (a number, a str, or an array), or None where the file has no such key."""
    return reader.field(key)


def hf_name(name: str, arch: str = "llama") -> str | None:
    """GGUF tensor name -> Hugging Face parameter name; None for tensors the engine derives itself."""
    if name in IGNORED:
        return None
    if name in TOP_LEVEL:
        return TOP_LEVEL[name]
    m = LAYER_NAME.match(name)
    per_layer = {**PER_LAYER, **ARCH_PER_LAYER.get(arch, {})}
    if m and m.group(2) in per_layer:
        return f"model.layers.{m.group(1)}.{per_layer[m.group(2)]}.{m.group(3)}"
    raise GGUFError(f"tensor {name} is not one llmchat knows how to place (unknown name)")


def _unpermute(rows: int, heads: int) -> torch.Tensor:
    """Row order that undoes llama.cpp's q/k permutation (transformers' reverse_permute_weights)."""
    return torch.arange(rows).reshape(heads, rows // heads // 2, 2).transpose(1, 2).reshape(-1)


def tensor_types(reader) -> dict[str, int]:
    """GGUF type name -> how many tensors of the file have it."""
    counts: dict[str, int] = {}
    for t in reader.tensors:
        counts[t.type_name] = counts.get(t.type_name, 0) + 1
    return counts


def check_types(reader) -> None:
    """Refuse a file with a tensor type the engine cannot run, before any weight is read."""
    for t in reader.tensors:
        if t.type_name not in DENSE and t.type_name not in BLOCKS:
            raise unsupported(t.type_name, t.name)


def read_tensors(reader, config: dict, arch: str, quantized: bool = True, layout: str | None = None,
                 into: dict[str, QuantWeight] | None = None
                 ) -> Iterator[tuple[str, torch.Tensor | QuantWeight | None, int]]:
    """(Hugging Face name, dense tensor or QuantWeight, bytes in the file) for every weight of the file;
    quantized=False: block-quantized tensors are not read, their value is None. layout "tiles" or "rows": block
    tensors are made from the file's bytes by the compiled kernels (kernels/gguf_tiles.py) in that layout (the
    tiles where a tensor has whole 16-row groups, else rows), read through one reused buffer (no fresh pages per
    tensor); into: file tensor name -> the weight to write it into (engine/quant/gguf_load_plan.py). None: the
    numpy repack (gguf_blocks.py), which is their oracle."""
    check_types(reader)
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    into, buffer = into or {}, _ReadBuffer()
    for t in reader.tensors:
        name = hf_name(t.name, arch)
        if name is None:
            continue
        shape = [int(s) for s in t.shape]            # ggml order: shape[0] is the row length
        cols, rows = shape[0], int(np.prod(shape[1:])) if len(shape) > 1 else 0
        type_name = t.type_name
        if not quantized and type_name not in DENSE:
            yield name, None, int(t.n_bytes)
            continue
        order = None
        if arch in PERMUTED_ARCHS and (".q_proj." in name or ".k_proj." in name):
            order = _unpermute(rows or cols, heads if ".q_proj." in name else kv_heads)
        if layout is not None and gguf_tiles.takes(type_name, rows, cols, tiles=False):
            tiles = layout == "tiles" and gguf_tiles.takes(type_name, rows, cols)
            value = _compiled(reader, t, rows, cols, order, into.get(t.name), tiles, buffer)
        elif type_name in DENSE:
            value = dense(type_name, _read(reader, t), rows, cols)
            value = value if order is None else value[order]
        else:
            value = repack(type_name, _read(reader, t), rows, cols, t.name)
            value = value if order is None else value.rows(order)
        if arch in NORMS_PLUS_ONE and name.endswith("norm.weight") and isinstance(value, torch.Tensor):
            value = value - 1.0    # as transformers' Gemma GGUF loader does
        yield name, value, int(t.n_bytes)


READ_CHUNK = 32 << 20   # file bytes read (and written into their weight) at a time, in whole 16-row groups


class _ReadBuffer:
    """One buffer for every read of a load, as large as the largest (committed as it is written)."""

    def __init__(self):
        self.array = np.empty(0, dtype=np.uint8)

    def take(self, nbytes: int) -> np.ndarray:
        if self.array.size < nbytes:
            self.array = np.empty(0, dtype=np.uint8)   # the smaller one freed first
            self.array = np.empty(nbytes, dtype=np.uint8)
        return self.array


def _compiled(reader: GGUFFile, t, rows: int, cols: int, order: torch.Tensor | None, into: QuantWeight | None,
              tiles: bool, buffer: _ReadBuffer) -> QuantWeight:
    """A block tensor written by the compiled kernels into `into` (or a new weight), READ_CHUNK of the file at a
    time: a token table of hundreds of MB never sits in memory twice. (A row order reads the whole tensor.)"""
    row_bytes = int(t.n_bytes) // rows
    step = rows if order is not None else max(16, READ_CHUNK // row_bytes // 16 * 16)
    if step >= rows:
        raw = _read(reader, t, buffer.take(int(t.n_bytes)))
        return gguf_tiles.from_gguf(t.type_name, raw, rows, cols, order, into, tiles)
    whole = into if into is not None else gguf_tiles.empty(t.type_name, rows, cols, tiles)
    for lo in range(0, rows, step):
        hi = min(rows, lo + step)
        raw = _read(reader, t, buffer.take(step * row_bytes), lo * row_bytes, (hi - lo) * row_bytes)
        gguf_tiles.from_gguf(t.type_name, raw, hi - lo, cols, into=whole.rows(slice(lo, hi)), tiles=tiles)
    return whole


def _read(reader: GGUFFile, tensor, buffer: np.ndarray | None = None, start: int = 0,
          length: int | None = None) -> np.ndarray:
    try:
        return reader.read(tensor, buffer, start, length)
    except (GGUFFormatError, OSError):   # cut short or gone since it was opened
        raise GGUFError(unreadable_message(reader.path)) from None
