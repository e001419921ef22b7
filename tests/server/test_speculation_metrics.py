"""/metrics counts speculative decoding: tokens guessed, guesses held, verifications, and the acceptance ratio
and tokens per verification, equal to the engine's own snapshot; a reply's timings say what it guessed
(llama-server's draft_n, draft_n_accepted), and a remote engine reads them back."""
from __future__ import annotations

import asyncio
import re

import httpx
import openai
from server_helpers import ThreadServer, serve_settings

from llmchat.engine import SamplingParams
from llmchat.engine.remote import Endpoint, RemoteEngine
from llmchat.engine.serve import ModelSpec

REPEATING = "one two three one two three one two three one two"


def _value(text: str, name: str) -> float:
    match = re.search(rf'^{name}{{model="tiny"}} (\S+)$', text, re.M)
    assert match, name
    return float(match.group(1))


def test_metrics_show_what_guessing_did(served_model):
    settings = serve_settings(engine_kwargs={"speculative": "ngram"})
    with ThreadServer([ModelSpec("tiny", served_model[0], [])], settings) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="none", max_retries=0)
        replies = [client.completions.create(model="tiny", prompt=REPEATING, max_tokens=40, temperature=0,
                                             extra_body={"ignore_eos": True}) for _ in range(2)]
        text = httpx.get(f"{server.base_url}/metrics").text
        snapshot = server.state.engines["tiny"].metrics()
    assert snapshot.spec_guessed_tokens > 0
    timings = [reply.model_extra["timings"] for reply in replies]
    assert sum(t["draft_n"] for t in timings) == snapshot.spec_guessed_tokens
    assert sum(t["draft_n_accepted"] for t in timings) == snapshot.spec_accepted_tokens
    assert _value(text, "llmchat_spec_guessed_tokens_total") == snapshot.spec_guessed_tokens
    assert _value(text, "llmchat_spec_accepted_tokens_total") == snapshot.spec_accepted_tokens
    assert _value(text, "llmchat_spec_verifications_total") == snapshot.spec_verifications
    assert _value(text, "llmchat_spec_acceptance_ratio") == snapshot.spec_acceptance_rate
    assert _value(text, "llmchat_spec_tokens_per_verification") >= 1


def test_a_remote_engine_reads_what_the_server_guessed(served_model):
    """The app's stats line for a remote model says how many guesses held: RemoteEngine reads draft_n back."""
    async def guess_remotely(base_url: str):
        engine = RemoteEngine(Endpoint("here", f"{base_url}/v1"), "tiny")
        params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
        deltas = [d async for d in engine.generate(REPEATING, params)]
        return deltas[-1].metrics

    for mode in ("ngram", "off"):
        settings = serve_settings(engine_kwargs={"speculative": mode})
        with ThreadServer([ModelSpec("tiny", served_model[0], [])], settings) as server:
            metrics = asyncio.run(guess_remotely(server.base_url))
            snapshot = server.state.engines["tiny"].metrics()
        assert metrics.num_guessed_tokens == snapshot.spec_guessed_tokens
        assert metrics.num_accepted_guesses == snapshot.spec_accepted_tokens
        assert (metrics.num_guessed_tokens > 0) == (mode == "ngram")
