"""Schemathesis fuzzes every operation of /openapi.json (valid and invalid bodies, bounded in count and time) with
all its checks: no 5xx, every error OpenAI's error JSON, every status and content type declared, invalid bodies
refused and schema-valid ones served, but for what no JSON schema can say (schemathesis_hooks.py). Its bodies
nearly always break some rule, so a second test draws only valid sampling settings and expects each to be
served. A tiny model with a 64-token context keeps each reply short."""
from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import positive_data_acceptance
from schemathesis_hooks import schema_valid_bodies_are_served
from server_helpers import ThreadServer, serve_settings
from tiny_models import make_model

from llmchat.engine.serve import ModelSpec

schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    model = make_model(tmp_path_factory.mktemp("fuzz-model"), "llama", max_position_embeddings=64)
    with ThreadServer([ModelSpec("tiny", model)], serve_settings(max_body_bytes=256 * 1024)) as s:
        yield s


@pytest.fixture(scope="module")
def api_schema(fuzz_server):
    return schemathesis.openapi.from_url(f"{fuzz_server.base_url}/openapi.json")


@schema.parametrize()
@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
def test_the_schema_tells_the_truth(case, fuzz_server):
    if isinstance(case.body, dict) and isinstance(case.body.get("model"), str):
        case.body["model"] = "tiny"   # a random id is only ever a 404: reach the engine instead
    response = case.call(base_url=fuzz_server.base_url, timeout=60)
    assert response.status_code < 500, (case.method, case.path, case.body, response.text)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
    # every check, positive_data_acceptance with what no schema can say (schemathesis_hooks.py)
    case.validate_response(response, excluded_checks=[positive_data_acceptance],
                           additional_checks=[schema_valid_bodies_are_served])


SAMPLING = st.fixed_dictionaries({"messages": st.just([{"role": "user", "content": "Hello world"}])}, optional={
    "temperature": st.floats(0, 2), "top_p": st.floats(0.01, 1), "top_k": st.integers(-1, 2**31 - 1),
    "min_p": st.floats(0, 1), "presence_penalty": st.floats(-2, 2), "frequency_penalty": st.floats(-2, 2),
    "repetition_penalty": st.floats(0.01, 10), "seed": st.integers(-2**70, 2**70),
    "max_tokens": st.integers(1, 2**31 - 1), "stop": st.lists(st.text(min_size=1, max_size=4), max_size=4),
    "stream": st.booleans(), "ignore_eos": st.booleans(),
    "logprobs": st.just(True), "top_logprobs": st.integers(0, 20)})


@given(body=SAMPLING)
@settings(max_examples=20, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
def test_any_valid_sampling_settings_are_served(fuzz_server, body):
    if "top_logprobs" in body and "logprobs" not in body:
        body["logprobs"] = True
    r = httpx.post(f"{fuzz_server.base_url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, (body, r.text)
    if body.get("stream"):
        assert r.text.rstrip().endswith("data: [DONE]") and '"error"' not in r.text, r.text
    else:
        assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_the_document_declares_what_the_server_answers(fuzz_server):
    doc = httpx.get(f"{fuzz_server.base_url}/openapi.json").json()
    paths = doc["paths"]
    for path in ("/v1/chat/completions", "/v1/completions"):
        responses = paths[path]["post"]["responses"]
        assert set(responses) == {"200", "400", "401", "404", "413", "429", "500", "503"}
        assert set(responses["200"]["content"]) == {"application/json", "text/event-stream"}
    assert set(paths["/v1/models/{model_id}"]["get"]["responses"]) == {"200", "401", "404", "503"}
    assert set(paths["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
    assert "422" not in str(doc) and "HTTPValidationError" not in str(doc)
    body = doc["components"]["schemas"]["ChatCompletionRequest"]
    assert {"tools", "tool_choice", "parallel_tool_calls", "response_format", "structured_outputs", "grammar",
            "json_schema"} <= set(body["properties"])
    assert body["dependentRequired"] == {"tool_choice": ["tools"]}
    prompt = str(doc["components"]["schemas"]["CompletionRequest"]["properties"]["prompt"])
    assert "'maximum': 383" in prompt     # token ids within the tiny model's vocabulary
