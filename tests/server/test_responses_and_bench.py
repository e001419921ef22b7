"""Response pieces (the pre-encoded token chunk equals the general one; usage and timings arithmetic) and the
`bench --serve` code path on a tiny model."""
from __future__ import annotations

import json

import pytest
from server_helpers import ThreadServer, serve_settings

from llmchat.engine.outputs import RequestMetrics
from llmchat.engine.serve import ModelSpec
from llmchat.engine.bench.serve import format_report, run
from llmchat.engine.serve.responses import Envelope, timings, usage


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("with_usage", [True, False])
def test_the_fast_token_chunk_is_the_general_chunk(chat, with_usage):
    envelope = Envelope("chatcmpl-1", "tiny", chat)
    for text in ("hi", ' "quoted" \\ back\nslash', "ünïcode 🙂", "\u0000"):
        assert envelope.text_chunk(text, with_usage) == envelope.chunk(text, with_usage_field=with_usage)
        assert json.loads(envelope.text_chunk(text, with_usage)[6:])["choices"][0]


def test_usage_and_timings():
    m = RequestMetrics(arrival_time=10.0, first_token_time=10.5, finish_time=12.5, num_prompt_tokens=100,
                       num_cached_tokens=64, num_generated_tokens=21)
    assert usage(m) == {"prompt_tokens": 100, "completion_tokens": 21, "total_tokens": 121,
                        "prompt_tokens_details": {"cached_tokens": 64}}
    t = timings(m)
    assert t["cache_n"] == 64 and t["prompt_n"] == 36 and t["prompt_ms"] == pytest.approx(500)
    assert t["prompt_per_second"] == pytest.approx(72) and t["predicted_n"] == 21
    assert t["predicted_ms"] == pytest.approx(2000) and t["predicted_per_second"] == pytest.approx(10)
    assert timings(RequestMetrics())["predicted_per_second"] == 0.0


def test_bench_serve_measures_both_sides(served_model):
    model = served_model[0]
    engine = dict(attention_backend="torch", kv_cache_gb=0.05)
    with ThreadServer([ModelSpec("tiny", model)], serve_settings(engine_kwargs=engine)) as server:
        result = run(model, clients=[1, 3], new_tokens=4, rounds=1, server_url=server.base_url, ttft_samples=3,
                     **engine)
    assert set(result["clients"]) == {"1", "3"}
    for figures in result["clients"].values():
        assert figures["engine_tok_s"] > 0 and figures["http_tok_s"] > 0 and figures["http_ttft_ms"] > 0
    single = result["single_ttft"]
    assert single["samples"] == 3 and single["engine_ms"] > 0 and single["http_ms"] > 0
    assert single["http_extra_ms"] == pytest.approx(single["http_ms"] - single["engine_ms"])
    report = format_report(result)
    assert "HTTP/in-proc" in report and "TTFT of a lone request, median of 3" in report
