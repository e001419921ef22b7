"""Prefix-cache blocks are keyed by adapter identity (name + content hash): they never cross adapters or the
base model, and a reloaded, changed adapter never hits blocks computed with its old weights."""
from __future__ import annotations

import shutil

import pytest
from lora_helpers import hf_greedy, make_adapter

from llmchat.engine import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=6, temperature=0.0)
PROMPT = [(7 * i + 3) % 300 + 3 for i in range(40)]    # 40 tokens: 2 full blocks of 16 can be reused
FULL_BLOCKS = 32


@pytest.fixture(scope="module")
def llama(tiny_model_dir, tmp_path_factory):
    model = tiny_model_dir("llama")
    tmp = tmp_path_factory.mktemp("lora-cache")
    return model, {name: make_adapter(model, tmp / name, seed=seed) for name, seed in (("a", 11), ("b", 12), ("c", 13))}


def cached(llm, adapter):
    out = llm.generate([PROMPT], GREEDY, adapter=adapter)[0]
    return out.metrics.num_cached_tokens, out.token_ids


def test_cache_hits_never_cross_adapters_or_the_base(llama):
    model, adapters = llama
    llm = LLM(model, attention_backend="torch")
    llm.load_adapter("a", adapters["a"])
    llm.load_adapter("b", adapters["b"])
    assert cached(llm, None)[0] == 0
    hits_a, out_a = cached(llm, "a")
    assert hits_a == 0                                  # the base model's blocks are not a's
    assert cached(llm, "a") == (FULL_BLOCKS, out_a)     # a hits its own blocks, same output
    assert cached(llm, "b")[0] == 0                     # nor are a's blocks b's
    assert cached(llm, "b")[0] == FULL_BLOCKS
    assert cached(llm, None)[0] == FULL_BLOCKS          # the base still hits its own


def test_reloaded_changed_adapter_gives_new_outputs_and_no_stale_hits(llama, tmp_path):
    model, adapters = llama
    folder = tmp_path / "mine"
    shutil.copytree(adapters["a"], folder)
    llm = LLM(model, attention_backend="torch")
    llm.load_adapter("mine", folder)
    assert cached(llm, "mine")[0] == 0
    old_hits, old_out = cached(llm, "mine")
    assert old_hits == FULL_BLOCKS

    shutil.rmtree(folder)                          # the user retrains: same name, same folder, new weights
    shutil.copytree(adapters["c"], folder)
    llm.load_adapter("mine", folder)
    hits, new_out = cached(llm, "mine")
    assert hits == 0                               # blocks of the old weights are not served
    assert new_out == hf_greedy(model, adapters["c"], PROMPT, 6) != old_out
    assert llm.metrics().adapters_resident == ["mine"]


def test_reloading_identical_weights_keeps_the_cache(llama):
    model, adapters = llama
    llm = LLM(model, attention_backend="torch")
    llm.load_adapter("a", adapters["a"])
    cached(llm, "a")
    llm.load_adapter("a", adapters["a"])           # same content hash: same identity
    assert cached(llm, "a")[0] == FULL_BLOCKS
