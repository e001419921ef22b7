"""Constrained replies through the API, on a random-weight tiny model (only the constraint makes its reply
well formed): response_format (json_object, json_schema, and the openai client's parse() with a Pydantic
model), vLLM's structured_outputs (json, regex, choice, grammar), llama-server's grammar and json_schema, in
chat and completions, streamed and not; a constraint the library refuses is a 400 naming the parameter."""
from __future__ import annotations

import json
import re
from typing import Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

USER = [{"role": "user", "content": "Tell me about the weather."}]
WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "days", "rain"],
           "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7},
                          "rain": {"type": "boolean"},
                          "tags": {"type": "array", "maxItems": 2, "items": {"enum": ["wind", "sun"]}}}}


class Forecast(BaseModel):
    city: Literal["Paris", "Oslo"]
    days: int = Field(ge=1, le=5)
    windy: bool


@pytest.fixture(scope="module")
def client(structured_server):
    return openai.OpenAI(base_url=f"{structured_server.base_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def http(structured_server):
    with httpx.Client(base_url=structured_server.base_url, timeout=120) as c:
        yield c


def chat(http, **body) -> dict:
    r = http.post("/v1/chat/completions", json={"model": "tools", "messages": USER, "max_tokens": 120, **body})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def streamed_chat(http, **body) -> tuple[str, str]:
    body = {"model": "tools", "messages": USER, "max_tokens": 120, "stream": True, **body}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    return text, [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1]


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_parse_with_a_pydantic_model(client, temperature):
    for seed in range(3):
        reply = client.chat.completions.parse(model="tools", messages=USER, response_format=Forecast,
                                              max_tokens=120, temperature=temperature, seed=seed)
        parsed = reply.choices[0].message.parsed
        assert isinstance(parsed, Forecast) and reply.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_response_format(http, stream):
    response_format = {"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER, "strict": True}}
    for seed in range(3):
        body = {"response_format": response_format, "temperature": 1.0, "seed": seed}
        text, reason = streamed_chat(http, **body) if stream else (
            lambda c: (c["message"]["content"], c["finish_reason"]))(chat(http, **body))
        assert reason == "stop"
        jsonschema.validate(json.loads(text), WEATHER)


def test_json_object_and_the_other_ways_to_give_a_schema(http):
    # any object: a random model may write one key until max_tokens, but what it writes is an object's start
    for seed in range(3):
        choice = chat(http, response_format={"type": "json_object"}, temperature=1.0, seed=seed, max_tokens=40)
        text = choice["message"]["content"]
        assert text.startswith("{")
        if choice["finish_reason"] == "stop":
            assert isinstance(json.loads(text), dict)
    for body in ({"structured_outputs": {"json": WEATHER}}, {"json_schema": WEATHER},
                 {"structured_outputs": {"json": json.dumps(WEATHER)}}):
        jsonschema.validate(json.loads(chat(http, temperature=1.0, seed=5, **body)["message"]["content"]), WEATHER)


def test_regex_choice_and_grammars(http):
    for seed in range(3):
        text = chat(http, structured_outputs={"regex": r"[A-Z][a-z]{2,6} \d{2}"}, temperature=1.0, seed=seed)
        assert re.fullmatch(r"[A-Z][a-z]{2,6} \d{2}", text["message"]["content"])
        choice = chat(http, structured_outputs={"choice": ["yes", "no", "maybe"]}, temperature=1.0, seed=seed)
        assert choice["message"]["content"] in ("yes", "no", "maybe") and choice["finish_reason"] == "stop"
    gbnf = 'root ::= "The answer is " answer "."\nanswer ::= "forty-two" | [0-9]+'
    text = chat(http, grammar=gbnf, temperature=1.0, seed=3)["message"]["content"]
    assert re.fullmatch(r"The answer is (forty-two|[0-9]+)\.", text)
    lark = 'start: "A" mid "Z"\nmid: /[a-c]{3}/'
    assert re.fullmatch("A[a-c]{3}Z", chat(http, structured_outputs={"grammar": lark})["message"]["content"])


def test_completions_take_constraints_too(http, structured_server):
    for body in ({"json_schema": WEATHER}, {"structured_outputs": {"json": WEATHER}},
                 {"response_format": {"type": "json_schema", "json_schema": {"schema": WEATHER}}}):
        r = http.post("/v1/completions", json={"model": "tools", "prompt": "Weather:", "max_tokens": 120,
                                               "temperature": 1.0, "seed": 2, **body})
        assert r.status_code == 200, r.text
        jsonschema.validate(json.loads(r.json()["choices"][0]["text"]), WEATHER)
    r = http.post("/v1/completions", json={"model": "tools", "prompt": "Count:", "grammar": 'root ::= [0-9]{3}',
                                           "stream": True, "max_tokens": 20})
    text = "".join(json.loads(line[6:])["choices"][0]["text"] for line in r.text.splitlines()
                   if line.startswith("data: {") and json.loads(line[6:])["choices"])
    assert re.fullmatch("[0-9]{3}", text)


BAD = {
    "response_format.json_schema.schema": {"response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
    "json_schema": {"json_schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}},
    "structured_outputs.regex": {"structured_outputs": {"regex": "a["}},
    "structured_outputs.grammar": {"structured_outputs": {"grammar": "start: foo("}},
    "grammar": {"grammar": "root ::= undefined_rule"},
}


@pytest.mark.parametrize("param", list(BAD))
@pytest.mark.parametrize("stream", [False, True])
def test_a_constraint_the_library_refuses_is_a_400_naming_it(http, param, stream):
    for path, body in (("/v1/chat/completions", {"messages": USER}), ("/v1/completions", {"prompt": "hi"})):
        r = http.post(path, json={"model": "tools", "stream": stream, **body, **BAD[param]})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == param and error["message"].startswith(f"{param}: ")
        assert "Traceback" not in error["message"]
