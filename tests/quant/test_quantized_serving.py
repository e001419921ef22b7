"""Everything else works on a quantized base: a request's tokens are the same solo, batched with others,
with its prompt chunked or taken from the prefix cache (fp32); LoRA adapters in mixed batches on a GGUF
base match their solo runs; --quantize turns a 16/32-bit model into a quantized one close to the original."""
from __future__ import annotations

import pytest
import torch

from llmchat.engine import LLM, SamplingParams
from llmchat.engine.layers.linear import Linear
from llmchat.engine.quant.quality import compare, sequence_logits
from lora_helpers import edit_config, make_adapter

PROMPTS = [[5, 17, 42, 99, 120, 7, 8, 9] * 5, [33, 34, 35, 200, 201, 12] * 6, [250, 3, 77, 140, 141] * 9]
GREEDY = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)


def tokens(llm, prompts, adapters=None):
    outs = llm.generate(prompts, GREEDY, adapter=adapters) if adapters else llm.generate(prompts, GREEDY)
    return [o.token_ids for o in outs]


def test_same_tokens_whatever_the_batch_chunking_or_cache(store, tiny_gguf):
    path = str(store.import_path(tiny_gguf("llama", "mixed")).path)
    solo = [tokens(LLM(path, dtype="float32", kv_cache_gb=0.02, enable_prefix_caching=False), [p])[0]
            for p in PROMPTS]
    batched = LLM(path, dtype="float32", kv_cache_gb=0.02)
    assert tokens(batched, PROMPTS) == solo
    assert tokens(batched, PROMPTS) == solo                      # now every prompt comes from the prefix cache
    assert batched.metrics().prefix_cache_hit_rate > 0
    chunked = LLM(path, dtype="float32", kv_cache_gb=0.02, max_num_batched_tokens=16, step_target_s=0)
    assert tokens(chunked, PROMPTS) == solo


def test_lora_adapters_batched_on_a_gguf_base(store, tiny_gguf, tiny_source, tmp_path):
    model = store.import_path(tiny_gguf("qwen2", "q8_0"))
    path = str(model.path)
    adapters = {name: make_adapter(tiny_source("qwen2"), tmp_path / name, seed=seed)
                for name, seed in (("a", 1), ("b", 2))}
    for folder in adapters.values():   # trained on the original (a Hub repo), served on its GGUF quant
        edit_config(folder, base_model_name_or_path="some-org/tiny-qwen2")
    assert model.name == "tiny-qwen2-q8_0"
    llm = LLM(path, dtype="float32", kv_cache_gb=0.02)
    for name, folder in adapters.items():
        llm.load_adapter(name, folder)
    plan = ["a", None, "b", "a", "b", None]
    prompts = [PROMPTS[i % 3] for i in range(len(plan))]
    mixed = tokens(llm, prompts, adapters=plan)
    solo = [tokens(llm, [p], adapters=[a])[0] if a else tokens(llm, [p])[0] for p, a in zip(prompts, plan)]
    assert mixed == solo
    assert mixed[0] != mixed[1] and mixed[2] != mixed[5]         # the adapters change the replies


# tiny random models have flat next-token distributions: 4-bit agreement on top-1 is low there
@pytest.mark.parametrize("choice,kl,top1", [("q8_0", 0.002, 0.9), ("q4_0", 0.08, 0.4), ("q4_k", 0.08, 0.4)])
def test_quantize_at_load(tiny_source, choice, kl, top1):
    folder = tiny_source("llama")
    llm = LLM(str(folder), dtype="float32", kv_cache_gb=0.02, quantize=choice)
    model = llm.engine.runner.model
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    assert all(m.is_quantized for m in linears)
    sources = {w.source for m in linears for w in m.quantized.values()}
    want = {"q8_0": {"Q8_0"}, "q4_0": {"Q4_0", "Q8_0"}, "q4_k": {"Q4_K", "Q8_0"}}[choice]
    assert sources == want                                        # projections in the type, the head in Q8_0
    ref = LLM(str(folder), dtype="float32", kv_cache_gb=0.02)
    ids = PROMPTS[0] + PROMPTS[1]
    q = compare(sequence_logits(ref, ids), sequence_logits(llm, ids))
    assert q["kl_divergence"] < kl and q["top1_agreement"] >= top1, q


def test_quantize_choice_is_checked():
    with pytest.raises(ValueError, match="quantize must be q8_0, q4_0 or q4_k"):
        LLM("/nonexistent", quantize="q3_k")
