"""GGUF import: a tiny llama GGUF written here with the gguf package, and the real SmolLM2 Q4_1 GGUF.
Dequantized (`--dequantize`), the written folder must generate exactly what transformers generates from the
GGUF itself; registered in place (the default), the file runs quantized and answers sensibly."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gguf_writer import write_llama_gguf
from llmchat.engine.store import ModelStore, UnsupportedModelError
from tiny_models import make_model, make_tokenizer


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return ModelStore(tmp_path / "data")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-gguf")
    src = make_model(folder / "src", "llama", vocab_size=len(make_tokenizer()))
    return src, write_llama_gguf(src, folder / "tiny-llama.gguf")


def greedy(model, tok, messages, n=12):
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=n, do_sample=False, pad_token_id=tok.pad_token_id)
    return out[0, ids["input_ids"].shape[1]:].tolist()


def test_tiny_gguf_import_matches_transformers(store, tiny_gguf):
    src, gguf = tiny_gguf
    seen = []
    model = store.import_path(gguf, progress=seen.append, dequantize=True)
    assert model.source == "gguf" and model.supported and model.architecture == "LlamaForCausalLM"
    assert store.data_dir in model.path.parents and model.dtype == "float32"
    config = json.loads((model.path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert seen[-1].finished and seen[-1].done_bytes == seen[-1].total_bytes
    assert seen[-1].num_files == 2 + 9 * 2 + 1  # every tensor of the file was converted
    # weights: exactly what transformers dequantizes from the GGUF
    ref = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    mine = AutoModelForCausalLM.from_pretrained(str(model.path), dtype=torch.float32)
    ref_state, my_state = ref.state_dict(), mine.state_dict()
    assert ref_state.keys() == my_state.keys()
    for key in ref_state:
        assert torch.equal(ref_state[key], my_state[key]), key
    # and close to the original weights (q/k un-permuted correctly, Q8_0 error only)
    orig = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    q = "model.layers.1.self_attn.k_proj.weight"
    assert torch.allclose(my_state[q], orig.state_dict()[q], atol=2e-3)
    tok_ref = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok = AutoTokenizer.from_pretrained(str(model.path))
    messages = [{"role": "user", "content": "Hello world! How are you today?"}]
    assert tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False).endswith(
        "<|im_start|>assistant\n")
    assert greedy(mine, tok, messages) == greedy(ref, tok_ref, messages)
    # importing the same file again reuses the conversion; remove frees the folder
    assert store.import_path(gguf, dequantize=True).name == model.name and len(store.list()) == 1
    assert store.remove(model.name) == model.size_bytes and not model.path.exists()


def test_tiny_gguf_runs_in_the_engine(store, tiny_gguf):
    from llmchat.engine import LLM, SamplingParams
    _src, gguf = tiny_gguf
    model = store.import_path(gguf, dequantize=True)
    ref = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok_ref = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    messages = [{"role": "user", "content": "Once upon a time"}]
    llm = LLM(str(store.resolve(model.name)), dtype="float32", kv_cache_gb=0.01)
    out = llm.generate([messages], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))[0]
    assert out.token_ids == greedy(ref, tok_ref, messages, n=8)


def test_unsupported_gguf_architecture_refused(store, tmp_path):
    from gguf import GGUFWriter
    path = tmp_path / "gemma.gguf"
    w = GGUFWriter(str(path), "gemma2")
    w.add_name("gemma-like")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UnsupportedModelError, match="gemma2"):
        store.import_path(path)
    assert store.list() == []
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(Exception, match="junk.gguf is not a GGUF file"):
        store.import_path(junk)


def test_registered_in_place_without_a_copy(store, tiny_gguf):
    _src, gguf = tiny_gguf
    model = store.import_path(gguf)
    assert model.source == "gguf" and model.quant == "Q8_0" and model.supported
    assert not list(model.path.glob("*.safetensors"))              # only metadata files were written
    assert json.loads((model.path / "gguf.json").read_text())["file"] == str(gguf.resolve())
    assert model.size_bytes >= gguf.stat().st_size                  # its weights are the file
    assert store.remove(model.name) > 0 and gguf.exists()           # removing never deletes the user's file


def test_real_smollm2_gguf_becomes_a_chat_model(store):
    from real_model import smollm2_gguf
    from llmchat.engine import LLM, SamplingParams
    gguf = smollm2_gguf()
    model = store.import_path(gguf, dequantize=True)
    assert model.supported and model.architecture == "LlamaForCausalLM"
    assert model.context_length == 8192 and 130e6 < model.num_params < 140e6
    tok = AutoTokenizer.from_pretrained(str(model.path))
    assert "<|im_start|>" in tok.chat_template
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ref = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok_ref = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    expected = greedy(ref, tok_ref, messages, n=10)
    mine = AutoModelForCausalLM.from_pretrained(str(model.path), dtype=torch.float32)
    assert greedy(mine, tok, messages, n=10) == expected
    llm = LLM(str(model.path), dtype="float32", kv_cache_gb=0.05)
    out = llm.generate([messages], SamplingParams(max_tokens=10, temperature=0))[0]
    assert out.token_ids == expected  # both stop at the same end-of-turn token
