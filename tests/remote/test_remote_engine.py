"""RemoteEngine against a real `llmchat serve`: the same interface and the same greedy text as the local
engine; usage and cached tokens from the server; abort; and every failure a RemoteError that says why."""
from __future__ import annotations

import asyncio

import pytest

from llmchat.engine import LLM, SamplingParams
from llmchat.engine.chat import Continuation
from llmchat.engine.remote import (RemoteEngine, RemoteError, check_health, list_models, make_endpoint)

CHAT = [{"role": "system", "content": "You are a terse assistant who answers in one line."},
        {"role": "user", "content": "Name three colours of the rainbow."}]


async def collect(engine, prompt, params, request_id=None):
    deltas = [d async for d in engine.generate(prompt, params, request_id=request_id)]
    return "".join(d.text for d in deltas), deltas[-1]


@pytest.fixture(scope="module")
def local_text(remote_model):
    """What the local engine answers to CHAT and to a raw prompt, greedy (the oracle)."""
    llm = LLM(remote_model, attention_backend="torch", kv_cache_gb=0.05)
    params = SamplingParams(max_tokens=24, temperature=0.0)
    chat, raw, cont = llm.generate([CHAT, "Once upon a time", Continuation(CHAT, "Red, orange and")], params)
    return {"chat": chat.text, "raw": raw.text, "tokens": len(chat.token_ids), "continued": cont.text,
            "chat_prompt": len(chat.prompt_token_ids), "continued_prompt": len(cont.prompt_token_ids)}


async def test_streams_the_same_text_as_the_local_engine(endpoint, local_text):
    engine = RemoteEngine(endpoint, "tiny")
    text, last = await collect(engine, CHAT, SamplingParams(max_tokens=24, temperature=0.0))
    assert text == local_text["chat"]
    assert last.finished and last.finish_reason in ("stop", "length")
    m = last.metrics
    assert m.num_prompt_tokens > 0 and m.num_generated_tokens == local_text["tokens"]
    assert m.ttft is not None and m.ttft > 0 and m.finish_time >= m.first_token_time
    assert m.server_timings and m.server_timings["predicted_n"] == local_text["tokens"]
    raw, _ = await collect(engine, "Once upon a time", SamplingParams(max_tokens=24, temperature=0.0))
    assert raw == local_text["raw"]          # text prompts go to /v1/completions
    await engine.shutdown()


async def test_repeated_prefix_reports_cached_tokens(endpoint):
    engine = RemoteEngine(endpoint, "tiny")
    long_system = {"role": "system", "content": "Always answer politely and briefly. " * 12}
    params = SamplingParams(max_tokens=4, temperature=0.0)
    await collect(engine, [long_system, {"role": "user", "content": "First question?"}], params)
    _, last = await collect(engine, [long_system, {"role": "user", "content": "Second question?"}], params)
    assert last.metrics.num_cached_tokens > 0
    assert last.metrics.num_cached_tokens < last.metrics.num_prompt_tokens
    await engine.shutdown()


async def test_continuation_goes_on_with_the_partial_reply(endpoint, local_text):
    """Sent as continue_final_message: the server templates the chat and appends the partial reply, as the
    local engine does for the same Continuation (and unlike a new reply)."""
    engine = RemoteEngine(endpoint, "tiny")
    rest, last = await collect(engine, Continuation(CHAT, "Red, orange and"),
                               SamplingParams(max_tokens=24, temperature=0.0))
    assert rest == local_text["continued"]
    assert last.metrics.num_prompt_tokens == local_text["continued_prompt"] > local_text["chat_prompt"]
    await engine.shutdown()


async def test_metrics_count_running_streams_and_abort_ends_with_abort(endpoint, server):
    engine = RemoteEngine(endpoint, "tiny")
    params = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    stream = engine.generate(CHAT, params, request_id="r1")
    first = await anext(stream)
    assert first.text and engine.metrics().num_running == 1
    engine.abort("r1")
    rest = [d async for d in stream]
    assert rest[-1].finished and rest[-1].finish_reason == "abort"
    assert engine.metrics().num_running == 0
    assert engine.metrics().total_generation_tokens >= 1
    local = server.engine()
    deadline = asyncio.get_running_loop().time() + 30
    while local.metrics().num_running and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)     # the server aborts the request once the connection is gone
    assert local.metrics().num_running == 0
    await engine.shutdown()


async def test_catalog_lists_models_and_health(endpoint, closed_port_url):
    assert await list_models(endpoint) == ["tiny"]
    up = await check_health(endpoint)
    assert up.ok and up.latency_ms is not None and up.label().startswith("up")
    down = await check_health(make_endpoint("gone", closed_port_url))
    assert not down.ok and "cannot reach gone" in down.message and down.label() == "down"


async def test_unreachable_endpoint_is_a_clear_error(closed_port_url):
    engine = RemoteEngine(make_endpoint("gone", closed_port_url), "tiny")
    with pytest.raises(RemoteError, match=r"cannot reach gone \(http://127\.0\.0\.1:\d+/v1\): connection failed"):
        await collect(engine, CHAT, SamplingParams(max_tokens=4))
    assert engine.metrics().num_running == 0


async def test_server_errors_carry_the_servers_message(endpoint):
    with pytest.raises(RemoteError, match=r"answered 4\d\d for nope: .*nope"):
        await collect(RemoteEngine(endpoint, "nope"), CHAT, SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="adapters are models of their own"):
        await anext(RemoteEngine(endpoint, "tiny").generate(CHAT, SamplingParams(), adapter="a"))
    with pytest.raises(ValueError, match="token ids"):
        await collect(RemoteEngine(endpoint, "tiny"), [1, 2, 3], SamplingParams())


async def test_a_constrained_request_is_constrained_on_the_server(endpoint, remote_model):
    """JSON schemas travel as response_format, the other kinds as structured_outputs: the server's replies
    equal the local engine's constrained ones, for chat and text prompts."""
    from llmchat.engine.structured_outputs import StructuredOutputs
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
              "maximum": 50}}, "required": ["ok", "n"], "additionalProperties": False}
    constraints = [StructuredOutputs(json=schema), StructuredOutputs(json_object=True),
                   StructuredOutputs(regex=r"[a-z]{3}-[0-9]{2}"), StructuredOutputs(choice=["left", "right"]),
                   StructuredOutputs(grammar='root ::= "go " ("north" | "south")')]
    llm = LLM(remote_model, attention_backend="torch", kv_cache_gb=0.05)
    engine = RemoteEngine(endpoint, "tiny")
    for constraint in constraints:
        params = SamplingParams(max_tokens=60, temperature=0.0, structured_outputs=constraint)
        for prompt in (CHAT, "Once upon a time"):
            want = llm.generate([prompt], params)[0]
            text, last = await collect(engine, prompt, params)
            assert (text, last.finish_reason) == (want.text, want.finish_reason), (constraint, prompt)
    await engine.shutdown()
