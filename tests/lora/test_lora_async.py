"""Hot load / unload on the async engine while other requests stream: no restart, streams unaffected."""
from __future__ import annotations

import asyncio

import pytest
from lora_helpers import PROMPTS, hf_greedy, make_adapter

from llmchat.engine import AsyncEngine, SamplingParams

LONG = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
SHORT = SamplingParams(max_tokens=6, temperature=0.0)


@pytest.fixture(scope="module")
def adapters(tiny_model_dir, tmp_path_factory):
    model = tiny_model_dir("mistral")
    tmp = tmp_path_factory.mktemp("lora-async")
    return model, make_adapter(model, tmp / "a", seed=31), make_adapter(model, tmp / "b", seed=32)


async def collect(stream, started: asyncio.Event | None = None, after: int = 2) -> list[int]:
    tokens: list[int] = []
    async for delta in stream:
        tokens += delta.token_ids
        if started is not None and len(tokens) >= after:
            started.set()
        if delta.finished:
            assert delta.finish_reason in ("stop", "length")
    return tokens


async def test_hot_load_while_another_request_streams(adapters):
    model, a_dir, _ = adapters
    engine = AsyncEngine(model, attention_backend="torch")
    try:
        started = asyncio.Event()
        streaming = asyncio.create_task(collect(engine.generate(PROMPTS[2], LONG), started))
        await started.wait()                          # the base request is mid-stream
        await engine.load_adapter("a", a_dir)
        assert engine.metrics().adapters_resident == ["a"]
        with_adapter = await collect(engine.generate(PROMPTS[0], SHORT, adapter="a"))
        assert with_adapter == hf_greedy(model, a_dir, PROMPTS[0], 6)
        streamed = await streaming
        alone = await collect(engine.generate(PROMPTS[2], LONG))
        assert len(streamed) == 40 and streamed == alone
    finally:
        await engine.shutdown()


async def test_unload_while_its_request_streams_lets_it_finish(adapters):
    model, a_dir, b_dir = adapters
    engine = AsyncEngine(model, attention_backend="torch")
    try:
        await engine.load_adapter("b", b_dir)
        expected = await collect(engine.generate(PROMPTS[1], LONG, adapter="b"))
        started = asyncio.Event()
        streaming = asyncio.create_task(collect(engine.generate(PROMPTS[1], LONG, adapter="b"), started))
        await started.wait()
        assert engine.metrics().running_per_adapter == {"b": 1}
        engine.unload_adapter("b")
        with pytest.raises(ValueError, match="not loaded"):
            await collect(engine.generate(PROMPTS[0], SHORT, adapter="b"))
        assert await streaming == expected            # kept its weights to the end
        assert engine.engine.lora.registry.used_bytes() == 0
    finally:
        await engine.shutdown()


async def test_a_session_can_name_an_adapter_folder_directly(adapters):
    """The TUI passes a session's adapter name; an adapter folder (or model-store name) loads on first use."""
    model, a_dir, _ = adapters
    engine = AsyncEngine(model, attention_backend="torch")
    try:
        tokens = await collect(engine.generate(PROMPTS[0], SHORT, adapter=str(a_dir)))
        assert tokens == hf_greedy(model, a_dir, PROMPTS[0], 6)
        assert engine.metrics().adapters_resident == [str(a_dir)]
    finally:
        await engine.shutdown()
