"""`llmchat serve` restarted: a client that sends its conversation again finds it warm (the KV disk tier), as
usage's cached tokens and /metrics' disk counters say."""
from __future__ import annotations

import re

import httpx
import openai
from server_helpers import ThreadServer, serve_settings

from llmchat.engine.serve import ModelSpec

CHAT = [{"role": "user", "content": "Please repeat: " + " ".join(f"word{i}" for i in range(60))}]


def test_a_restarted_server_answers_a_resent_conversation_warm(served_model, monkeypatch, tmp_path):
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(tmp_path / "cache"))
    settings = serve_settings(engine_kwargs={"kv_disk": True})
    replies = []
    for _ in range(2):   # the same conversation to a fresh server each time
        with ThreadServer([ModelSpec("tiny", served_model[0], [])], settings) as server:
            client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="none", max_retries=0)
            replies.append(client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=6, temperature=0))
            metrics = httpx.get(f"{server.base_url}/metrics").text
    first, second = replies
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached == (second.usage.prompt_tokens - 1) // 16 * 16 > 0
    assert second.choices[0].message.content == first.choices[0].message.content
    hits = re.search(r'^llmchat_prefix_cache_disk_hit_tokens_total\{model="tiny"\} (\S+)$', metrics, re.M)
    assert hits and float(hits.group(1)) == cached
    rate = re.search(r'^llmchat_prefix_cache_disk_hit_rate\{model="tiny"\} (\S+)$', metrics, re.M)
    assert rate and 0 < float(rate.group(1)) <= 1
