"""What the engine needs from config.json, read once into a plain dataclass (no transformers model built)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Family:
    """Per-architecture differences, declared as data. A str names the config key holding the bool."""
    qkv_bias: bool | str = False
    o_bias: bool | str = False
    mlp_bias: bool | str = False
    qk_norm: bool = False          # Qwen3: RMSNorm over head_dim on q and k, before rotary


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias"),
    "MistralForCausalLM": Family(),
    "Qwen2ForCausalLM": Family(qkv_bias=True),
    "Qwen3ForCausalLM": Family(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True),
}


def _flag(value: bool | str, config: dict) -> bool:
    return bool(config.get(value, False)) if isinstance(value, str) else value


def architecture_of(config: dict[str, Any]) -> str:
    archs = config.get("architectures") or []
    for arch in archs:
        if arch in FAMILIES:
            return arch
    shown = ", ".join(archs) if archs else f"model_type {config.get('model_type')!r}"
    raise ValueError(f"unsupported model architecture {shown}; supported: {', '.join(FAMILIES)}")


@dataclass
class ModelArgs:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    sliding_windows: list[int]     # per layer, -1 = full attention
    config: dict[str, Any] = field(repr=False)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ModelArgs":
        arch = architecture_of(config)
        fam = FAMILIES[arch]
        act = config.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"unsupported hidden_act {act!r} (only silu)")
        heads = config["num_attention_heads"]
        layers = config["num_hidden_layers"]
        return cls(
            architecture=arch,
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"],
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            max_position_embeddings=config.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=_flag(fam.qkv_bias, config),
            o_bias=_flag(fam.o_bias, config),
            mlp_bias=_flag(fam.mlp_bias, config),
            qk_norm=fam.qk_norm,
            sliding_windows=_sliding_windows(arch, config, layers),
            config=config,
        )


def _sliding_windows(arch: str, config: dict, layers: int) -> list[int]:
    window = config.get("sliding_window")
    if not window:
        return [-1] * layers
    if arch.startswith("Qwen") and not config.get("use_sliding_window", False):
        return [-1] * layers
    types = config.get("layer_types")
    if types:
        return [window if t == "sliding_attention" else -1 for t in types]
    return [window] * layers
