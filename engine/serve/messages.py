"""Chat messages as requests carry them (one model per role, so the schema says which need content) and as chat
templates take them (transformers' conventions: tool calls with their arguments as an object, reasoning under
`reasoning_content`)."""
from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field

from .body import Body


NonBlank = Annotated[str, Field(pattern=r"\S", description="text with at least one non-space character")]


class ContentPart(Body):
    type: Literal["text"]
    text: str


class NonBlankPart(ContentPart):
    text: NonBlank


NonBlankParts = Annotated[list[NonBlankPart], Field(min_length=1)]


class CalledFunction(Body):
    name: str
    arguments: str | dict = Field("{}", description="the arguments object, as JSON text (OpenAI) or an object")


class PastToolCall(Body):
    id: str | None = None
    type: Literal["function"] = "function"
    function: CalledFunction


class InstructionMessage(Body):
    role: Literal["system", "developer"]
    content: NonBlank | NonBlankParts
    name: str | None = None


class UserMessage(Body):
    role: Literal["user"]
    content: NonBlank | NonBlankParts
    name: str | None = None


class AssistantMessage(Body):
    role: Literal["assistant"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[PastToolCall] | None = None
    reasoning_content: str | None = Field(None, description="the reasoning before the answer (or `reasoning`)")
    reasoning: str | None = None


class ToolMessage(Body):
    role: Literal["tool"]
    content: str | list[ContentPart] | None = None
    tool_call_id: str | None = None
    name: str | None = None


ChatMessage = Annotated[InstructionMessage | UserMessage | AssistantMessage | ToolMessage,
                        Field(discriminator="role")]


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(part.text for part in content)
    return content or ""


def template_message(m) -> dict:
    """A chat message as chat templates take it (transformers' conventions): role, text content, and for the
    assistant its tool calls (arguments as an object) and reasoning."""
    role = "system" if m.role == "developer" else m.role
    out: dict = {"role": role, "content": _text(m.content)}
    if m.name:
        out["name"] = m.name
    if isinstance(m, AssistantMessage):
        if m.tool_calls:
            out["tool_calls"] = [_past_call(c) for c in m.tool_calls]
        reasoning = m.reasoning_content if m.reasoning_content is not None else m.reasoning
        if reasoning:
            out["reasoning_content"] = reasoning
    if isinstance(m, ToolMessage) and m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def has_tool_turns(messages: list[dict]) -> bool:
    return any(m["role"] == "tool" or m.get("tool_calls") for m in messages)


def _past_call(call: PastToolCall) -> dict:
    arguments = call.function.arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass   # kept as the text it is: the template writes it out
    out = {"type": "function", "function": {"name": call.function.name, "arguments": arguments}}
    if call.id is not None:
        out["id"] = call.id
    return out
