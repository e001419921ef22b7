"""adapter_config.json of a PEFT LoRA adapter: read it, refuse what the engine cannot serve, compute scalings.

Only plain LoRA on linear projections is served. Variants that change the forward pass (DoRA, aLoRA, KaSA,
LoRA bias, ...) or that train extra full modules (modules_to_save, trainable tokens) are refused with a
message naming the field, instead of being silently served wrong.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

# Fields that change inference or add weights the engine does not load: refuse when set (truthy).
UNSUPPORTED_FIELDS = {
    "use_dora": "DoRA (use_dora)",
    "modules_to_save": "modules_to_save (fully trained extra modules)",
    "trainable_token_indices": "trainable token embeddings (trainable_token_indices)",
    "lora_bias": "LoRA bias (lora_bias)",
    "fan_in_fan_out": "fan_in_fan_out (Conv1D-style weights)",
    "layer_replication": "layer_replication",
    "target_parameters": "target_parameters (LoRA on raw parameters)",
    "alora_invocation_tokens": "activated LoRA (alora_invocation_tokens)",
    "use_qalora": "QA-LoRA (use_qalora)",
    "use_bdlora": "block-diagonal LoRA (use_bdlora)",
    "kasa_config": "KaSA (kasa_config)",
    "monteclora_config": "MonteCLoRA (monteclora_config)",
    "arrow_config": "Arrow routing (arrow_config)",
}


@dataclass(frozen=True)
class AdapterConfig:
    r: int
    lora_alpha: float
    use_rslora: bool = False
    rank_pattern: dict[str, int] = field(default_factory=dict)
    alpha_pattern: dict[str, float] = field(default_factory=dict)
    base_model_name_or_path: str | None = None

    def scaling(self, module_key: str, rank: int) -> float:
        """PEFT's per-module scale: alpha / r, or alpha / sqrt(r) with rsLoRA (patterns matched like PEFT)."""
        alpha = self.alpha_pattern.get(_pattern_key(self.alpha_pattern, module_key), self.lora_alpha)
        r = self.rank_pattern.get(_pattern_key(self.rank_pattern, module_key), self.r)
        if r != rank:
            raise ValueError(f"{module_key}: tensors have rank {rank} but the config says r={r}")
        return alpha / math.sqrt(r) if self.use_rslora else alpha / r


def _pattern_key(patterns: dict, module_key: str) -> str:
    """The first pattern key that matches the module key as PEFT matches it: `(.*\\.)?{key}$`."""
    for key in patterns:
        if re.match(rf"(.*\.)?({key})$", module_key):
            return key
    return module_key


def read_adapter_config(folder: Path) -> AdapterConfig:
    """Parse and check adapter_config.json; ValueError says which file or field is wrong."""
    path = Path(folder) / "adapter_config.json"
    if not path.is_file():
        raise ValueError(f"{folder}: not a PEFT adapter folder (adapter_config.json is missing)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable adapter config ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: adapter config must be a JSON object")
    peft_type = str(raw.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise ValueError(f"{path}: peft_type {peft_type} is not supported (only LORA)")
    for key, what in UNSUPPORTED_FIELDS.items():
        if raw.get(key):
            raise ValueError(f"{path}: {what} is not supported; only plain LoRA adapters can be served")
    if raw.get("bias", "none") != "none":
        raise ValueError(f"{path}: bias={raw['bias']!r} is not supported (trained base biases); need 'none'")
    try:
        r = int(raw["r"])
        alpha = float(raw.get("lora_alpha", r))
        rank_pattern = {str(k): int(v) for k, v in (raw.get("rank_pattern") or {}).items()}
        alpha_pattern = {str(k): float(v) for k, v in (raw.get("alpha_pattern") or {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: bad r / lora_alpha / rank_pattern / alpha_pattern ({exc})") from None
    if r <= 0 or any(v <= 0 for v in rank_pattern.values()):
        raise ValueError(f"{path}: LoRA rank must be positive")
    return AdapterConfig(
        r=r, lora_alpha=alpha, use_rslora=bool(raw.get("use_rslora", False)),
        rank_pattern=rank_pattern, alpha_pattern=alpha_pattern,
        base_model_name_or_path=raw.get("base_model_name_or_path") or None,
    )
