"""Tool calls out of a reply's text, as it streams: Hermes/Qwen `<tool_call>{"name": ..., "arguments": ...}</tool_call>`
(Qwen2.5, Qwen3, SmolLM3, Hermes) and Llama 3.x's bare `{"name": ..., "parameters": ...}`.

Text outside calls stays content. Calls leave as OpenAI streams them: a delta with the call's id, type and name,
then its arguments. A call that a grammar shapes (tool_choice required or named: it will parse) streams its
arguments as they come; any other call is held until it is complete, and if it does not parse it goes out as
the plain text it was (never an error): the model wrote something that only looked like a call.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

from .reasoning import held_back

HERMES, LLAMA3 = "hermes", "llama3"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
# how a call's JSON starts (the grammar writes it so): the arguments stream from the end of this match (once
# their first character shows, so the whitespace before them is never theirs)
CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\S)')
# what follows a grammar-shaped call's arguments: the outer object's end and the closing tag
CALL_TAIL = "}\n" + CALL_CLOSE


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ToolCall:
    name: str
    arguments: str          # a JSON object's text, as OpenAI sends it
    id: str = field(default_factory=new_call_id)

    def as_message(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class CallDelta:
    """A piece of a streamed call: the first one carries the call (its id and name), the rest argument text."""
    index: int
    call: ToolCall | None
    arguments: str = ""


def parse_call(text: str, names: set[str] | None = None) -> ToolCall | None:
    """One call's JSON -> ToolCall; None if it is not a call (bad JSON, no name, an unknown function...). The
    arguments keep the text the model wrote when they are an object, so a streamed call says the same."""
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
        except (json.JSONDecodeError, RecursionError):
            return None
        if isinstance(arguments, dict):
            return ToolCall(value["name"], json.dumps(arguments, ensure_ascii=False))
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], _written_arguments(text) or json.dumps(arguments, ensure_ascii=False))


def _written_arguments(text: str) -> str | None:
    head = CALL_HEAD.match(text)
    if head is None:
        return None
    try:
        value, end = json.JSONDecoder().raw_decode(text, head.end())
    except (json.JSONDecodeError, RecursionError):
        return None
    return text[head.end():end] if isinstance(value, dict) else None


class ToolCallParser:
    """feed(text) -> (content, call deltas); finish() -> the rest. `calls` lists every complete call so far.
    `shaped`: a grammar writes the calls (tool_choice required or named), so they parse: stream their arguments."""

    def __init__(self, style: str = HERMES, names: set[str] | None = None, parallel: bool = True,
                 shaped: bool = False) -> None:
        self.style, self.names, self.parallel, self.shaped = style, names, parallel, shaped
        self.calls: list[ToolCall] = []
        self._pending = ""
        self._in_call = False
        self._streaming: ToolCall | None = None    # a shaped call whose arguments are streaming
        self._sent = 0                             # characters of its arguments out
        self._arguments_at = 0                     # where they start in the call's body
        self._seen_text = False     # Llama 3: a call is the whole reply, so it must start it
        self._plain = False         # Llama 3: the reply did not start with "{": all content

    def feed(self, text: str) -> tuple[str, list[CallDelta]]:
        if self.style == LLAMA3:
            return self._feed_llama3(text)
        self._pending += text
        content, deltas = "", []
        while self._pending:
            if not self._in_call:
                before, opened, after = self._pending.partition(CALL_OPEN)
                if opened:
                    content += before
                    self._pending, self._in_call = after, True
                    continue
                keep = held_back(self._pending, CALL_OPEN)
                content += self._pending[:len(self._pending) - keep]
                self._pending = self._pending[len(self._pending) - keep:]
                break
            body, closed, after = self._pending.partition(CALL_CLOSE)
            if not closed:
                if self.shaped:
                    deltas += self._stream_arguments(body)
                break
            self._pending, self._in_call = after, False
            content += self._take(body, deltas)
        return content, deltas

    def finish(self) -> tuple[str, list[CallDelta]]:
        """The end of the reply: an unclosed call still counts if its JSON is whole (a grammar or EOS ended it)."""
        rest, self._pending = self._pending, ""
        deltas: list[CallDelta] = []
        if self.style == LLAMA3:
            if self._plain:
                return rest, []
            return (self._take(rest, deltas) if rest.strip() else rest), deltas
        if not self._in_call:
            return rest, []
        self._in_call = False
        return self._take(rest, deltas), deltas

    def _stream_arguments(self, body: str) -> list[CallDelta]:
        """A shaped call's head once its name is written, then its arguments as far as they surely go."""
        deltas = []
        index = len(self.calls)
        if self._streaming is None:
            head = CALL_HEAD.match(body)
            if head is None or (not self.parallel and self.calls):
                return []
            self._streaming, self._sent, self._arguments_at = ToolCall(head.group(1), ""), 0, head.end()
            deltas.append(CallDelta(index, self._streaming))
        arguments = body[self._arguments_at:]
        sure = len(arguments) - held_back(arguments, CALL_TAIL)
        if sure > self._sent:
            deltas.append(CallDelta(index, None, arguments[self._sent:sure]))
            self._sent = sure
        return deltas

    def _take(self, body: str, deltas: list[CallDelta]) -> str:
        """A call's whole body -> its deltas (returns "") or, if it does not parse, its text as content."""
        streaming, self._streaming = self._streaming, None
        call = parse_call(body.strip(), self.names)
        if call is None:
            return body if self.style == LLAMA3 else CALL_OPEN + body + CALL_CLOSE
        if not self.parallel and self.calls:
            return ""
        index = len(self.calls)
        if streaming is not None:   # its head and the arguments so far are out: the rest follows
            call.id = streaming.id
            rest = call.arguments[self._sent:]
        else:
            deltas.append(CallDelta(index, call))
            rest = call.arguments
        if rest:
            deltas.append(CallDelta(index, None, rest))
        self.calls.append(call)
        return ""

    def _feed_llama3(self, text: str) -> tuple[str, list[CallDelta]]:
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
