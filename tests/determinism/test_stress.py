"""Stress: many concurrent streams through AsyncEngine with random seeds, temperatures, lengths and client
aborts, under a KV budget tight enough to preempt: no error, no leaked block, and every greedy or seeded
survivor has exactly the tokens and logits of its solo run."""
from __future__ import annotations

import asyncio
import contextlib
import random

import pytest
import torch

from det_helpers import PREFIX, LogitRecorder, Outcome, first_difference, kv_gb_for_blocks, make_llm, run

from llmchat.engine import AsyncEngine, SamplingParams

STREAMS = 48


def workload(seed: int):
    rng = random.Random(seed)
    jobs = []
    for i in range(STREAMS):
        body = [rng.randrange(3, 300) for _ in range(rng.choice((2, 9, 30, 70)))]
        prompt = PREFIX[:rng.choice((0, 16, 37))] + body
        temperature = rng.choice((0.0, 0.0, 0.8, 1.2))
        seed_ = rng.randrange(1 << 30) if temperature and rng.random() < 0.8 else None   # a few unseeded
        params = SamplingParams(max_tokens=rng.randrange(6, 31), temperature=temperature, seed=seed_,
                                top_k=rng.choice((0, 20)), ignore_eos=True)
        # client behaviour: read to the end, leave after a few deltas, or be aborted from outside
        leave = rng.random()
        jobs.append((prompt, params, "stay" if leave < 0.6 else ("leave" if leave < 0.8 else "abort"),
                     rng.randrange(1, 4), rng.random() * 0.05))
    return jobs


async def client(engine: AsyncEngine, i: int, job, results: dict) -> None:
    prompt, params, behaviour, after, delay = job
    request_id = f"stress-{i}"
    if behaviour == "abort":
        asyncio.get_running_loop().call_later(delay, engine.abort, request_id)
    tokens, reason, seen = [], None, 0
    async with contextlib.aclosing(engine.generate(prompt, params, request_id=request_id)) as stream:
        async for delta in stream:
            tokens += delta.token_ids
            reason = delta.finish_reason
            seen += 1
            if behaviour == "leave" and seen >= after:
                break     # closing the stream aborts the request
    results[request_id] = (tokens, reason if behaviour != "leave" or reason else "left")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
async def test_concurrent_streams_with_aborts_and_preemption_match_their_solo_runs(dtype, tiny_model_dir):
    folder = tiny_model_dir("llama")
    jobs = workload(7)
    itemsize = 4 if dtype == "float32" else 2
    engine = AsyncEngine(folder, dtype=dtype, num_threads=2, max_num_batched_tokens=64,
                         kv_cache_gb=kv_gb_for_blocks(folder, 12, itemsize=itemsize))
    recorder = LogitRecorder(engine.engine.sampler)
    engine.engine.sampler = recorder
    results: dict = {}
    try:
        await asyncio.gather(*(client(engine, i, job, results) for i, job in enumerate(jobs)))
        for _ in range(2000):   # the last aborts reach the engine thread (no timed assertion: poll)
            if not engine.engine.requests:
                break
            await asyncio.sleep(0.005)
        bm = engine.engine.block_manager
        assert not engine.engine.requests
        assert bm.num_used_blocks == 0, "blocks leaked"
        assert engine.engine.scheduler.num_preemptions > 0, "the KV budget did not force preemption"
    finally:
        await engine.shutdown()
    assert all(reason in ("length", "abort", "left") for _, reason in results.values()), results
    survivors = [i for i, job in enumerate(jobs) if results[f"stress-{i}"][1] == "length"
                 and (job[1].temperature == 0 or job[1].seed is not None)]
    assert len(survivors) >= STREAMS // 3

    llm, solo_recorder = make_llm(folder, dtype, enable_prefix_caching=False)
    want = [run(llm, solo_recorder, [jobs[i][0]], [jobs[i][1]])[0] for i in survivors]
    got = [Outcome(results[f"stress-{i}"][0], recorder.pop(f"stress-{i}", len(results[f"stress-{i}"][0]))) for i in survivors]
    problem = first_difference(got, want)
    assert problem is None, f"{dtype} stress survivor: {problem}"
