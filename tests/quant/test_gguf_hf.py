"""The config and tokenizer a GGUF registration writes (engine/store/gguf_hf.py, the engine's own metadata
reader) are the ones transformers' AutoConfig / AutoTokenizer build from the same file (the reference)."""
from __future__ import annotations

import pytest
from transformers import AutoConfig, AutoTokenizer

from gguf_models import FAMILIES
from llmchat.engine.quant.gguf_tensors import open_reader
from llmchat.engine.store.gguf_hf import hf_config, hf_tokenizer

TEXTS = ["Hello world", "def f(x):\n    return x  # héllo 😀", "  leading spaces and\ttabs", ""]


@pytest.mark.parametrize("arch", FAMILIES)
def test_config_is_transformers_config(tiny_gguf, arch):
    path = tiny_gguf(arch, "mixed")
    ours = hf_config(open_reader(path)).to_dict()
    reference = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name).to_dict()
    ours.pop("_name_or_path", None), reference.pop("_name_or_path", None)   # where it was loaded from
    assert ours == reference


@pytest.mark.parametrize("arch", FAMILIES)
def test_tokenizer_is_transformers_tokenizer(tiny_gguf, arch):
    path = tiny_gguf(arch, "mixed")
    reference = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ours = hf_tokenizer(path, AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name).model_type)
    assert type(ours) is type(reference)
    for text in TEXTS:
        ids = reference(text)["input_ids"]
        assert ours(text)["input_ids"] == ids
        assert ours.decode(ids) == reference.decode(ids)
    assert (ours.bos_token, ours.eos_token, ours.pad_token) == (reference.bos_token, reference.eos_token,
                                                                 reference.pad_token)
    assert ours.chat_template == reference.chat_template
