"""The OpenAI API as the real `openai` client and raw httpx SSE see it: streaming and not, usage with
cached tokens, llama-server timings, logprobs, models, health and Prometheus metrics."""
from __future__ import annotations

import json

import httpx
import openai
import pytest
from server_helpers import ThreadServer, serve_settings

from llmchat.engine.serve import ModelSpec

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello world! How are you today?"}]


@pytest.fixture(scope="module")
def server(served_model):
    model, a_dir, _ = served_model
    with ThreadServer([ModelSpec("tiny", model, [("tiny-a", str(a_dir))])], serve_settings()) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def test_chat_completion_not_streamed(client):
    reply = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=12, temperature=0)
    choice = reply.choices[0]
    assert reply.object == "chat.completion" and reply.model == "tiny"
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens > 0 and reply.usage.prompt_tokens > 10
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    timings = reply.model_extra["timings"]
    assert timings["predicted_n"] == reply.usage.completion_tokens
    assert timings["prompt_n"] + timings["cache_n"] == reply.usage.prompt_tokens


def test_streamed_chat_equals_the_whole_reply(client):
    whole = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=12, temperature=0)
    stream = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_raw_sse_lines_end_with_done(server):
    body = {"model": "tiny", "messages": CHAT, "max_tokens": 5, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    last = json.loads(events[-2][6:])
    assert last["choices"][0]["finish_reason"] in ("stop", "length") and "timings" in last


def test_repeated_prefix_reports_cached_tokens(client):
    system = {"role": "system", "content": "You are a helpful assistant. " * 6}
    first = client.chat.completions.create(model="tiny", messages=[system, {"role": "user", "content": "Hi"}],
                                           max_tokens=2, temperature=0)
    second = client.chat.completions.create(model="tiny", messages=[system, {"role": "user", "content": "Yo"}],
                                            max_tokens=2, temperature=0)
    assert first.usage.prompt_tokens > 32
    assert second.usage.prompt_tokens_details.cached_tokens >= 16
    assert second.model_extra["timings"]["cache_n"] == second.usage.prompt_tokens_details.cached_tokens


def test_logprobs_chat_and_stream(client):
    reply = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=6, temperature=0,
                                           logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)   # greedy takes the top token
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob >= entry.top_logprobs[2].logprob
    streamed = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=6, temperature=0,
                                              logprobs=True, top_logprobs=3, stream=True)
    pieces = [e for c in streamed if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.logprob for e in pieces] == pytest.approx([e.logprob for e in content])


def test_completions_text_and_token_ids(client, server):
    tokenizer = server.engine().tokenizer
    ids = tokenizer("The quick brown fox").input_ids
    by_text = client.completions.create(model="tiny", prompt="The quick brown fox", max_tokens=6, temperature=0)
    by_ids = client.completions.create(model="tiny", prompt=ids, max_tokens=6, temperature=0, logprobs=2)
    assert by_text.choices[0].text == by_ids.choices[0].text and by_text.object == "text_completion"
    assert len(by_ids.choices[0].logprobs.token_logprobs) == by_ids.usage.completion_tokens
    streamed = client.completions.create(model="tiny", prompt=ids, max_tokens=6, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == by_text.choices[0].text


def test_sampling_parameters_are_honoured(client):
    seeded = [client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=10, temperature=1.0,
                                             top_p=0.9, seed=7, presence_penalty=0.5, frequency_penalty=0.5,
                                             extra_body={"top_k": 40, "min_p": 0.01, "repetition_penalty": 1.1})
              .choices[0].message.content for _ in range(2)]
    assert seeded[0] == seeded[1]
    capped = client.chat.completions.create(model="tiny", messages=CHAT, max_completion_tokens=3, temperature=0,
                                            extra_body={"ignore_eos": True})
    assert capped.usage.completion_tokens == 3 and capped.choices[0].finish_reason == "length"
    full = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=8, temperature=0,
                                          extra_body={"ignore_eos": True}).choices[0].message.content
    cut = full[2:4]
    stopped = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=8, temperature=0, stop=[cut],
                                             extra_body={"ignore_eos": True})
    assert stopped.choices[0].message.content == full[:full.index(cut)]
    assert stopped.choices[0].finish_reason == "stop"


def test_models_health_and_metrics(client, server):
    models = {m.id: m for m in client.models.list().data}
    assert set(models) == {"tiny", "tiny-a"} and models["tiny-a"].model_extra["parent"] == "tiny"
    assert client.models.retrieve("tiny-a").id == "tiny-a"
    health = httpx.get(f"{server.base_url}/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    # one finished request of this test's own: the histograms have samples whatever ran before (shuffled order)
    client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=3, temperature=0)
    text = httpx.get(f"{server.base_url}/metrics").text
    for name in ("llmchat_generation_tokens_per_second", "llmchat_kv_cache_usage_ratio",
                 "llmchat_prefix_cache_hit_rate", "llmchat_num_requests_running", "llmchat_num_requests_waiting",
                 "llmchat_time_to_first_token_seconds_bucket", "llmchat_time_per_output_token_seconds_bucket",
                 "llmchat_num_requests_running_per_adapter", "llmchat_requests_total"):
        assert name in text, name
    schema = httpx.get(f"{server.base_url}/openapi.json").json()
    assert {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"} <= set(schema["paths"])


def test_continue_final_message_goes_on_with_the_reply(client):
    whole = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=10, temperature=0,
                                           extra_body={"ignore_eos": True}).choices[0].message.content
    head = whole[:4]
    rest = client.chat.completions.create(
        model="tiny", messages=[*CHAT, {"role": "assistant", "content": head}], max_tokens=10, temperature=0,
        extra_body={"ignore_eos": True, "continue_final_message": True, "add_generation_prompt": False})
    text = rest.choices[0].message.content
    assert (head + text).startswith(whole[:len(head) + 2]) and text


def test_a_chat_completion_without_max_tokens_runs_to_the_context(served_model):
    """No fixed cut by default: ignoring EOS, the reply ends with "length" exactly when the context is full."""
    settings = serve_settings(engine_kwargs={"max_model_len": 48})
    with ThreadServer([ModelSpec("tiny", served_model[0], [])], settings) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="none", max_retries=0)
        reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello"}],
                                               temperature=0, extra_body={"ignore_eos": True})
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.prompt_tokens + reply.usage.completion_tokens == 48
