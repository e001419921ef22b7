"""The real SmolLM2-135M-Instruct in bf16 (the case the issue measured: replies changed with the prefix cache
and with 64-token chunks): chat prompts sharing a system prompt give the same tokens and logits alone and cold,
batched after their prefix was cached, and prefilled in 64-token chunks on one thread."""
from __future__ import annotations

import pytest
from real_model import smollm2_folder

from det_helpers import first_difference, make_llm, run

from llmchat.engine import SamplingParams

SYSTEM = "You are a helpful, concise assistant. Answer in plain English, in a few sentences, and stay on topic. " * 2
QUESTIONS = ["What is the capital of France?", "Explain photosynthesis.", "Write a haiku about rain.",
             "Why is the sky blue?"]


@pytest.fixture(scope="module")
def folder():
    return smollm2_folder()


def test_smollm2_bf16_replies_do_not_depend_on_cache_batch_chunks_or_threads(folder):
    prompts = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}] for q in QUESTIONS]
    params = [SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)] * 3
    params.append(SamplingParams(max_tokens=16, temperature=0.8, seed=5, ignore_eos=True))
    llm, rec = make_llm(folder, "bfloat16", enable_prefix_caching=False, kv_cache_gb=0.2)
    want = [run(llm, rec, [p], [sp])[0] for p, sp in zip(prompts, params)]

    llm, rec = make_llm(folder, "bfloat16", kv_cache_gb=0.2)
    run(llm, rec, [prompts[0]], [params[0]])                   # the system prompt is now cached
    problem = first_difference(run(llm, rec, prompts, params), want)
    assert problem is None, f"batched on a cached prefix: {problem}"
    assert llm.metrics().prefix_cache_hit_rate > 0

    llm, rec = make_llm(folder, "bfloat16", threads=1, enable_prefix_caching=False, max_num_batched_tokens=64,
                        kv_cache_gb=0.2)
    problem = first_difference(run(llm, rec, prompts, params), want)
    assert problem is None, f"64-token chunks, 1 thread: {problem}"
