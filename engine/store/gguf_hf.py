"""A GGUF file's transformers config and tokenizer, from the engine's own metadata reader.

transformers builds both from a GGUF file through the gguf package's GGUFReader (its legacy path for llama,
mistral, qwen2 and qwen3 files), once for the config and once more for the tokenizer: ~35 s of Python objects
for a 151,936-token vocabulary. The config here follows the same name mapping (transformers' own tables,
GGUF_TO_TRANSFORMERS_MAPPING) over the values engine/quant/gguf_file.py reads in well under a second; the
tokenizer is transformers' own GGUF tokenizer builder, which reads its two big arrays with transformers' fast
reader. Tests compare both with transformers' AutoConfig / AutoTokenizer on the same files.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from transformers import AutoConfig, PretrainedConfig, PreTrainedTokenizerFast
from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING
from transformers.modeling_gguf_pytorch_utils import GGUF_TO_TRANSFORMERS_MAPPING
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES, tokenizer_class_from_name


def _plain(value):
    return value.tolist() if isinstance(value, np.ndarray) else value


def config_dict(reader) -> dict:
    """What transformers' load_gguf_checkpoint(path)["config"] gives for this file (llama-family files)."""
    arch = reader.field("general.architecture")
    name = reader.field("general.name")
    # transformers tests `"mistral" in [name]`: only a file named exactly "mistral" reads as one
    updated = "mistral" if "llama" in arch and name == "mistral" else arch
    config: dict = {"tie_word_embeddings": all(t.name != "output.weight" for t in reader.tensors)}
    for key, value in GGUF_CONFIG_DEFAULTS_MAPPING.get(updated, GGUF_CONFIG_DEFAULTS_MAPPING.get(arch) or {}).items():
        config.setdefault(key, value)
    mapping = GGUF_TO_TRANSFORMERS_MAPPING["config"]
    for key, value in reader.fields.items():
        prefix, _, rest = key.replace(arch, updated).partition(".")
        renamed = mapping.get(prefix, {}).get(rest)
        if renamed is None or renamed == -1:
            continue
        value = _plain(value)
        if isinstance(value, str) and arch in value:
            value = value.replace(arch, updated)
        config[renamed] = value
    if "vocab_size" not in config and reader.field("tokenizer.ggml.tokens") is not None:
        config["vocab_size"] = len(reader.field("tokenizer.ggml.tokens"))
    return config


def hf_config(reader) -> PretrainedConfig:
    values = config_dict(reader)
    return AutoConfig.for_model(**values)


def hf_tokenizer(path: Path, model_type: str | None = None) -> PreTrainedTokenizerFast:
    """The file's tokenizer, built by transformers' GGUF builders, of the class AutoTokenizer picks for
    `model_type` (None, or a type it has none for: the generic fast tokenizer)."""
    name = TOKENIZER_MAPPING_NAMES.get(model_type) if model_type else None
    cls = (tokenizer_class_from_name(name) if name else None) or PreTrainedTokenizerFast
    return cls.from_pretrained(str(path.parent), gguf_file=path.name)
