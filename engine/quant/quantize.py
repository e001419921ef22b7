"""Quantize a 16/32-bit model while loading (`--quantize q8_0|q4_0|q4_k`): round to nearest, as llama.cpp's
quantize does without an importance matrix, into GGUF's own block formats, then the same lossless repack a
GGUF file gets (gguf_blocks.repack). So a quantized-at-load model computes exactly like a GGUF file holding
the same blocks.

Kept at higher precision: norms (tiny, and exact scale matters), and the output head (with a tied token
table, the table) in Q8_0: it is the tensor whose error every logit sees, which is why llama.cpp's
presets keep it at Q6_K/Q8_0 too. Rows that are not whole Q4_K super-blocks (256) fall back to Q5_0, as
llama.cpp does for such tensors.
"""
from __future__ import annotations

import numpy as np
import torch

from llmchat.kernels.quant import QuantWeight

from ..layers.linear import Linear
from .gguf_blocks import BLOCKS, repack

CHOICES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k": "Q4_K"}
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}   # llama.cpp's, for rows not whole 256-blocks
HEAD_TYPE = "Q8_0"


def _k_scales_mins(sub: np.ndarray, levels: int):
    """Q4_K/Q5_K factors for 32-element sub-blocks [blocks, 8, 32]: fp16 d, dmin, 6-bit scales and mins, and
    the values (0..levels). Each sub-block gets scale (max - min) / levels and min = -min(0, min)."""
    lo = np.minimum(sub.min(-1), 0)
    scale, mins = (sub.max(-1) - lo) / levels, -lo
    d = (scale.max(-1) / 63).astype(np.float16)
    dmin = (mins.max(-1) / 63).astype(np.float16)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.round(scale / df), 0).clip(0, 63).astype(np.uint8)
        mq = np.where(dminf > 0, np.round(mins / dminf), 0).clip(0, 63).astype(np.uint8)
        step, offset = (df * sc)[..., None], (dminf * mq)[..., None]
        q = np.where(step > 0, np.round((sub + offset) / step), 0).clip(0, levels).astype(np.uint8)
    packed = np.empty((sub.shape[0], 12), np.uint8)   # the inverse of gguf's Q4_K.get_scale_min
    packed[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    packed[:, 4:8] = (mq[:, :4] & 63) | ((mq[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:] & 15) | ((mq[:, 4:] & 15) << 4)
    head = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), packed], 1)
    return head, q


def _k_nibbles(q: np.ndarray) -> np.ndarray:
    """Values [blocks, 8, 32] -> 128 bytes: byte 32g + j = sub-block 2g element j | sub-block 2g + 1 << 4."""
    qs = (q & 15).reshape(-1, 4, 2, 32)
    return (qs[:, :, 0] | (qs[:, :, 1] << 4)).reshape(-1, 128)


def _q4_k_blocks(x: np.ndarray) -> np.ndarray:
    """fp32 [blocks, 256] -> Q4_K blocks [blocks, 144]: d, dmin, 12 bytes of scales/mins, 128 of nibbles."""
    head, q = _k_scales_mins(x.reshape(-1, 8, 32), 15)
    return np.concatenate([head, _k_nibbles(q)], 1)


def _q5_k_blocks(x: np.ndarray) -> np.ndarray:
    """fp32 [blocks, 256] -> Q5_K blocks [blocks, 176]: as Q4_K plus 32 bytes of bit 4 (bit i of byte j =
    sub-block i element j)."""
    head, q = _k_scales_mins(x.reshape(-1, 8, 32), 31)
    qh = (((q >> 4) & 1).astype(np.uint16) << np.arange(8, dtype=np.uint16).reshape(1, 8, 1)).sum(1)
    return np.concatenate([head, qh.astype(np.uint8), _k_nibbles(q)], 1)


def _q6_k_blocks(x: np.ndarray) -> np.ndarray:
    """fp32 [blocks, 256] -> Q6_K blocks [blocks, 210]: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8
    scales of 16-element sub-blocks, fp16 d."""
    sub = x.reshape(-1, 16, 16)
    scale = np.abs(sub).max(-1) / 32
    d = (scale.max(-1) / 127).astype(np.float16)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.round(scale / df), 0).clip(-128, 127).astype(np.int8)
        step = (df * sc)[..., None]
        q = (np.where(step != 0, np.round(sub / step), 0).clip(-32, 31) + 32).astype(np.uint8).reshape(-1, 2, 128)
    low, high = q & 15, q >> 4
    ql = (low[:, :, :64] | (low[:, :, 64:] << 4)).reshape(-1, 128)
    qh = sum(high[:, :, 32 * k:32 * k + 32] << (2 * k) for k in range(4)).reshape(-1, 64).astype(np.uint8)
    return np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(-1, 2)], 1)


K_QUANTIZERS = {"Q4_K": _q4_k_blocks, "Q5_K": _q5_k_blocks, "Q6_K": _q6_k_blocks}


def quantize_blocks(x: np.ndarray, type_name: str) -> np.ndarray:
    """fp32 [rows, cols] -> that GGUF type's raw blocks [rows, bytes per row]."""
    rows = x.shape[0]
    if type_name in K_QUANTIZERS:
        return K_QUANTIZERS[type_name](np.ascontiguousarray(x, np.float32).reshape(-1, 256)).reshape(rows, -1)
    # gguf's own quantizers (~170 ms): only for the types without a quantizer here
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize
    return quantize(np.ascontiguousarray(x, np.float32), GGMLQuantizationType[type_name])


def type_for(type_name: str, cols: int) -> str | None:
    """The type a row of `cols` elements gets: the wanted one, its fallback, or None (keep it dense)."""
    for t in (type_name, FALLBACK.get(type_name)):
        if t is not None and cols % BLOCKS[t][0] == 0:
            return t
    return None


def quantize_weight(w: torch.Tensor, type_name: str) -> QuantWeight | None:
    t = type_for(type_name, w.shape[1])
    if t is None:
        return None
    rows, cols = w.shape
    return repack(t, quantize_blocks(w.detach().float().numpy(), t), rows, cols)


def quantize_model(model, choice: str) -> dict[str, int]:
    """Quantize every decoder projection to `choice` and the output head to Q8_0, in place; returns how many
    weights got each GGUF type (layers whose rows fit no block stay dense)."""
    if choice not in CHOICES:
        raise ValueError(f"quantize must be one of {', '.join(CHOICES)}, got {choice!r}")
    counts: dict[str, int] = {}
    head = model.lm_head
    for module in model.modules():
        if not isinstance(module, Linear) or module is head or module.weight is None:
            continue
        q = quantize_weight(module.weight, CHOICES[choice])
        if q is None:
            continue
        for i, (start, size) in enumerate(zip(module.slice_offsets, module.output_sizes)):
            module.set_quantized(i, q.rows(slice(start, start + size)))
        counts[q.source] = counts.get(q.source, 0) + 1
    table = model.model.embed_tokens.weight if model.args.tie_word_embeddings else head.weight
    q = quantize_weight(table, HEAD_TYPE)
    if q is not None:
        if model.args.tie_word_embeddings:
            model.set_quantized_embedding(q)       # finish_init ties the head to it
        else:
            head.set_quantized(None, q)
        counts[q.source] = counts.get(q.source, 0) + 1
    return counts
