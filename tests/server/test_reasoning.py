"""Reasoning apart from the answer for models whose template thinks: `reasoning_content` and `reasoning` beside
`content`, whole and streamed, whether the template opens <think> or the model does; past assistant messages
bring theirs back. A regex makes the random-weight model write a known shape of reply."""
from __future__ import annotations

import json

import httpx
import pytest

from llmchat.engine.chat import render_chat
from llmchat.engine.reasoning import ReasoningSplitter, split_reasoning
from llmchat.engine.serve.protocol import ChatCompletionRequest

USER = [{"role": "user", "content": "Think, then answer."}]
SHAPES = {"opens-think": "[a-z]{3,8} [a-z]{3,8}\\n</think>\\n\\n[A-Z][a-z]{2,5} [a-z]{2,5}",
          "model-thinks": "<think>\\n[a-z]{3,8} [a-z]{3,8}\\n</think>\\n\\n[A-Z][a-z]{2,5} [a-z]{2,5}"}


@pytest.fixture(scope="module")
def http(structured_server):
    with httpx.Client(base_url=structured_server.base_url, timeout=120) as c:
        yield c


def whole(http, model, **body) -> dict:
    r = http.post("/v1/chat/completions", json={"model": model, "messages": USER, "max_tokens": 60, **body})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def streamed(http, model, **body) -> tuple[str, str, str, str]:
    body = {"model": model, "messages": USER, "max_tokens": 60, "stream": True, **body}
    reasoning_content = reasoning = content = ""
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if not event["choices"]:
                continue
            delta = event["choices"][0]["delta"]
            reasoning_content += delta.get("reasoning_content") or ""
            reasoning += delta.get("reasoning") or ""
            content += delta.get("content") or ""
            reason = event["choices"][0]["finish_reason"]
    return reasoning_content, reasoning, content, reason


@pytest.mark.parametrize("model", list(SHAPES))
def test_reasoning_apart_whole_and_streamed(http, model):
    for seed in range(3):
        body = {"structured_outputs": {"regex": SHAPES[model]}, "temperature": 1.0, "seed": seed}
        message = whole(http, model, **body)["message"]
        thought, answer = message["reasoning_content"], message["content"]
        assert message["reasoning"] == thought
        assert len(thought.split()) == 2 and thought.islower() and "think>" not in thought
        assert answer[0].isupper() and len(answer.split()) == 2 and "think>" not in answer
        assert streamed(http, model, **body) == (thought, thought, answer, "stop")


@pytest.mark.parametrize("model", list(SHAPES))
def test_unconstrained_replies_split_the_same_whole_and_streamed(http, model):
    for seed in range(3):
        body = {"temperature": 1.0, "seed": seed, "max_tokens": 40}
        message = whole(http, model, **body)["message"]
        rc, r, content, _ = streamed(http, model, **body)
        assert (rc, r, content) == (message["reasoning_content"] or "", message["reasoning"] or "",
                                    message["content"])


def test_a_reply_that_does_not_reason_has_no_reasoning(http):
    message = whole(http, "model-thinks", structured_outputs={"regex": "[A-Z][a-z]{2,5}"})["message"]
    assert message["reasoning_content"] is None and message["reasoning"] is None and message["content"]
    plain = whole(http, "tools", max_tokens=5)["message"]
    assert "reasoning_content" not in plain          # a template that does not think: no reasoning fields


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_past_reasoning_goes_back_into_the_template(http, structured_server, field):
    history = [*USER, {"role": "assistant", "content": "Paris.", field: "the capital"},
               {"role": "user", "content": "And why?"}]
    assert whole(http, "opens-think", messages=history, max_tokens=4)["finish_reason"] in ("stop", "length")
    tokenizer = structured_server.engine("opens-think").tokenizer
    plan = ChatCompletionRequest(messages=history).to_engine(tokenizer.chat_template)
    assert "<think>\nthe capital\n</think>\n\nParis." in render_chat(tokenizer, plan.prompt)


@pytest.mark.parametrize("reply, opened, expected", [
    ("<think>\nhmm, yes\n</think>\n\nThe answer.", False, ("hmm, yes", "The answer.")),
    ("hmm\n</think>\n\nAnswer", True, ("hmm", "Answer")),
    ("Just an answer <think> in text", False, (None, "Just an answer <think> in text")),
    ("<think>\nnever closed", False, ("never closed", "")),
    ("a </thin", True, ("a </thin", "")),
    ("<thi", False, (None, "<thi")),
])
def test_the_splitter_piece_by_piece(reply, opened, expected):
    assert split_reasoning(reply, opened) == expected
    for size in (1, 2, 3):
        splitter, reasoning, answer = ReasoningSplitter(opened), "", ""
        for i in range(0, len(reply), size):
            r, a = splitter.feed(reply[i:i + size])
            reasoning, answer = reasoning + r, answer + a
        r, a = splitter.finish()
        assert ((reasoning + r).strip() if expected[0] is not None else None, answer + a) == expected


@pytest.mark.parametrize("model", list(SHAPES))
def test_a_constrained_reply_that_never_thinks_is_the_answer(http, model):
    """A JSON schema shapes the whole reply: no </think> ever comes, even after a prompt that opened <think>."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    message = whole(http, model, **body)["message"]
    assert message["reasoning_content"] is None and json.loads(message["content"]) in ({"ok": True}, {"ok": False})
    rc, r, content, reason = streamed(http, model, **body)
    assert (rc, r, content, reason) == ("", "", message["content"], "stop")


@pytest.mark.parametrize("reply, expected", [('{"a": 1}', ("", '{"a": 1}')), ("x y\n</think>\n\nz", ("x y", "z"))])
def test_the_splitter_of_a_constrained_reply_holds_its_reasoning_until_closed(reply, expected):
    splitter, reasoning, answer = ReasoningSplitter(in_reasoning=True, unclosed_is_answer=True), "", ""
    for ch in reply:
        r, a = splitter.feed(ch)
        reasoning, answer = reasoning + r, answer + a
    r, a = splitter.finish()
    assert (reasoning + r, answer + a) == expected


def test_chat_template_kwargs_reach_the_template(http, structured_server):
    """vLLM's and llama-server's chat_template_kwargs (what Qwen3 clients send as extra_body): enable_thinking=false
    closes an empty <think> in the prompt, so the whole reply is the answer, whole and streamed."""
    body = {"structured_outputs": {"regex": "[A-Z][a-z]{2,5} [a-z]{2,5}"}, "temperature": 1.0, "seed": 3}
    thinking = http.post("/v1/chat/completions", json={"model": "model-thinks", "messages": USER, **body}).json()
    direct = http.post("/v1/chat/completions", json={
        "model": "model-thinks", "messages": USER, "chat_template_kwargs": {"enable_thinking": False}, **body}).json()
    tokenizer = structured_server.engine("model-thinks").tokenizer
    closed = len(tokenizer("<think>\n\n</think>\n\n", add_special_tokens=False).input_ids)
    assert direct["usage"]["prompt_tokens"] == thinking["usage"]["prompt_tokens"] + closed
    message = direct["choices"][0]["message"]
    assert message["reasoning_content"] is None and message["content"][0].isupper()
    rc, r, content, reason = streamed(http, "model-thinks", chat_template_kwargs={"enable_thinking": False}, **body)
    assert (rc, r, content, reason) == ("", "", message["content"], "stop")
    plan = ChatCompletionRequest(messages=USER, chat_template_kwargs={"enable_thinking": False}).to_engine(
        tokenizer.chat_template)
    assert render_chat(tokenizer, plan.prompt).endswith("assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize("name", ["tools", "add_generation_prompt", "messages"])
def test_chat_template_kwargs_cannot_take_what_the_request_says(http, name):
    r = http.post("/v1/chat/completions", json={"model": "model-thinks", "messages": USER,
                                                "chat_template_kwargs": {name: True}})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "chat_template_kwargs" and repr(name) in error["message"]


def test_chat_template_kwargs_that_break_the_template_are_the_requests_error(http):
    """A keyword argument shadows what the template calls (its namespace()): a 400 naming the parameter, no 500."""
    r = http.post("/v1/chat/completions", json={"model": "model-thinks", "messages": USER,
                                                "chat_template_kwargs": {"namespace": 1}})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "chat_template_kwargs" and "not callable" in r.json()["error"]["message"]
