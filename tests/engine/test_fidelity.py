"""Greedy outputs equal transformers' generate token for token (fp32), for every architecture, with
many concurrent requests, chunked prefill, prefix-cache hits and preemption under a small KV budget."""
from __future__ import annotations

import pytest
from engine_helpers import LENGTHS, hf_greedy, kv_gb_for_blocks, random_prompt
from tiny_models import ARCHS

from llmchat.engine import LLM, SamplingParams

MAX_NEW = 12
GREEDY = SamplingParams(max_tokens=MAX_NEW, temperature=0.0)
SYSTEM = ("You are a helpful assistant. The quick brown fox jumps over the lazy dog. "
          "Language models run locally on ARM laptops and servers.")


def assert_matches_hf(folder, outputs, ignore_eos=False):
    for out in outputs:
        expected = hf_greedy(folder, out.prompt_token_ids, MAX_NEW, ignore_eos)
        assert out.token_ids == expected, out.request_id
        assert out.finish_reason in ("stop", "length")


@pytest.fixture(scope="module", params=ARCHS)
def arch_model(request, tiny_model_dir):
    return tiny_model_dir(request.param)


# One prompt set for the tests that need no cache sharing, so transformers runs once per prompt.
PROMPTS = [random_prompt(n, seed=i) for i, n in enumerate(LENGTHS)]


def test_concurrent_requests_of_different_lengths(arch_model):
    llm = LLM(arch_model, attention_backend="torch")
    prompts = PROMPTS
    outputs = llm.generate(prompts, GREEDY)
    assert_matches_hf(arch_model, outputs)
    assert [o.prompt_token_ids for o in outputs] == prompts


def test_chunked_prefill_mixed_with_decodes(arch_model):
    llm = LLM(arch_model, attention_backend="torch", max_num_batched_tokens=12)
    outputs = llm.generate(PROMPTS, GREEDY)
    assert_matches_hf(arch_model, outputs)


def test_prefix_cache_hits_shared_system_prompt_and_second_turn(arch_model):
    llm = LLM(arch_model, attention_backend="torch")
    chats = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
             for q in ("Hello world!", "How are you today?", "Once upon a time", "def add(a, b):")]
    first = llm.generate(chats[:1], GREEDY)
    rest = llm.generate(chats[1:], GREEDY)
    assert_matches_hf(arch_model, first + rest)
    assert all(o.metrics.num_cached_tokens >= 16 for o in rest)     # the system prompt was reused
    # Second turn of the first chat: its whole first turn (prompt + reply) is a cached prefix.
    turn1 = first[0]
    turn2_ids = turn1.prompt_token_ids + turn1.token_ids + random_prompt(7, seed=99)
    second = llm.generate([turn2_ids], GREEDY)
    assert_matches_hf(arch_model, second)
    full_blocks = (len(turn1.prompt_token_ids) + len(turn1.token_ids) - 1) // 16 * 16
    assert second[0].metrics.num_cached_tokens == full_blocks
    assert llm.metrics().prefix_cache_hit_rate > 0


def test_small_kv_budget_forces_preemption(arch_model):
    # 8 blocks = 128 tokens for requests of up to 112 tokens each: they must take turns. Without guessing:
    # guesses hold blocks, so fewer requests are admitted and none may need to give way (speculation under
    # preemption: tests/determinism/test_speculation.py).
    llm = LLM(arch_model, attention_backend="torch", kv_cache_gb=kv_gb_for_blocks(arch_model, 8),
              speculative="off")
    assert llm.metrics().kv_blocks_total == 8
    # EOS ignored so every request grows by MAX_NEW tokens whatever the random weights say.
    outputs = llm.generate(PROMPTS, SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True))
    assert_matches_hf(arch_model, outputs, ignore_eos=True)
    assert all(len(o.token_ids) == MAX_NEW for o in outputs)
    assert llm.metrics().num_preemptions > 0
    assert sum(o.metrics.num_preemptions for o in outputs) == llm.metrics().num_preemptions
    assert llm.metrics().kv_blocks_used == 0


def test_caching_on_and_off_give_identical_outputs(arch_model):
    shared = random_prompt(48, seed=5)
    prompts = [shared + random_prompt(n, seed=30 + i) for i, n in enumerate([2, 20, 7, 33])]
    results = []
    for caching in (True, False):
        llm = LLM(arch_model, attention_backend="torch", enable_prefix_caching=caching,
                  max_num_batched_tokens=24)
        llm.generate(prompts[:1], GREEDY)            # warm the cache (when on)
        results.append([o.token_ids for o in llm.generate(prompts, GREEDY)])
        hits = llm.metrics().prefix_cache_hit_rate
        assert (hits > 0) == caching
    assert results[0] == results[1]


def test_default_attention_backend_matches_torch_oracle(arch_model):
    prompts = PROMPTS[:4]
    default = LLM(arch_model, max_num_batched_tokens=16).generate(prompts, GREEDY)
    oracle = LLM(arch_model, attention_backend="torch", max_num_batched_tokens=16).generate(prompts, GREEDY)
    assert [o.token_ids for o in default] == [o.token_ids for o in oracle]
