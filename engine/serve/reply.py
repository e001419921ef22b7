"""A chat reply read as it streams: reasoning apart from the answer (engine/reasoning.py), then tool calls out of
the answer (engine/tool_calls.py). The same reader serves whole and streamed replies, so both say the same."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..reasoning import ReasoningSplitter
from ..tool_calls import CallDelta, ToolCall, ToolCallParser


@dataclass
class ReplyPiece:
    reasoning: str = ""
    content: str = ""
    call_deltas: list[CallDelta] = field(default_factory=list)

    def __add__(self, other: "ReplyPiece") -> "ReplyPiece":
        return ReplyPiece(self.reasoning + other.reasoning, self.content + other.content,
                          self.call_deltas + other.call_deltas)


class ReplyReader:
    def __init__(self, reasoning: ReasoningSplitter | None, tools: ToolCallParser | None) -> None:
        self.reasoning, self.tools = reasoning, tools

    @property
    def calls(self) -> list[ToolCall]:
        """Every complete call so far."""
        return self.tools.calls if self.tools is not None else []

    def feed(self, text: str) -> ReplyPiece:
        reasoning, content = self.reasoning.feed(text) if self.reasoning is not None else ("", text)
        return self._piece(reasoning, content, final=False)

    def finish(self) -> ReplyPiece:
        reasoning, content = self.reasoning.finish() if self.reasoning is not None else ("", "")
        return self._piece(reasoning, content, final=True)

    def _piece(self, reasoning: str, content: str, final: bool) -> ReplyPiece:
        if self.tools is None:
            return ReplyPiece(reasoning, content)
        content, deltas = self.tools.feed(content) if content else ("", [])
        if final:
            more, more_deltas = self.tools.finish()
            content, deltas = content + more, deltas + more_deltas
        return ReplyPiece(reasoning, content, deltas)
