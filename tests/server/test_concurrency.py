"""Many clients on one engine: concurrent greedy streams equal their solo runs, adapters by model id batch
together, a client that disconnects aborts its request (blocks freed), and a full queue answers 429."""
from __future__ import annotations

import asyncio
import json
import socket
import threading

import httpx
import openai
import pytest
from server_helpers import ThreadServer, serve_settings, wait_until

from llmchat.engine.serve import ModelSpec

MAX_PENDING = 9
LONG = 480   # the tiny model's context is 512: room for a short prompt and a long reply


@pytest.fixture(scope="module")
def server(served_model):
    model, a_dir, b_dir = served_model
    spec = ModelSpec("tiny", model, [("tiny-a", str(a_dir)), ("tiny-b", str(b_dir))])
    # the kernels, as users run them: batch composition must not change a greedy stream (deterministic mode)
    settings = serve_settings(max_pending=MAX_PENDING, engine_kwargs={"attention_backend": "kernels"})
    with ThreadServer([spec], settings) as s:
        yield s


def chat(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Session {i}: the quick brown fox number {i * 7} jumps."}]


class PeakWatcher:
    """Samples the engine's metrics in a thread: the most requests (and adapters) seen running at once."""

    def __init__(self, engine):
        self.engine, self.peak, self.adapters_together = engine, 0, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            m = self.engine.metrics()
            self.peak = max(self.peak, m.num_running)
            if len(m.running_per_adapter) > len(self.adapters_together):
                self.adapters_together = set(m.running_per_adapter)
            self._stop.wait(0.001)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class HeldSteps:
    """Holds the engine thread before its next step until all `count` requests are in: those sent meanwhile wait in
    its command queue, so they start together however slowly a busy machine sends them (a 24-token reply of the
    tiny model can end before the next request is even connected)."""

    def __init__(self, async_engine, count: int):
        self.async_engine, self.count, self._gate = async_engine, count, threading.Event()

    def __enter__(self):
        engine = self.async_engine.engine
        step = engine.step

        def held_step():
            self._gate.wait()
            return step()
        engine.step = held_step
        return self

    async def release_when_all_arrived(self):
        def arrived():   # taken in by the engine thread (held before its step), or queued for it
            return len(self.async_engine.engine.requests) + self.async_engine._commands.qsize()
        while arrived() < self.count:
            await asyncio.sleep(0.005)   # no event tells the test a request reached the engine's queue
        self._gate.set()

    def __exit__(self, *exc):
        self._gate.set()
        del self.async_engine.engine.step   # the class's own step again


async def stream_text(client, model: str, messages, max_tokens: int = 24) -> str:
    stream = await client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens,
                                                  temperature=0, stream=True, extra_body={"ignore_eos": True})
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


async def test_eight_concurrent_streams_equal_their_solo_runs(server):
    client = openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    solo = [await stream_text(client, "tiny", chat(i)) for i in range(8)]
    with PeakWatcher(server.engine()) as watch, HeldSteps(server.engine(), 8) as held:
        streams = asyncio.gather(*(stream_text(client, "tiny", chat(i)) for i in range(8)))
        await held.release_when_all_arrived()
        together = await streams
    assert together == solo
    assert watch.peak >= 4, "the streams did not run in one batch"
    assert len(set(solo)) > 1


async def test_adapters_by_model_id_in_one_batch(server):
    client = openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    models = ["tiny", "tiny-a", "tiny-b"] * 2
    solo = [await stream_text(client, m, chat(1), 32) for m in models[:3]]
    assert len(set(solo)) == 3, "each adapter changes the greedy reply"
    with PeakWatcher(server.engine()) as watch:
        together = await asyncio.gather(*(stream_text(client, m, chat(1), 32) for m in models))
    assert together == solo * 2
    assert watch.adapters_together == {"tiny-a", "tiny-b"}, "the adapters never ran in the same batch"


def _abort_count(server) -> float:
    for line in httpx.get(f"{server.base_url}/metrics").text.splitlines():
        if line.startswith('llmchat_requests_total{finish_reason="abort",model="tiny"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _idle(server) -> bool:
    m = server.engine().metrics()
    return m.num_running == 0 and m.num_waiting == 0 and m.kv_blocks_used == 0 and server.state.pending == 0


def test_disconnect_mid_stream_aborts_and_frees_blocks(server):
    wait_until(lambda: _idle(server), "idle before")
    aborted, generated = _abort_count(server), server.engine().metrics().total_generation_tokens
    body = {"model": "tiny", "messages": chat(3), "max_tokens": LONG, "temperature": 0, "stream": True,
            "ignore_eos": True}
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()
        contents = [json.loads(line[6:]) for line in (next(lines) for _ in range(8)) if line]
        assert contents and server.engine().metrics().kv_blocks_used > 0
    wait_until(lambda: _idle(server), "the request is aborted and its blocks are free")
    assert server.engine().metrics().total_generation_tokens - generated < LONG
    assert _abort_count(server) == aborted + 1


def test_disconnect_while_waiting_for_a_whole_reply_aborts(server):
    wait_until(lambda: _idle(server), "idle before")
    generated = server.engine().metrics().total_generation_tokens
    payload = json.dumps({"model": "tiny", "messages": chat(4), "max_tokens": LONG, "temperature": 0,
                          "ignore_eos": True}).encode()
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        wait_until(lambda: server.engine().metrics().num_running == 1, "the request runs", interval=0.001)
    wait_until(lambda: _idle(server), "the request is aborted and its blocks are free")
    assert server.engine().metrics().total_generation_tokens - generated < LONG


def test_full_queue_answers_429(server):
    wait_until(lambda: _idle(server), "idle before")
    body = {"model": "tiny", "messages": chat(5), "max_tokens": LONG, "temperature": 0, "stream": True,
            "ignore_eos": True}
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        streams = [http.stream("POST", "/v1/chat/completions", json=body) for _ in range(MAX_PENDING)]
        responses = [s.__enter__() for s in streams]
        try:
            assert all(r.status_code == 200 for r in responses)
            refused = http.post("/v1/chat/completions", json={**body, "stream": False})
            assert refused.status_code == 429 and refused.headers["retry-after"]
            assert refused.json()["error"]["type"] == "rate_limit_error"
            assert refused.json()["error"]["code"] == "queue_full"
        finally:
            for s in streams:
                s.__exit__(None, None, None)
    wait_until(lambda: _idle(server), "every stream is aborted")
    ok = httpx.post(f"{server.base_url}/v1/chat/completions", json={**body, "stream": False, "max_tokens": 2})
    assert ok.status_code == 200
