"""Tool calls through the API with the real openai client: the tools reach the prompt in the model's own
template format, `required` and a named function are constrained so the call always parses (a random-weight
model), `auto` parses what the model writes (a call, or plain content when it does not parse), and a round trip
(call -> tool result -> answer) works streamed and not."""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from llmchat.engine.chat import render_chat
from llmchat.engine.serve.protocol import ChatCompletionRequest

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_ARGS = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                "properties": {"city": {"enum": ["Paris", "Oslo"]},
                               "days": {"type": "integer", "minimum": 1, "maximum": 7}}}
TIME_ARGS = {"type": "object", "additionalProperties": False, "required": ["zone"],
             "properties": {"zone": {"enum": ["UTC", "CET"]}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "the forecast",
                                           "parameters": WEATHER_ARGS}},
         {"type": "function", "function": {"name": "get_time", "parameters": TIME_ARGS}}]
SCHEMAS = {"get_weather": WEATHER_ARGS, "get_time": TIME_ARGS}


@pytest.fixture(scope="module")
def client(structured_server):
    return openai.OpenAI(base_url=f"{structured_server.base_url}/v1", api_key="unused", max_retries=0)


def assert_valid_calls(calls, names=tuple(SCHEMAS)):
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_") and call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def streamed(client, **kwargs):
    """(content, tool calls as {index: (id, name, arguments)}, finish_reason, the tool-call deltas in order)."""
    content, calls, deltas, reason = "", {}, [], None
    kwargs.setdefault("model", "tools")
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for d in choice.delta.tool_calls or []:
            deltas.append(d)
            id_, name, arguments = calls.get(d.index, (None, None, ""))
            calls[d.index] = (d.id or id_, (d.function.name if d.function else None) or name,
                              arguments + ((d.function.arguments or "") if d.function else ""))
        reason = choice.finish_reason or reason
    return content, calls, reason, deltas


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_required_always_parses(client, temperature):
    for seed in range(4):
        reply = client.chat.completions.create(model="tools", messages=USER, tools=TOOLS, tool_choice="required",
                                               parallel_tool_calls=False, max_tokens=120,
                                               temperature=temperature, seed=seed)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert len(choice.message.tool_calls) == 1
        assert_valid_calls(choice.message.tool_calls)


def test_a_named_function_is_the_one_called(client):
    for seed in range(3):
        reply = client.chat.completions.create(
            model="tools", messages=USER, tools=TOOLS, max_tokens=120, temperature=1.0, seed=seed,
            tool_choice={"type": "function", "function": {"name": "get_time"}})
        assert_valid_calls(reply.choices[0].message.tool_calls, names=("get_time",))
        assert reply.choices[0].finish_reason == "tool_calls"


def test_parallel_calls_when_allowed(client):
    reply = client.chat.completions.create(model="tools", messages=USER, tools=TOOLS, tool_choice="required",
                                           max_tokens=200, temperature=1.0, seed=11)
    choice = reply.choices[0]
    calls = choice.message.tool_calls
    assert calls and len({c.id for c in calls}) == len(calls)
    if choice.finish_reason == "tool_calls":     # a random model may also run out of tokens in a later call
        assert_valid_calls(calls)


def test_streamed_call_name_first_then_arguments(client):
    content, calls, reason, deltas = streamed(client, messages=USER, tools=TOOLS, tool_choice="required",
                                              parallel_tool_calls=False, max_tokens=120, temperature=0)
    whole = client.chat.completions.create(model="tools", messages=USER, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=120, temperature=0)
    assert reason == "tool_calls" and content == "" and list(calls) == [0]
    first = deltas[0]
    assert first.id.startswith("call_") and first.type == "function" and first.function.name
    assert all(d.id is None and d.function.name is None for d in deltas[1:])
    assert len(deltas) > 3, "a required call streams its arguments as they come"
    call = whole.choices[0].message.tool_calls[0]
    assert calls[0][1:] == (call.function.name, call.function.arguments)


def test_round_trip_call_result_answer(client, structured_server):
    for stream in (False, True):
        first = client.chat.completions.create(model="tools", messages=USER, tools=TOOLS, tool_choice="required",
                                               parallel_tool_calls=False, max_tokens=120, temperature=0)
        choice = first.choices[0]
        # (failed once in a shuffled CI run, never alone: say what came instead of a call)
        assert choice.message.tool_calls, (stream, choice.finish_reason, first.usage, choice.message.content)
        call = choice.message.tool_calls[0]
        history = [*USER, first.choices[0].message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny, 21 C"}'}]
        if stream:
            content, calls, reason, _ = streamed(client, messages=history, tools=TOOLS, max_tokens=8,
                                                 temperature=0, extra_body={"ignore_eos": True})
        else:
            answer = client.chat.completions.create(model="tools", messages=history, tools=TOOLS, max_tokens=8,
                                                    temperature=0, extra_body={"ignore_eos": True})
            reason, content = answer.choices[0].finish_reason, answer.choices[0].message.content
            assert answer.usage.prompt_tokens > first.usage.prompt_tokens + 20
        assert reason in ("stop", "length", "tool_calls") and (content or reason == "tool_calls")
    # the call and the result are in the prompt, as the template writes them
    plan = ChatCompletionRequest(model="tools", messages=history, tools=TOOLS).to_engine(
        structured_server.engine("tools").tokenizer.chat_template)
    prompt = render_chat(structured_server.engine("tools").tokenizer, plan.prompt)
    assert '<tool_response>\n{"forecast": "sunny, 21 C"}\n</tool_response>' in prompt
    assert f'"name": "{call.function.name}", "arguments": {call.function.arguments}' in prompt
    assert '"name": "get_weather"' in prompt.split("</tools>")[0]


CALL = '<tool_call>\\n\\{"name": "get_time", "arguments": \\{"zone": "CET"\\}\\}\\n</tool_call>'


@pytest.mark.parametrize("stream", [False, True])
def test_auto_parses_a_call_the_model_writes(client, stream):
    # the regex makes the random model write text and then a call, as a real model would in auto mode
    body = dict(messages=USER, tools=TOOLS, max_tokens=120, extra_body={"structured_outputs": {
        "regex": "Let me check\\. " + CALL}})
    if stream:
        content, calls, reason, _ = streamed(client, **body)
        assert list(calls) == [0] and calls[0][1:] == ("get_time", '{"zone": "CET"}')
    else:
        choice = client.chat.completions.create(model="tools", **body).choices[0]
        content, reason = choice.message.content, choice.finish_reason
        assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [
            ("get_time", '{"zone": "CET"}')]
    assert content.strip() == "Let me check." and reason == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
def test_auto_with_a_call_that_does_not_parse_is_plain_content(client, stream):
    broken = '<tool_call>\\n\\{"name": get_time\\n</tool_call> and more'
    body = dict(messages=USER, tools=TOOLS, max_tokens=120, extra_body={"structured_outputs": {"regex": broken}})
    expected = '<tool_call>\n{"name": get_time\n</tool_call> and more'
    if stream:
        content, calls, reason, _ = streamed(client, **body)
        assert not calls
    else:
        choice = client.chat.completions.create(model="tools", **body).choices[0]
        content, reason = choice.message.content, choice.finish_reason
        assert not choice.message.tool_calls
    assert content == expected and reason == "stop"


def test_auto_and_none_on_a_random_model_never_fail(client):
    for choice in ("auto", "none"):
        for seed in range(3):
            reply = client.chat.completions.create(model="tools", messages=USER, tools=TOOLS, tool_choice=choice,
                                                   max_tokens=30, temperature=1.0, seed=seed)
            assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_tools_on_a_template_without_tools_go_in_a_system_message(tmp_path):
    """The tiny ChatML template knows no tools: they are written into the system message and the reply is
    parsed the same way."""
    from server_helpers import ThreadServer, serve_settings
    from structured_models import make_templated_model
    from tiny_models import CHAT_TEMPLATE

    from llmchat.engine.serve import ModelSpec
    model = make_templated_model(tmp_path / "plain", CHAT_TEMPLATE)
    with ThreadServer([ModelSpec("plain", model)], serve_settings()) as server:
        plain = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
        reply = plain.chat.completions.create(model="plain", messages=USER, tools=TOOLS, tool_choice="required",
                                              parallel_tool_calls=False, max_tokens=120, temperature=0)
        assert_valid_calls(reply.choices[0].message.tool_calls)
        call = reply.choices[0].message.tool_calls[0]
        history = [*USER, reply.choices[0].message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
        plan = ChatCompletionRequest(messages=history, tools=TOOLS).to_engine(
            server.engine().tokenizer.chat_template)
        prompt = render_chat(server.engine().tokenizer, plan.prompt)
        assert "<tools>" in prompt and "<tool_response>\nsunny\n</tool_response>" in prompt
        assert call.function.arguments in prompt


@pytest.mark.parametrize("stream", [False, True])
def test_llama3_json_calls(client, stream):
    """A template in Llama 3's form: the reply is the call's JSON itself, with "parameters"."""
    required = dict(messages=USER, tools=TOOLS, tool_choice="required", max_tokens=120, temperature=1.0, seed=4)
    written = dict(messages=USER, tools=TOOLS, max_tokens=120, extra_body={"structured_outputs": {
        "regex": '\\{"name": "get_time", "parameters": \\{"zone": "UTC"\\}\\}'}})
    plain = dict(messages=USER, tools=TOOLS, max_tokens=120, extra_body={"structured_outputs": {
        "regex": "No call \\{needed\\}"}})
    if stream:
        _, calls, reason, _ = streamed(client, model="llama3-tools", **required)
        assert reason == "tool_calls" and calls[0][1] in SCHEMAS
        jsonschema.validate(json.loads(calls[0][2]), SCHEMAS[calls[0][1]])
        _, calls, reason, _ = streamed(client, model="llama3-tools", **written)
        assert calls[0][1:] == ("get_time", '{"zone": "UTC"}') and reason == "tool_calls"
        content, calls, reason, _ = streamed(client, model="llama3-tools", **plain)
        assert (content, calls, reason) == ("No call {needed}", {}, "stop")
        return
    reply = client.chat.completions.create(model="llama3-tools", **required)
    assert reply.choices[0].finish_reason == "tool_calls"
    assert_valid_calls(reply.choices[0].message.tool_calls)
    reply = client.chat.completions.create(model="llama3-tools", **written)
    assert reply.choices[0].message.tool_calls[0].function.arguments == '{"zone": "UTC"}'
    reply = client.chat.completions.create(model="llama3-tools", **plain)
    assert reply.choices[0].message.content == "No call {needed}" and not reply.choices[0].message.tool_calls


def test_past_calls_reach_a_template_without_tools_even_with_tool_choice_none(structured_server):
    from tiny_models import CHAT_TEMPLATE, make_tokenizer
    tokenizer = make_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    history = [*USER, {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_time", "arguments": '{"zone": "UTC"}'}}]}, {"role": "tool", "tool_call_id": "call_1",
                                                                 "content": "12:00"}]
    for body in ({"tools": TOOLS, "tool_choice": "none"}, {}):
        plan = ChatCompletionRequest(messages=history, **body).to_engine(CHAT_TEMPLATE)
        prompt = render_chat(tokenizer, plan.prompt)
        assert '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>' in prompt
        assert "<tool_response>\n12:00\n</tool_response>" in prompt and "<tools>" not in prompt


def test_a_tool_schema_the_library_refuses_is_a_400_naming_tools(structured_server):
    import httpx
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]
    for choice in ("required", {"type": "function", "function": {"name": "f"}}):
        r = httpx.post(f"{structured_server.base_url}/v1/chat/completions", timeout=60, json={
            "model": "tools", "messages": USER, "tools": bad, "tool_choice": choice})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tools", r.text
        assert "nonsense" in r.json()["error"]["message"]
    # auto does not compile the schema: the template shows it, the reply is free
    r = httpx.post(f"{structured_server.base_url}/v1/chat/completions", timeout=60, json={
        "model": "tools", "messages": USER, "tools": bad, "max_tokens": 4})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("shaped", [False, True])
def test_the_parser_piece_by_piece_says_what_the_whole_reply_says(shaped):
    from llmchat.engine.tool_calls import ToolCallParser
    reply = ('Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}\n</tool_call>'
             '\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>')
    whole = ToolCallParser(names=set(SCHEMAS), shaped=shaped)
    content = whole.feed(reply)[0] + whole.finish()[0]
    assert content == "Sure. \n" and [(c.name, c.arguments) for c in whole.calls] == [
        ("get_weather", '{"city": "Oslo", "days": 3}'), ("get_time", '{"zone": "UTC"}')]
    for size in (1, 3, 7):
        parser, text, calls, pieces = ToolCallParser(names=set(SCHEMAS), shaped=shaped), "", {}, 0
        for i in range(0, len(reply) + size, size):
            piece, deltas = parser.feed(reply[i:i + size]) if i < len(reply) else parser.finish()
            text += piece
            for d in deltas:
                pieces += 1
                name, arguments = calls.get(d.index, (None, ""))
                calls[d.index] = (d.call.name if d.call else name, arguments + d.arguments)
        assert text == content and list(calls.values()) == [(c.name, c.arguments) for c in whole.calls]
        if shaped and size == 1:
            assert pieces > 10     # the arguments went out as they came


def test_a_read_stream_keeps_logprobs_and_usage(client):
    chunks = list(client.chat.completions.create(
        model="tools", messages=USER, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=120,
        temperature=0, stream=True, logprobs=True, top_logprobs=2, stream_options={"include_usage": True}))
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert chunks[-1].choices == [] and len(entries) == chunks[-1].usage.completion_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
