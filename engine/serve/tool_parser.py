"""Tool calls out of a reply's text, as it streams: Hermes/Qwen `<tool_call>{"name": ..., "arguments": ...}</tool_call>`
(Qwen2.5, Qwen3, SmolLM3, Hermes) and Llama 3.x's bare `{"name": ..., "parameters": ...}`.

Text outside calls stays content. A call is held until it is complete, then leaves as OpenAI streams one: a
delta with its id, type and name, then its arguments. A call that does not parse goes out as the plain text it
was (never an error): the model wrote something that only looked like a call.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

HERMES, LLAMA3 = "hermes", "llama3"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ToolCall:
    name: str
    arguments: str          # a JSON object's text, as OpenAI sends it
    id: str = field(default_factory=new_call_id)

    def as_message(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def parse_call(text: str, names: set[str] | None = None) -> ToolCall | None:
    """One call's JSON -> ToolCall; None if it is not a call (bad JSON, no name, an unknown function...)."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    if names is not None and value["name"] not in names:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):     # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def _held_back(text: str, tag: str) -> int:
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ToolCallParser:
    """feed(text) -> (content, calls completed by it); finish() -> the rest. `calls` lists every call so far."""

    def __init__(self, style: str = HERMES, names: set[str] | None = None, parallel: bool = True) -> None:
        self.style, self.names, self.parallel = style, names, parallel
        self.calls: list[ToolCall] = []
        self._pending = ""
        self._in_call = False
        self._seen_text = False     # Llama 3: a call is the whole reply, so it must start it
        self._plain = False         # Llama 3: the reply did not start with "{": all content

    def feed(self, text: str) -> tuple[str, list[ToolCall]]:
        if self.style == LLAMA3:
            return self._feed_llama3(text)
        self._pending += text
        content, calls = "", []
        while self._pending:
            if not self._in_call:
                before, opened, after = self._pending.partition(CALL_OPEN)
                if opened:
                    content += before
                    self._pending, self._in_call = after, True
                    continue
                keep = _held_back(self._pending, CALL_OPEN)
                content += self._pending[:len(self._pending) - keep]
                self._pending = self._pending[len(self._pending) - keep:]
                break
            body, closed, after = self._pending.partition(CALL_CLOSE)
            if not closed:
                break
            self._pending, self._in_call = after, False
            content += self._take(body, calls)
        return content, calls

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The end of the reply: an unclosed call still counts if its JSON is whole (a grammar or EOS ended it)."""
        rest, self._pending = self._pending, ""
        if self.style == LLAMA3:
            if self._plain:
                return rest, []
            call = parse_call(rest.strip(), self.names) if rest.strip() else None
            if call is not None:
                self.calls.append(call)
                return "", [call]
            return rest, []
        if not self._in_call:
            return rest, []
        self._in_call = False
        calls: list[ToolCall] = []
        return self._take(rest, calls), calls

    def _take(self, body: str, calls: list[ToolCall]) -> str:
        """A call's body -> the call (returns "") or, if it does not parse, its text as content."""
        call = parse_call(body.strip(), self.names)
        if call is None:
            return CALL_OPEN + body + CALL_CLOSE
        if self.parallel or not self.calls:
            self.calls.append(call)
            calls.append(call)
        return ""

    def _feed_llama3(self, text: str) -> tuple[str, list[ToolCall]]:
        """A reply that starts with "{" may be a call: held to the end; anything else is content at once."""
        if not self._seen_text:
            self._pending += text
            stripped = self._pending.lstrip()
            if not stripped:
                return "", []
            self._seen_text = True
            if not stripped.startswith("{"):
                content, self._pending = self._pending, ""
                self._plain = True
                return content, []
            return "", []
        if self._plain:
            return text, []
        self._pending += text
        return "", []

