"""Offline API requests: validation errors, stop conditions, defaults, metrics."""
from __future__ import annotations

import pytest
from engine_helpers import hf_greedy, random_prompt
from tiny_models import make_model

from llmchat.engine import LLM, SamplingParams


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(tiny_model_dir("llama"), attention_backend="torch")


BAD = [
    ("", None, "empty"),
    ("   ", None, "empty"),
    ([{"role": "wizard", "content": "hi"}], None, "unknown role"),
    ([{"role": "user", "content": ""}], None, "empty content"),
    ([{"role": "user"}], None, "'role' and 'content'"),
    ("hi", SamplingParams(max_tokens=0), "max_tokens"),
    ("hi", SamplingParams(max_tokens=-3), "max_tokens"),
    ("hi", SamplingParams(temperature=-0.5), "temperature"),
    ("hi", SamplingParams(top_p=0.0), "top_p"),
    ("hi", SamplingParams(top_p=1.5), "top_p"),
    ([5, 99999], None, "vocabulary"),
    ([5] * 600, None, "context"),
    ([3.5], None, "must be a dict"),
]


@pytest.mark.parametrize("prompt,params,message", BAD)
def test_bad_input_raises_clear_value_error(llm, prompt, params, message):
    with pytest.raises(ValueError, match=message):
        llm.generate([prompt], params)


def test_engine_keeps_serving_after_bad_input(llm, tiny_model_dir):
    prompt = random_prompt(20, seed=8)
    with pytest.raises(ValueError):
        llm.generate([prompt, ""], SamplingParams(max_tokens=5, temperature=0.0))   # nothing starts
    out = llm.generate([prompt], SamplingParams(max_tokens=5, temperature=0.0))[0]
    assert out.token_ids == hf_greedy(tiny_model_dir("llama"), prompt, 5)
    assert llm.metrics().num_running == 0 and llm.metrics().num_waiting == 0


def test_prompt_larger_than_kv_budget_is_rejected(tiny_model_dir):
    from engine_helpers import kv_gb_for_blocks
    small = LLM(tiny_model_dir("llama"), attention_backend="torch",
                kv_cache_gb=kv_gb_for_blocks(tiny_model_dir("llama"), 4))
    with pytest.raises(ValueError, match="KV cache holds only 64 tokens"):
        small.generate([random_prompt(64, seed=1)])
    assert small.generate([random_prompt(10, seed=1)], SamplingParams(max_tokens=3))[0].finish_reason


def test_max_tokens_and_eos_stop(llm):
    eos = llm.engine.eos_token_ids
    outs = llm.generate([random_prompt(n, seed=50 + n) for n in (4, 9, 30)],
                        SamplingParams(max_tokens=40, temperature=0.0))
    for o in outs:
        if o.finish_reason == "stop":
            assert o.token_ids[-1] in eos and not set(o.token_ids[:-1]) & eos
        else:
            assert o.finish_reason == "length" and len(o.token_ids) == 40


def test_stop_token_ids_and_ignore_eos(llm):
    prompt = random_prompt(12, seed=9)
    free = llm.generate([prompt], SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))[0]
    target = free.token_ids[5]
    stopped = llm.generate([prompt], SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True,
                                                    stop_token_ids=[target]))[0]
    first = free.token_ids.index(target)
    assert stopped.token_ids == free.token_ids[:first + 1] and stopped.finish_reason == "stop"


def test_stop_string_cuts_text(llm):
    prompt = random_prompt(12, seed=11)
    free = llm.generate([prompt], SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True))[0]
    visible = free.text.replace("\ufffd", "")
    assert len(visible) >= 4
    stop = visible[2:4]
    cut = llm.generate([prompt], SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True,
                                                stop=[stop]))[0]
    assert cut.finish_reason == "stop" and stop not in cut.text
    assert free.text.startswith(cut.text) and len(cut.text) < len(free.text)


def test_seeded_sampling_is_reproducible_in_different_batches(llm):
    params = SamplingParams(max_tokens=10, temperature=1.0, seed=7, ignore_eos=True)
    prompt = random_prompt(15, seed=12)
    alone = llm.generate([prompt], params)[0].token_ids
    others = [random_prompt(n, seed=n) for n in (5, 33, 8)]
    mixed = llm.generate(others[:2] + [prompt] + others[2:],
                         [SamplingParams(max_tokens=10, temperature=1.0)] * 2 + [params]
                         + [SamplingParams(max_tokens=10, temperature=0.9, seed=3)])[2].token_ids
    assert alone == mixed


def test_generation_config_sampling_applies_but_its_length_does_not(tmp_path):
    """Only a limit the user sets cuts a reply: the file's max_new_tokens / max_length (HF's default 20) do not."""
    folder = make_model(tmp_path / "m", "qwen2", generation_config={"do_sample": True, "temperature": 0.7,
                                                                     "top_k": 5, "max_new_tokens": 6,
                                                                     "max_length": 20})
    llm = LLM(folder, attention_backend="torch", max_model_len=48)
    assert llm.engine.generation_defaults["temperature"] == 0.7
    out = llm.generate(["Hello world"], SamplingParams(ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(out.prompt_token_ids) + len(out.token_ids) == 48


def test_without_max_tokens_a_reply_runs_until_the_model_stops(llm):
    prompt = random_prompt(12, seed=21)
    free = llm.generate([prompt], SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True))[0].token_ids
    stop_at = free[20]                     # the model "stops" where it first says this token: an end-of-text id
    out = llm.generate([prompt], SamplingParams(temperature=0.0, stop_token_ids=[stop_at]))[0]
    first = free.index(stop_at)
    assert out.finish_reason == "stop" and out.token_ids == free[:first + 1]


def test_without_max_tokens_a_reply_stops_at_the_context(llm):
    prompt = random_prompt(12, seed=22)
    out = llm.generate([prompt], SamplingParams(temperature=0.0, ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(prompt) + len(out.token_ids) == llm.engine.max_model_len


def test_replies_without_max_tokens_that_outgrow_the_kv_cache_end_and_never_hang(tiny_model_dir):
    """A cache of 4 blocks (64 tokens), far below the 512-token context: two unbounded replies take turns
    (the newer is preempted) and each ends with "length" when it cannot grow any more."""
    from engine_helpers import kv_gb_for_blocks
    small = LLM(tiny_model_dir("llama"), attention_backend="torch",
                kv_cache_gb=kv_gb_for_blocks(tiny_model_dir("llama"), 4))
    assert small.engine.max_model_len > 64
    outs = small.generate([random_prompt(10, seed=23), random_prompt(20, seed=24)],
                          SamplingParams(temperature=0.0, ignore_eos=True))
    for prompt_len, out in zip((10, 20), outs):
        assert out.finish_reason == "length" and 60 <= prompt_len + len(out.token_ids) <= 65
    assert small.metrics().num_running == 0 and small.metrics().num_waiting == 0
    assert small.metrics().num_preemptions >= 1


def test_request_metrics_and_snapshot(llm):
    system = [{"role": "system", "content": "The quick brown fox jumps over the lazy dog. " * 3}]
    llm.generate([system + [{"role": "user", "content": "Hello"}]], SamplingParams(max_tokens=4))
    out = llm.generate([system + [{"role": "user", "content": "How are you?"}]],
                       SamplingParams(max_tokens=4, ignore_eos=True))[0]
    m = out.metrics
    assert m.num_prompt_tokens == len(out.prompt_token_ids) and m.num_cached_tokens >= 16
    assert m.num_generated_tokens == 4 and m.ttft > 0 and m.decode_tokens_per_s > 0
    snap = llm.metrics()
    assert snap.prefix_cache_hit_rate > 0 and snap.kv_blocks_total > 0 and snap.kv_cache_gb > 0
    assert snap.total_generation_tokens >= 4 and snap.generation_tokens_per_s > 0
    assert 0 <= snap.kv_cache_usage <= 1
