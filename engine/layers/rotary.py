"""Rotary position embedding: the RoPE variants Llama/Mistral/Qwen/Phi-3/Gemma ship, as fp32 cos/sin caches.

inv_freq is computed with the same float32 operations as transformers' ROPE_INIT_FUNCTIONS, so fp32 logits
match it bit for bit. Both config styles are read: transformers 5 `rope_parameters` and transformers 4
`rope_theta` + `rope_scaling`. Gemma 3 has one RoPE per layer type (local layers: rope_local_base_freq).

LongRoPE (Phi-3) has two frequency sets; transformers switches to the long one once a sequence passes
original_max_position_embeddings and rotates everything again. A paged cache keeps keys rotated when they
were written, so the engine picks one set for its lifetime: long when max_model_len exceeds the original
context, short otherwise (docs/architecture.md).
"""
from __future__ import annotations

import math
from typing import Any

import torch

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")


def rope_parameters(config: dict[str, Any], layer_type: str | None = None) -> dict[str, Any]:
    """One flat dict with rope_type, rope_theta and the variant's fields, whichever style config.json uses.
    layer_type: Gemma's "sliding_attention" / "full_attention", whose RoPEs differ."""
    params = dict(config.get("rope_parameters") or {})
    legacy = config.get("rope_scaling") or {}
    if layer_type is not None and isinstance(params.get(layer_type), dict):
        params, legacy = dict(params[layer_type]), {}
    elif layer_type == "sliding_attention" and config.get("rope_local_base_freq"):
        params, legacy = {"rope_type": "default", "rope_theta": config["rope_local_base_freq"]}, {}
    for key, value in legacy.items():
        params.setdefault(key, value)
    params["rope_type"] = params.get("rope_type") or params.get("type") or "default"
    if params.get("rope_theta") is None:
        params["rope_theta"] = config.get("rope_theta", 10000.0)
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        params.setdefault("original_max_position_embeddings",
                          config.get("original_max_position_embeddings", config["max_position_embeddings"]))
    if params["rope_type"] not in SUPPORTED_ROPE_TYPES:
        raise ValueError(f"unsupported RoPE type {params['rope_type']!r}; supported: "
                         f"{', '.join(SUPPORTED_ROPE_TYPES)}")
    return params


def _base_inv_freq(base: float, dim: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def _llama3(inv_freq: torch.Tensor, p: dict) -> torch.Tensor:
    factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    old_len = p["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _yarn(base: float, dim: int, p: dict, max_position_embeddings: int) -> tuple[torch.Tensor, float]:
    factor = p.get("factor")
    orig_len = p["original_max_position_embeddings"]
    if factor is None:
        factor = max_position_embeddings / orig_len

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = p.get("attention_factor")
    if attention_factor is None:
        m, m_all = p.get("mscale"), p.get("mscale_all_dim")
        attention_factor = float(mscale(factor, m) / mscale(factor, m_all)) if m and m_all else mscale(factor)
    beta_fast = p.get("beta_fast") or 32
    beta_slow = p.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(orig_len / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    extra_factor = 1 - ramp
    inv_freq = interpolation * (1 - extra_factor) + extrapolation * extra_factor
    return inv_freq, attention_factor


def _longrope(base: float, dim: int, p: dict, max_position_embeddings: int,
              max_positions: int) -> tuple[torch.Tensor, float]:
    """Phi-3's LongRoPE, the factor set picked once for the engine's max_model_len (see the module doc)."""
    orig_len = p["original_max_position_embeddings"]
    factor = p.get("factor") or max_position_embeddings / orig_len
    attention_factor = p.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig_len))
    ext = torch.tensor(p["long_factor"] if max_positions > orig_len else p["short_factor"], dtype=torch.float32)
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    return 1.0 / (ext * base ** shape), attention_factor


def compute_inv_freq(config: dict[str, Any], head_dim: int, max_positions: int | None = None,
                     layer_type: str | None = None) -> tuple[torch.Tensor, float]:
    """(inv_freq [rot_dim/2] fp32, attention scaling applied to cos and sin). max_positions: the engine's
    max_model_len (LongRoPE picks its factor set by it)."""
    p = rope_parameters(config, layer_type)
    base = p["rope_theta"]
    dim = int(head_dim * p.get("partial_rotary_factor", config.get("partial_rotary_factor") or 1.0))
    kind = p["rope_type"]
    if kind == "yarn":
        return _yarn(base, dim, p, config["max_position_embeddings"])
    if kind == "longrope":
        return _longrope(base, dim, p, config["max_position_embeddings"],
                         max_positions or config["max_position_embeddings"])
    inv_freq = _base_inv_freq(base, dim)
    if kind == "linear":
        inv_freq = inv_freq / p["factor"]
    elif kind == "llama3":
        inv_freq = _llama3(inv_freq, p)
    return inv_freq, 1.0


def cos_sin_cache(config: dict[str, Any], head_dim: int, max_positions: int,
                  layer_type: str | None = None) -> torch.Tensor:
    """fp32 [max_positions, rot_dim] = cat(cos, sin) of the half-dim frequencies (the kernels' layout)."""
    inv_freq, scaling = compute_inv_freq(config, head_dim, max_positions, layer_type)
    freqs = torch.arange(max_positions, dtype=torch.int64).float()[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos() * scaling, freqs.sin() * scaling), dim=-1).contiguous()


def cos_sin_for(positions: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-width cos and sin [T, 1, rot_dim] for these positions (duplicated halves, as transformers)."""
    cos_sin = cache.index_select(0, positions)
    half = cos_sin.shape[-1] // 2
    cos = torch.cat((cos_sin[:, :half], cos_sin[:, :half]), dim=-1)[:, None, :]
    sin = torch.cat((cos_sin[:, half:], cos_sin[:, half:]), dim=-1)[:, None, :]
    return cos, sin


def apply_rotary_torch(query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                       head_dim: int) -> None:
    """Neox-style rotation of query [T, Hq*D] and key [T, Hkv*D] in place (the pure-torch reference)."""
    rot = cos.shape[-1]
    half = rot // 2
    for x in (query, key):
        heads = x.view(x.shape[0], -1, head_dim)
        part = heads[..., :rot]
        xf = part.float()
        x1, x2 = xf[..., :half], xf[..., half:]
        rotated = torch.cat((-x2, x1), dim=-1)
        part.copy_(xf * cos + rotated * sin)
