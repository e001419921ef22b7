"""A reply's reasoning (between <think> and </think>, as SmolLM3 or Qwen3 write it) apart from its answer, so the
chat can show the reasoning collapsed. Works on a reply still streaming (an unclosed <think> is all reasoning)."""
from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning or None, answer). A template that opens <think> in the prompt leaves only the </think>."""
    stripped = text.lstrip()
    if OPEN.startswith(stripped) and stripped:       # "<thi" while streaming: nothing to show yet
        return "", ""
    if stripped.startswith(OPEN):
        inner = stripped[len(OPEN):]
        reasoning, closed, answer = inner.partition(CLOSE)
        return reasoning.strip(), answer.lstrip() if closed else ""
    if CLOSE in text:
        reasoning, _, answer = text.partition(CLOSE)
        return reasoning.strip(), answer.lstrip()
    return None, text
