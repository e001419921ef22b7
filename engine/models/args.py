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
    qk_norm: bool = False          # Qwen3, Gemma 3: RMSNorm over head_dim on q and k, before rotary
    sliding_switch: str | None = None   # config key that must be true for sliding_window to apply
    multipliers: bool = False      # Granite: embedding / attention / residual multipliers, logits_scaling
    nope_layers: bool = False      # SmolLM3: no_rope_layers[i] == 0 means layer i has no rotary
    gemma: bool = False            # Gemma 3: models/gemma3.py (x*(1+w) norms, four per layer, GeGLU...)
    text_config: bool = False      # a multimodal checkpoint: the language model's config is text_config
    # checkpoint name prefix -> engine prefix (the text part of a multimodal checkpoint)
    renames: tuple[tuple[str, str], ...] = ()


_GEMMA3 = dict(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True, gemma=True)
FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias"),
    "MistralForCausalLM": Family(),
    "Qwen2ForCausalLM": Family(qkv_bias=True, sliding_switch="use_sliding_window"),
    "Qwen3ForCausalLM": Family(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True,
                               sliding_switch="use_sliding_window"),
    "GraniteForCausalLM": Family(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias",
                                 multipliers=True),
    # the checkpoint's qkv_proj and gate_up_proj are the engine's fused projections already
    "Phi3ForCausalLM": Family(),
    "SmolLM3ForCausalLM": Family(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias",
                                 sliding_switch="use_sliding_window", nope_layers=True),
    "Gemma3ForCausalLM": Family(**_GEMMA3),
    # transformers 5 saves model.language_model.*, earlier versions language_model.model.*
    "Gemma3ForConditionalGeneration": Family(**_GEMMA3, text_config=True, renames=(
        ("model.language_model.", "model."), ("language_model.model.", "model."),
        ("language_model.lm_head.", "lm_head."))),
}
ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}


def _flag(value: bool | str, config: dict) -> bool:
    return bool(config.get(value, False)) if isinstance(value, str) else value


def architecture_of(config: dict[str, Any]) -> str:
    archs = config.get("architectures") or []
    for arch in archs:
        if arch in FAMILIES:
            return arch
    shown = ", ".join(archs) if archs else f"model_type {config.get('model_type')!r}"
    raise ValueError(f"unsupported model architecture {shown}; supported: {', '.join(FAMILIES)}")


def text_part(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's config: config.json itself, or a multimodal checkpoint's text_config with the
    defaults of its transformers config class filled in (Hub checkpoints store only what differs)."""
    arch = architecture_of(config)
    if not FAMILIES[arch].text_config:
        return config
    from transformers import AutoConfig   # transformers (~2 s): only for a multimodal checkpoint's text_config
    text = dict(config.get("text_config") or {})
    model_type = text.pop("model_type", "gemma3_text")
    full = AutoConfig.for_model(model_type, **text).to_dict()
    for key in ("eos_token_id", "bos_token_id", "pad_token_id", "tie_word_embeddings", "dtype", "torch_dtype"):
        if config.get(key) is not None:
            full[key] = config[key]
    full["architectures"] = [arch]
    return full


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
    config: dict[str, Any] = field(repr=False)   # the language model's config (text_part)
    attention_scale: float = 0.0   # softmax scale; head_dim ** -0.5 unless the family says otherwise
    embedding_scale: float = 1.0   # token embeddings are multiplied by it (Granite, Gemma's sqrt(hidden))
    residual_scale: float = 1.0    # each block's output is multiplied by it before the residual add (Granite)
    logits_divisor: float = 1.0    # logits are divided by it (Granite's logits_scaling)
    final_softcap: float | None = None   # Gemma: logits = cap * tanh(logits / cap)
    activation: str = "silu"       # MLP gate: "silu" (SwiGLU) or "gelu_tanh" (GeGLU)
    gemma: bool = False
    # per layer: which RoPE the layer applies (None: no rotary, a NoPE layer); a layer type for Gemma
    rope_layers: list[str | None] = field(default_factory=list)
    renames: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ModelArgs":
        arch = architecture_of(config)
        fam = FAMILIES[arch]
        config = text_part(config)
        act_name = config.get("hidden_activation") or config.get("hidden_act", "silu")
        if act_name not in ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {act_name!r} (supported: {', '.join(ACTIVATIONS)})")
        if config.get("attn_logit_softcapping"):
            raise ValueError("attention logit soft-capping (attn_logit_softcapping) is not implemented")
        heads = config["num_attention_heads"]
        layers = config["num_hidden_layers"]
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        types = _layer_types(fam, config, layers)
        return cls(
            architecture=arch,
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"],
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            max_position_embeddings=config.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", fam.gemma)),
            qkv_bias=_flag(fam.qkv_bias, config),
            o_bias=_flag(fam.o_bias, config),
            mlp_bias=_flag(fam.mlp_bias, config),
            qk_norm=fam.qk_norm,
            sliding_windows=_sliding_windows(fam, config, types),
            config=config,
            attention_scale=_attention_scale(fam, config, head_dim),
            embedding_scale=(config["hidden_size"] ** 0.5 if fam.gemma
                             else float(config.get("embedding_multiplier", 1.0)) if fam.multipliers else 1.0),
            residual_scale=float(config.get("residual_multiplier", 1.0)) if fam.multipliers else 1.0,
            logits_divisor=float(config.get("logits_scaling", 1.0)) if fam.multipliers else 1.0,
            final_softcap=config.get("final_logit_softcapping") or None,
            activation=ACTIVATIONS[act_name],
            gemma=fam.gemma,
            rope_layers=_rope_layers(fam, config, types),
            renames=fam.renames,
        )


def _attention_scale(fam: Family, config: dict, head_dim: int) -> float:
    if fam.gemma:
        return float(config.get("query_pre_attn_scalar") or head_dim) ** -0.5
    if fam.multipliers:
        return float(config.get("attention_multiplier", head_dim ** -0.5))
    return head_dim ** -0.5


def _layer_types(fam: Family, config: dict, layers: int) -> list[str] | None:
    """config's layer_types, or Gemma's from its sliding-window pattern (configs written before layer_types)."""
    types = config.get("layer_types")
    if types or not fam.gemma:
        return types
    pattern = config.get("sliding_window_pattern") or config.get("_sliding_window_pattern") or 6
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]


def _sliding_windows(fam: Family, config: dict, types: list[str] | None) -> list[int]:
    layers = config["num_hidden_layers"]
    window = config.get("sliding_window")
    if not window:
        return [-1] * layers
    if fam.sliding_switch and not config.get(fam.sliding_switch, False):
        return [-1] * layers
    if types:
        return [window if t == "sliding_attention" else -1 for t in types]
    return [window] * layers


def _rope_layers(fam: Family, config: dict, types: list[str] | None) -> list[str | None]:
    layers = config["num_hidden_layers"]
    if fam.gemma:
        return list(types)
    if fam.nope_layers:
        interval = config.get("no_rope_layer_interval", 4)
        flags = config.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
        return ["default" if flags[i] else None for i in range(layers)]
    return ["default"] * layers
