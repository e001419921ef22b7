"""Local and remote engines share one interface: EngineClient (streaming) and BatchClient (blocking, batched)."""
from __future__ import annotations

import asyncio

from llmchat.engine import LLM, AsyncEngine, BatchClient, EngineClient, SamplingParams
from llmchat.engine.remote import Endpoint, RemoteEngine, RemoteLLM


def test_local_and_remote_engines_implement_the_clients(tiny_model_dir):
    endpoint = Endpoint("here", "http://127.0.0.1:9/v1")   # never contacted
    remote = RemoteEngine(endpoint, "some-model")
    assert isinstance(remote, EngineClient) and remote.tokenizer is None   # the server tokenizes
    assert isinstance(RemoteLLM(endpoint, "some-model"), BatchClient)
    llm = LLM(tiny_model_dir("llama"), attention_backend="torch", kv_cache_gb=0.02)
    assert isinstance(llm, BatchClient)

    async def stream_once():
        engine = AsyncEngine(tiny_model_dir("llama"), attention_backend="torch", kv_cache_gb=0.02)
        try:
            assert isinstance(engine, EngineClient) and engine.tokenizer is not None
            deltas = [d async for d in engine.generate("Hello", SamplingParams(max_tokens=3, temperature=0))]
            return deltas, engine.metrics()
        finally:
            await engine.shutdown()

    deltas, metrics = asyncio.run(stream_once())
    assert deltas[-1].finished and deltas[-1].finish_reason == "length"
    batch = llm.generate(["Hello"], SamplingParams(max_tokens=3, temperature=0))
    assert sum(len(d.token_ids) for d in deltas) == len(batch[0].token_ids) == 3   # same engine, same tokens
    assert [t for d in deltas for t in d.token_ids] == batch[0].token_ids
    assert metrics.kv_cache_usage >= 0


def test_an_object_without_the_methods_is_not_a_client():
    assert not isinstance(object(), EngineClient) and not isinstance(object(), BatchClient)
