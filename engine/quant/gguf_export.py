"""A GGUF file's weights as plain float tensors under Hugging Face names, for `models import --dequantize`.

It is the engine's own reader (gguf_tensors.read_tensors: names, q/k un-permutation, Gemma's 1 + w norms) with
every quantized weight dequantized by QuantWeight.dequantize, which gives exactly the gguf package's floats.
So every family the engine runs from a GGUF also converts, including those transformers' GGUF reader does not
know (granite, smollm3). Phi3's fused attn_qkv / ffn_up keep their fused Hugging Face names (qkv_proj,
gate_up_proj), which is how Phi3 checkpoints store them.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch

from llmchat.kernels.quant import QuantWeight

from .gguf_tensors import read_tensors


def dense_tensors(reader, config: dict, arch: str, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor, int]]:
    """(Hugging Face name, `dtype` tensor, bytes in the file) for every weight, one tensor in memory at a time."""
    for name, value, nbytes in read_tensors(reader, config, arch):
        if isinstance(value, QuantWeight):
            value = value.dequantize()
        yield name, value.to(dtype).contiguous(), nbytes
