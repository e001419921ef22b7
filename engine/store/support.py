"""What the engine can run, and which files of a repo it needs. Pure functions over names and configs."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from ..architectures import ARCHITECTURE_NOTES, SUPPORTED_ARCHITECTURES, SUPPORTED_TEXT  # noqa: F401 (the store's names)

_SPECIFIC_REASONS = {
    "MixtralForCausalLM": "mixture-of-experts layers are not implemented",
    "Qwen2MoeForCausalLM": "mixture-of-experts layers are not implemented",
    "Qwen3MoeForCausalLM": "mixture-of-experts layers are not implemented",
    "Gemma2ForCausalLM": "Gemma needs soft-capping and alternating local attention, not implemented",
    "Gemma3nForCausalLM": "Gemma 3n's per-layer embeddings and AltUp are not implemented",
    "Gemma3nForConditionalGeneration": "Gemma 3n's per-layer embeddings and AltUp are not implemented",
    "PhiForCausalLM": "Phi-1/Phi-2 (parallel attention and MLP, LayerNorm) are not implemented",
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


# ---- GGUF repos -------------------------------------------------------------------------------------
# GGUF "general.architecture" values the engine runs, with the transformers class each one becomes.
GGUF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                      "qwen3": "Qwen3ForCausalLM", "granite": "GraniteForCausalLM", "phi3": "Phi3ForCausalLM",
                      "smollm3": "SmolLM3ForCausalLM", "gemma3": "Gemma3ForCausalLM"}
GGUF_TYPES_TEXT = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"
# A file's quant is named in its file name, llama.cpp style (Model-Q4_K_M.gguf, model.q8_0.gguf); the last
# such token counts. The engine runs the F16/BF16/F32, Q8_0, Q4_0/1, Q5_0/1 and Q4_K/Q5_K/Q6_K(_M/_S/_L) files
# (a Q4_K_M file mixes Q4_K, Q5_0, Q6_K, Q8_0...). The quants matched by _UNRUNNABLE_QUANT hold types it does not
# run (i-quants, 2/3-bit k-quants, ternary, MXFP4, the old ARM-repacked Q4_0_4_4 family). Other names (e.g. "Q4")
# say too little to refuse a file: the import checks its tensor types.
_QUANT_IN_NAME = re.compile(r"(?:^|[-._])((?:UD-)?(?:I?Q\d+(?:_[A-Z0-9]+)*|TQ\d_\d|MXFP4(?:_MOE)?|B?F16|F32|FP16|FP32))"
                            r"(?=$|[-.])", re.IGNORECASE)
_UNRUNNABLE_QUANT = re.compile(r"(?:UD-)?(?:IQ\d.*|Q[23]_K.*|TQ\d_\d|MXFP4.*|Q4_0_[48]_[48])")
_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})$", re.IGNORECASE)  # llama.cpp's gguf-split naming


@dataclass
class GGUFQuant:
    """One quant of a GGUF repo: its file (or the parts of a split file) and whether the engine runs it."""
    name: str                       # e.g. "Q4_K_M"; the file stem when the name carries no quant
    files: list[str]                # repo paths; several only for split files (-00001-of-00002.gguf)
    size: int | None                # bytes over all parts, when the Hub listed sizes
    supported: bool
    reason: str = ""                # why not, when not supported

    @property
    def split(self) -> bool:
        return len(self.files) > 1


def quant_name(filename: str) -> str | None:
    """The quant named in a GGUF file name (upper case, FP16 -> F16), or None if it names none."""
    stem = _SPLIT_PART.sub("", filename.rsplit("/", 1)[-1][:-len(".gguf")])
    found = _QUANT_IN_NAME.findall(stem)
    if not found:
        return None
    name = found[-1].upper()
    return {"FP16": "F16", "FP32": "F32"}.get(name, name)


def quant_reason(name: str | None) -> str:
    """Why the engine cannot run a quant of this name; empty if it can or if the name says nothing."""
    if name is None or not _UNRUNNABLE_QUANT.fullmatch(name):
        return ""
    return f"{name} uses tensor types the engine does not run (it runs {GGUF_TYPES_TEXT})"


def is_gguf_model_file(name: str) -> bool:
    base = name.rsplit("/", 1)[-1].lower()
    return base.endswith(".gguf") and not base.startswith("mmproj")  # mmproj: a vision projector, no LM


def gguf_quants(names: list[str], sizes: dict[str, int | None] | None = None) -> list[GGUFQuant]:
    """The quants in a repo listing, smallest first; split parts grouped into one quant with the summed size."""
    sizes = sizes or {}
    groups: dict[str, list[str]] = {}
    for name in sorted(n for n in names if is_gguf_model_file(n)):
        groups.setdefault(_SPLIT_PART.sub("", name[:-len(".gguf")]), []).append(name)
    named = [(quant_name(files[0]), stem, files) for stem, files in groups.items()]
    counts: dict[str | None, int] = {}
    for qname, _stem, _files in named:
        counts[qname] = counts.get(qname, 0) + 1
    quants = []
    for qname, stem, files in named:
        # Two files of one quant (e.g. in subfolders) or no quant in the name: the file stem tells them apart.
        label = qname if qname is not None and counts[qname] == 1 else stem
        part_sizes = [sizes.get(f) for f in files]
        size = sum(part_sizes) if part_sizes and all(s is not None for s in part_sizes) else None
        reason = quant_reason(qname)
        quants.append(GGUFQuant(label, files, size, not reason, reason))
    return sorted(quants, key=lambda q: (q.size is None, q.size or 0, q.name))


def gguf_architecture(gguf_metadata: dict | None, tags: list[str] | None) -> str | None:
    """The GGUF architecture of a repo: the Hub's GGUF metadata, else a family tag; None if neither says."""
    arch = (gguf_metadata or {}).get("architecture")
    if arch:
        return str(arch)
    return next((t for t in tags or [] if t in GGUF_ARCHITECTURES), None)


def gguf_architecture_reason(arch: str | None) -> str:
    if arch is None or arch in GGUF_ARCHITECTURES:
        return ""
    return f"GGUF architecture {arch!r} is not implemented ({SUPPORTED_TEXT})"


def gguf_repo_reason(arch: str | None, quants: list[GGUFQuant]) -> str:
    """Empty if the engine runs some quant of this GGUF repo, else why not."""
    if not quants:
        return "no GGUF model files in the repo"
    if arch is None:
        return "the Hub does not say which architecture these GGUF files are (pull a quant: the file tells)"
    if gguf_architecture_reason(arch):
        return gguf_architecture_reason(arch)
    if not any(q.supported for q in quants):
        return f"no GGUF file of a type the engine runs ({GGUF_TYPES_TEXT}): has {', '.join(q.name for q in quants)}"
    return ""


def base_models(tags: list[str] | None, card_data: dict | None = None) -> list[str]:
    """Repos this one was made from: the model card's base_model, else the Hub's base_model:... tags."""
    base = (card_data or {}).get("base_model")
    if base:
        return [base] if isinstance(base, str) else [b for b in base if isinstance(b, str)]
    found = [t.rsplit(":", 1)[-1] for t in tags or [] if t.startswith("base_model:") and t.count(":") <= 2]
    return list(dict.fromkeys(found))  # "base_model:X" and "base_model:quantized:X" name X twice
