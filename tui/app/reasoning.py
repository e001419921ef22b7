"""A reply's reasoning apart from its answer as the chat shows it (collapsed), on a saved reply or one still
streaming. The splitting rule is the engine's (engine/reasoning.py); the chat adds what it cannot know from the
reply alone: a reply that closes </think> without opening it had its <think> opened by the prompt's template,
and a reply that so far is only the start of "<think>" shows nothing yet."""
from __future__ import annotations

from llmchat.engine.reasoning import CLOSE, OPEN, split_reasoning as split_whole_reply


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning or None, answer)."""
    stripped = text.lstrip()
    if stripped and OPEN.startswith(stripped):       # "<thi" while streaming: nothing to show yet
        return "", ""
    opened_by_the_prompt = not stripped.startswith(OPEN) and CLOSE in text
    return split_whole_reply(text, opened_by_the_prompt)
