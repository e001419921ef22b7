"""AsyncEngine: concurrent streams from the engine thread, cancellation and early exit abort."""
from __future__ import annotations

import asyncio

import pytest
from engine_helpers import hf_greedy, random_prompt

from llmchat.engine import AsyncEngine, SamplingParams


async def wait_until(predicate, what: str):
    """Poll instead of sleeping a fixed time (the machine is shared: no timed assertions)."""
    for _ in range(20000):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
async def engine(tiny_model_dir):
    eng = AsyncEngine(tiny_model_dir("llama"), attention_backend="torch", max_num_batched_tokens=32)
    yield eng
    await eng.shutdown()


async def collect(engine, prompt, params):
    deltas = [d async for d in engine.generate(prompt, params)]
    return deltas


async def test_streams_several_requests_concurrently(engine, tiny_model_dir):
    prompts = [random_prompt(n, seed=70 + i) for i, n in enumerate([5, 40, 12, 70])]
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    results = await asyncio.gather(*(collect(engine, p, params) for p in prompts))
    for prompt, deltas in zip(prompts, results):
        assert deltas[-1].finished and deltas[-1].finish_reason == "length"
        assert all(not d.finished for d in deltas[:-1])
        tokens = [t for d in deltas for t in d.token_ids]
        assert tokens == hf_greedy(tiny_model_dir("llama"), prompt, 10, ignore_eos=True)
        assert len(deltas) == 10                      # one delta per token: really streamed
        assert deltas[-1].metrics.num_generated_tokens == 10 and deltas[-1].metrics.ttft > 0
    m = engine.metrics()
    assert m.total_generation_tokens == 40 and m.num_running == 0 and m.kv_blocks_used == 0


async def test_chat_messages_stream_text(engine):
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello world!"}]
    deltas = await collect(engine, chat, SamplingParams(max_tokens=8, temperature=0.0))
    text = "".join(d.text for d in deltas)
    ids = [t for d in deltas for t in d.token_ids]
    assert text == engine.tokenizer.decode(ids, skip_special_tokens=True)


async def test_cancelling_the_task_aborts_and_frees_blocks(engine):
    params = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    got_first = asyncio.Event()

    async def consume():
        async for _ in engine.generate(random_prompt(60, seed=1), params):
            got_first.set()

    task = asyncio.create_task(consume())
    await got_first.wait()
    assert engine.metrics().kv_blocks_used > 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: engine.metrics().kv_blocks_used == 0 and engine.metrics().num_running == 0,
                     "blocks freed after cancel")
    assert engine.metrics().total_generation_tokens < 400


async def test_breaking_out_of_the_loop_aborts(engine):
    params = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    stream = engine.generate(random_prompt(30, seed=2), params)
    async for _ in stream:
        break
    await stream.aclose()
    await wait_until(lambda: engine.metrics().num_running == 0 and engine.metrics().kv_blocks_used == 0,
                     "request aborted after leaving the loop")


async def test_abort_by_id_ends_the_stream(engine):
    params = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    deltas = []
    async for d in engine.generate(random_prompt(10, seed=3), params, request_id="chat-1"):
        deltas.append(d)
        if len(deltas) == 2:
            engine.abort("chat-1")
    assert deltas[-1].finished and deltas[-1].finish_reason == "abort"
    assert len(deltas) < 400


async def test_bad_input_raises_before_first_delta_and_others_keep_streaming(engine):
    good = asyncio.create_task(collect(engine, random_prompt(20, seed=4),
                                       SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)))
    for prompt, params in [("", None), ([{"role": "wizard", "content": "hi"}], None),
                           ("hi", SamplingParams(max_tokens=0)), ("hi", SamplingParams(temperature=-1)),
                           ("hi", SamplingParams(top_p=1.5)), (random_prompt(600, seed=5), None)]:
        with pytest.raises(ValueError):
            async for _ in engine.generate(prompt, params):
                pass
    deltas = await good
    assert deltas[-1].finish_reason == "length" and sum(len(d.token_ids) for d in deltas) == 12


async def test_shutdown_ends_open_streams(tiny_model_dir):
    eng = AsyncEngine(tiny_model_dir("llama"), attention_backend="torch")
    params = SamplingParams(max_tokens=500, temperature=0.0, ignore_eos=True)
    first = asyncio.Event()
    deltas = []

    async def consume():
        async for d in eng.generate(random_prompt(8, seed=6), params):
            deltas.append(d)
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    await eng.shutdown()
    await asyncio.wait_for(task, timeout=60)
    assert deltas[-1].finished and deltas[-1].finish_reason == "abort"
    with pytest.raises(RuntimeError):
        async for _ in eng.generate("hi"):
            pass
