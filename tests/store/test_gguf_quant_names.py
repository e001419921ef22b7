"""Quant names read from GGUF file names as the Hub's GGUF repos spell them, and which ones the engine runs."""
from __future__ import annotations

import pytest

from llmchat.engine.store.pull import QuantChoiceError, pick_quant
from llmchat.engine.store.support import base_models, gguf_quants, quant_name, quant_reason


@pytest.mark.parametrize("filename,quant", [
    ("SmolLM2-135M-Instruct-Q4_K_M.gguf", "Q4_K_M"),            # bartowski
    ("llama-2-7b-chat.Q5_K_S.gguf", "Q5_K_S"),                   # TheBloke: dot before the quant
    ("qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0"),                 # Qwen: lower case; "2.5-0.5b" is no quant
    ("Llama-3.2-1B-Instruct-f16.gguf", "F16"),
    ("model-fp16.gguf", "F16"),
    ("Qwen3-0.6B-BF16.gguf", "BF16"),
    ("Llama-3.2-3B-Instruct-Q6_K_L.gguf", "Q6_K_L"),             # bartowski: Q8_0 embeddings
    ("Qwen3-8B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),                  # unsloth dynamic
    ("Q8_0/Big-Model-Q8_0-00001-of-00003.gguf", "Q8_0"),         # split parts in a subfolder
    ("Mistral-7B-Instruct-v0.3-IQ4_XS.gguf", "IQ4_XS"),
    ("ggml-model.gguf", None),
])
def test_quant_name(filename, quant):
    assert quant_name(filename) == quant


@pytest.mark.parametrize("quant", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S",
                                   "Q6_K", "Q6_K_L", "F16", "BF16", "F32", "UD-Q4_K_XL", None, "Q4"])
def test_runnable_or_unknown_quants_are_not_refused(quant):
    assert quant_reason(quant) == ""  # a name that says too little is left to the import, which reads the types


@pytest.mark.parametrize("quant", ["IQ4_XS", "IQ2_M", "UD-IQ1_S", "Q2_K", "Q2_K_L", "Q3_K_M", "Q3_K_XL", "TQ1_0",
                                   "MXFP4_MOE", "Q4_0_4_4", "Q4_0_8_8"])
def test_quants_of_types_the_engine_lacks_are_refused_by_name(quant):
    assert quant in quant_reason(quant) and "Q4_K" in quant_reason(quant)  # names what it does run


def test_quants_grouped_split_parts_summed_projectors_skipped():
    names = ["M-Q4_K_M.gguf", "M-Q8_0.gguf", "M-Q6_K-00001-of-00002.gguf", "M-Q6_K-00002-of-00002.gguf",
             "mmproj-M-f16.gguf", "README.md", "M-IQ3_M.gguf", "sub/M-Q4_K_M.gguf"]
    sizes = {"M-Q4_K_M.gguf": 50, "M-Q8_0.gguf": 90, "M-Q6_K-00001-of-00002.gguf": 40,
             "M-Q6_K-00002-of-00002.gguf": 30, "M-IQ3_M.gguf": 35, "sub/M-Q4_K_M.gguf": 51}
    quants = gguf_quants(names, sizes)
    by_name = {q.name: q for q in quants}
    # Q4_K_M twice (root and subfolder): told apart by their stems; the others keep the plain quant name
    assert set(by_name) == {"IQ3_M", "M-Q4_K_M", "sub/M-Q4_K_M", "Q6_K", "Q8_0"}
    assert by_name["Q6_K"].split and by_name["Q6_K"].size == 70 and by_name["Q6_K"].supported
    assert not by_name["IQ3_M"].supported
    assert [q.size for q in quants] == sorted(q.size for q in quants)  # smallest first
    assert gguf_quants(["M-Q8_0.gguf"])[0].size is None  # sizes unknown until the Hub lists them


def test_base_models_from_card_or_tags():
    tags = ["gguf", "base_model:HuggingFaceTB/SmolLM2-135M-Instruct",
            "base_model:quantized:HuggingFaceTB/SmolLM2-135M-Instruct", "license:apache-2.0"]
    assert base_models(tags) == ["HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert base_models(tags, {"base_model": "org/base"}) == ["org/base"]
    assert base_models([], {"base_model": ["a/b", "c/d"]}) == ["a/b", "c/d"]


def test_pick_quant_by_name_or_file():
    quants = gguf_quants(["M-Q4_K_M.gguf", "sub/M-Q4_K_M.gguf", "M-Q8_0.gguf", "M-f16.gguf"])
    assert pick_quant("r", quants, "q8_0").files == ["M-Q8_0.gguf"]
    assert pick_quant("r", quants, "FP16").files == ["M-f16.gguf"]
    assert pick_quant("r", quants, "sub/M-Q4_K_M.gguf").files == ["sub/M-Q4_K_M.gguf"]
    assert pick_quant("r", quants, "M-Q4_K_M").files == ["M-Q4_K_M.gguf"]
    with pytest.raises(QuantChoiceError, match="several Q4_K_M files .*M-Q4_K_M, sub/M-Q4_K_M"):
        pick_quant("r", quants, "Q4_K_M")
    with pytest.raises(QuantChoiceError, match="r has no Q2_K file; it has: .*Q8_0"):
        pick_quant("r", quants, "Q2_K")
