"""What the engine can run, and which files of a repo it needs. Pure functions over names and configs."""
from __future__ import annotations

import fnmatch

# The engine implements these decoder families (engine/models/); everything else is refused with a reason.
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
SUPPORTED_TEXT = "llmchat's engine runs Llama, Mistral, Qwen2 and Qwen3 models"

_SPECIFIC_REASONS = {
    "MixtralForCausalLM": "mixture-of-experts layers are not implemented",
    "Qwen2MoeForCausalLM": "mixture-of-experts layers are not implemented",
    "Qwen3MoeForCausalLM": "mixture-of-experts layers are not implemented",
    "Gemma2ForCausalLM": "Gemma needs soft-capping and alternating local attention, not implemented",
    "Gemma3ForCausalLM": "Gemma needs soft-capping and alternating local attention, not implemented",
    "Phi3ForCausalLM": "Phi-3 uses fused qkv/gate-up weights and LongRoPE, not implemented",
}

# Files the engine (and its tokenizer / chat template loader) reads, besides the weights.
CONFIG_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
INDEX_FILE = "model.safetensors.index.json"


def architecture_reason(config: dict | None) -> str:
    """Empty string if the engine runs a model with this config.json, else why not."""
    if not config:
        return "no config.json"
    archs = config.get("architectures") or []
    if not archs:
        return "config.json names no architecture"
    arch = archs[0]
    if arch not in SUPPORTED_ARCHITECTURES:
        why = _SPECIFIC_REASONS.get(arch, "this architecture is not implemented")
        return f"{arch}: {why} ({SUPPORTED_TEXT})"
    quant = config.get("quantization_config")
    if quant:
        method = quant.get("quant_method", "unknown") if isinstance(quant, dict) else "unknown"
        return (f"{method} quantized checkpoint: the engine loads plain fp32/bf16/fp16 safetensors "
                "(pick an unquantized repo, or import a GGUF file)")
    return ""


def adapter_reason(adapter_config: dict | None) -> str:
    if not adapter_config:
        return "no adapter_config.json"
    peft_type = adapter_config.get("peft_type", "LORA")
    if str(peft_type).upper() != "LORA":
        return f"{peft_type} adapters are not supported (only LoRA)"
    return ""


def _root_files(names: list[str]) -> list[str]:
    return [n for n in names if "/" not in n]


def weights_reason(names: list[str]) -> str:
    """Why the weight files of a (model) repo cannot be used; empty if safetensors are there."""
    root = _root_files(names)
    if any(n.endswith(".safetensors") and not n.startswith("consolidated") for n in root):
        return ""
    if any(n.endswith(".bin") or n.endswith(".pt") or n.endswith(".pth") for n in root):
        return ("only PyTorch .bin weights (pickle): llmchat loads safetensors only "
                "(look for a safetensors version of this model)")
    if any(n.endswith(".gguf") for n in names):
        return "GGUF-only repo: download the .gguf file and run `llmchat models import FILE`"
    return "no safetensors weights in the repo"


def select_files(names: list[str], weight_map_files: list[str] | None = None) -> tuple[str, list[str]]:
    """(kind, files to download) for a repo listing. `weight_map_files`: shards named by the index."""
    root = set(_root_files(names))
    if "adapter_config.json" in root and "config.json" not in root:
        picked = [f for f in ADAPTER_FILES + TOKENIZER_FILES if f in root]
        return "adapter", picked
    picked = [f for f in CONFIG_FILES + TOKENIZER_FILES if f in root]
    if INDEX_FILE in root:
        picked.append(INDEX_FILE)
        shards = weight_map_files if weight_map_files is not None else fnmatch.filter(sorted(root), "model-*.safetensors")
        picked += [s for s in shards if s in root]
    elif "model.safetensors" in root:
        picked.append("model.safetensors")
    else:  # unusual single/multi-file names; Mistral's consolidated.* is a different layout
        picked += sorted(n for n in root if n.endswith(".safetensors") and not n.startswith("consolidated"))
    return "model", picked
