"""Every bad request gets its status and OpenAI's error JSON, never a traceback or a 500."""
from __future__ import annotations

import httpx
import pytest
from server_helpers import ThreadServer, serve_settings

from llmchat.engine.serve import ModelSpec

MAX_BODY = 64 * 1024
USER = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def http(served_model):
    model, _, _ = served_model
    with ThreadServer([ModelSpec("tiny", model)], serve_settings(max_body_bytes=MAX_BODY)) as s:
        with httpx.Client(base_url=s.base_url, timeout=30) as client:
            yield client


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert "Traceback" not in error["message"]
    if param is not None:
        assert error["param"] == param, error
    return error


CHAT_CASES = {
    "n of 2": ({"messages": USER, "n": 2}, "n"),
    "negative temperature": ({"messages": USER, "temperature": -1}, "temperature"),
    "temperature above 2": ({"messages": USER, "temperature": 3}, "temperature"),
    "top_p of 0": ({"messages": USER, "top_p": 0}, "top_p"),
    "top_k below -1": ({"messages": USER, "top_k": -5}, "top_k"),
    "min_p above 1": ({"messages": USER, "min_p": 1.5}, "min_p"),
    "presence_penalty out of range": ({"messages": USER, "presence_penalty": 9}, "presence_penalty"),
    "repetition_penalty of 0": ({"messages": USER, "repetition_penalty": 0}, "repetition_penalty"),
    "max_tokens of 0": ({"messages": USER, "max_tokens": 0}, "max_tokens"),
    "max_tokens as text": ({"messages": USER, "max_tokens": "ten"}, "max_tokens"),
    "max_completion_tokens negative": ({"messages": USER, "max_completion_tokens": -1}, "max_completion_tokens"),
    "empty stop string": ({"messages": USER, "stop": [""]}, None),
    "too many stop strings": ({"messages": USER, "stop": ["a"] * 17}, "stop"),
    "no messages field": ({"model": "tiny"}, "messages"),
    "empty messages": ({"messages": []}, "messages"),
    "unknown role": ({"messages": [{"role": "robot", "content": "hi"}]}, None),
    "empty content": ({"messages": [{"role": "user", "content": "  "}]}, None),
    "content of the wrong type": ({"messages": [{"role": "user", "content": 5}]}, None),
    "image content": ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, None),
    "top_logprobs above 20": ({"messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    "tool_choice naming no tool": ({"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}],
                                    "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice"),
    "tool_choice required without tools": ({"messages": USER, "tool_choice": "required"}, "tool_choice"),
    "json_schema response_format without its schema": ({"messages": USER, "response_format": {"type": "json_schema"}},
                                                       None),
    "unknown response_format": ({"messages": USER, "response_format": {"type": "xml"}}, None),
    "two constraints": ({"messages": USER, "response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'},
                        "grammar"),
    "two structured_outputs at once": ({"messages": USER, "structured_outputs": {"regex": "a", "choice": ["b"]}},
                                       "structured_outputs"),
    "prompt longer than the context": ({"messages": [{"role": "user", "content": "hello world " * 400}]}, None),
    "prompt too long, streamed": ({"messages": [{"role": "user", "content": "hello world " * 400}],
                                   "stream": True}, None),
}


@pytest.mark.parametrize("case", list(CHAT_CASES))
def test_bad_chat_request_is_400(http, case):
    body, param = CHAT_CASES[case]
    error = assert_error(http.post("/v1/chat/completions", json=body), 400, param)
    assert error["type"] == "invalid_request_error"


ACCEPTED_CHAT = {   # schema-valid, so served: the extras are ignored or have a meaning
    "top_logprobs without logprobs": {"messages": USER, "top_logprobs": 2},
    "stream_options without stream": {"messages": USER, "stream_options": {"include_usage": True}},
    "add_generation_prompt false alone": {"messages": USER, "add_generation_prompt": False},
    "continue_final_message after a user message": {"messages": USER, "continue_final_message": True},
    "continue_final_message with a generation prompt": {"messages": [*USER, {"role": "assistant", "content": "I"}],
                                                        "continue_final_message": True},
    "a tool message without content": {"messages": [*USER, {"role": "tool", "tool_call_id": "x"}]},
    "an assistant message without content": {"messages": [*USER, {"role": "assistant"}, *USER]},
    "empty structured_outputs": {"messages": USER, "structured_outputs": {}},
    "text response_format": {"messages": USER, "response_format": {"type": "text"}},
}


@pytest.mark.parametrize("case", list(ACCEPTED_CHAT))
def test_schema_valid_chat_requests_are_served(http, case):
    r = http.post("/v1/chat/completions", json={**ACCEPTED_CHAT[case], "max_tokens": 3})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_unknown_model_is_404(http):
    for path, body in (("/v1/chat/completions", {"model": "nope", "messages": USER}),
                       ("/v1/completions", {"model": "nope", "prompt": "hi"})):
        error = assert_error(http.post(path, json=body), 404, "model")
        assert error["code"] == "model_not_found" and "tiny" in error["message"]


@pytest.mark.parametrize("prompt", ["", [], [[]], [""], "  "])
def test_an_empty_completion_prompt_starts_a_document(http, prompt):
    r = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] >= 1


COMPLETION_CASES = {
    "echo": {"prompt": "hi", "echo": True},
    "suffix": {"prompt": "hi", "suffix": "end"},
    "best_of": {"prompt": "hi", "best_of": 3},
    "token id outside the vocabulary": {"prompt": [1, 2, 10**6]},
    "several prompts": {"prompt": ["a", "b"]},
    "logprobs above 20": {"prompt": "hi", "logprobs": 50},
    "prompt of the wrong type": {"prompt": {"text": "hi"}},
}


@pytest.mark.parametrize("case", list(COMPLETION_CASES))
def test_bad_completion_request_is_400(http, case):
    assert_error(http.post("/v1/completions", json=COMPLETION_CASES[case]), 400)


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'{"messages": [{"role": "user", "content": "x"}], '
                                 b'"temperature": NaN}', b"", "ünïcode".encode("latin-1")])
def test_malformed_bodies_are_400(http, raw):
    assert_error(http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"}), 400)


def test_unknown_route_is_404_and_wrong_method_405(http):
    assert_error(http.get("/v1/nothing"), 404)
    assert_error(http.get("/v1/chat/completions"), 405)
    assert_error(http.get("/v1/models/nope"), 404)


def test_body_too_large_is_413_with_or_without_length(http):
    big = {"messages": [{"role": "user", "content": "x" * (MAX_BODY + 10)}]}
    assert_error(http.post("/v1/chat/completions", json=big), 413)

    def chunks():
        for _ in range(MAX_BODY // 1000 + 5):
            yield b" " * 1000
    assert_error(http.post("/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"}),
                 413)


def test_a_good_request_still_works_after_the_bad_ones(http):
    ok = http.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 2})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["role"] == "assistant"
