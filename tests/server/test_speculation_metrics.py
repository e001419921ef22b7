"""/metrics counts speculative decoding: tokens guessed, guesses held, verifications, and the acceptance ratio
and tokens per verification, equal to the engine's own snapshot."""
from __future__ import annotations

import re

import httpx
import openai
from server_helpers import ThreadServer, serve_settings

from llmchat.engine.serve import ModelSpec


def _value(text: str, name: str) -> float:
    match = re.search(rf'^{name}{{model="tiny"}} (\S+)$', text, re.M)
    assert match, name
    return float(match.group(1))


def test_metrics_show_what_guessing_did(served_model):
    settings = serve_settings(engine_kwargs={"speculative": "ngram"})
    with ThreadServer([ModelSpec("tiny", served_model[0], [])], settings) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="none", max_retries=0)
        for _ in range(2):
            client.completions.create(model="tiny", prompt="one two three one two three one two three one two",
                                      max_tokens=40, temperature=0, extra_body={"ignore_eos": True})
        text = httpx.get(f"{server.base_url}/metrics").text
        snapshot = server.state.engines["tiny"].metrics()
    assert snapshot.spec_guessed_tokens > 0
    assert _value(text, "llmchat_spec_guessed_tokens_total") == snapshot.spec_guessed_tokens
    assert _value(text, "llmchat_spec_accepted_tokens_total") == snapshot.spec_accepted_tokens
    assert _value(text, "llmchat_spec_verifications_total") == snapshot.spec_verifications
    assert _value(text, "llmchat_spec_acceptance_ratio") == snapshot.spec_acceptance_rate
    assert _value(text, "llmchat_spec_tokens_per_verification") >= 1
