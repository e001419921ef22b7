"""The real SmolLM2-135M-Instruct behind the API: the openai client's parse() with a Pydantic model, and a tool
round trip (its template knows no tools: they go in the system message), streamed and not."""
from __future__ import annotations

import json
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field
from real_model import smollm2_folder
from server_helpers import ThreadServer, serve_settings

from llmchat.engine.serve import ModelSpec

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather forecast for a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                   "properties": {"city": {"type": "string", "maxLength": 30}}}}}


class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int = Field(ge=0, le=120)
    languages: list[Literal["English", "French", "German"]] = Field(max_length=3)


@pytest.fixture(scope="module")
def client():
    with ThreadServer([ModelSpec("smollm2", smollm2_folder())],
                      serve_settings(engine_kwargs={"kv_cache_gb": 0.5, "max_num_batched_tokens": 512})) as server:
        yield openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("temperature", [0, 0.8])
def test_parse_returns_the_pydantic_object(client, temperature):
    reply = client.chat.completions.parse(
        model="smollm2", messages=[{"role": "user", "content": "Describe Marie, a 34 year old from Paris."}],
        response_format=Person, max_tokens=200, temperature=temperature, seed=1)
    assert isinstance(reply.choices[0].message.parsed, Person)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_round_trip(client, stream):
    user = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(model="smollm2", messages=user, tools=[WEATHER], tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=100, temperature=0)
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    history = [*user, first.choices[0].message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 degrees."}]
    if stream:
        chunks = list(client.chat.completions.create(model="smollm2", messages=history, tools=[WEATHER],
                                                     tool_choice="none", max_tokens=40, temperature=0, stream=True))
        answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        answer = client.chat.completions.create(model="smollm2", messages=history, tools=[WEATHER],
                                                tool_choice="none", max_tokens=40,
                                                temperature=0).choices[0].message.content
    assert answer.strip()
