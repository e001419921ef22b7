"""A reply's reasoning (<think>...</think>, as Qwen3, SmolLM3 and DeepSeek-R1 distills write it) apart from its
answer, on a reply that is still streaming: each piece of text is split as it arrives, holding back only what
could still be the start of a tag.

A template that opens <think> itself (the prompt ends with it) starts the reply inside the reasoning.
"""
from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


def template_thinks(template) -> bool:
    """Whether a chat template (text, or a dict of named templates) knows the <think> convention."""
    if isinstance(template, dict):
        return any(template_thinks(t) for t in template.values())
    return isinstance(template, str) and CLOSE in template


def prompt_opens_reasoning(prompt_text: str) -> bool:
    return prompt_text.rstrip().endswith(OPEN)


def held_back(text: str, tag: str) -> int:
    """How many characters at the end of `text` could be the start of `tag` (a streamed reply holds them back
    until the next piece says whether the tag follows)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ReasoningSplitter:
    """feed(text) -> (reasoning, answer) of the new text; finish() flushes what was held back."""

    def __init__(self, in_reasoning: bool = False, unclosed_is_answer: bool = False) -> None:
        # "start": nothing but whitespace yet, a <think> may open; "reasoning"; "answer"
        self._state = "reasoning" if in_reasoning else "start"
        # a reply shaped by a grammar may never close the <think> its prompt opened: then it is all answer, so
        # the reasoning is held until its </think> shows
        self._unclosed_is_answer = unclosed_is_answer
        self._pending = ""
        self._answer_started = False
        self._reasoning_started = False

    def feed(self, text: str) -> tuple[str, str]:
        self._pending += text
        reasoning, answer = "", ""
        while self._pending:
            if self._state == "start":
                stripped = self._pending.lstrip()
                if stripped.startswith(OPEN):
                    self._pending, self._state = stripped[len(OPEN):].lstrip("\n"), "reasoning"
                elif OPEN.startswith(stripped):      # "", "<th": wait for more
                    break
                else:
                    self._state = "answer"
            elif self._state == "reasoning":
                before, closed, after = self._pending.partition(CLOSE)
                if closed:
                    reasoning += self._reasoning_text(before.rstrip())
                    self._pending, self._state = after.lstrip(), "answer"
                    continue
                if self._unclosed_is_answer:
                    break
                # held back: a tag's possible start, and trailing whitespace (the newline before </think>)
                keep = held_back(self._pending, CLOSE)
                text = self._pending[:len(self._pending) - keep]
                shown = text.rstrip()
                reasoning += self._reasoning_text(shown)
                self._pending = self._pending[len(shown):]
                break
            else:
                answer += self._pending
                self._pending = ""
        if answer and not self._answer_started:
            answer = answer.lstrip()          # the blank line a model writes after </think>
            self._answer_started = bool(answer)
        return reasoning, answer

    def _reasoning_text(self, text: str) -> str:
        """Reasoning without the blank start a model writes after <think>."""
        if not self._reasoning_started:
            text = text.lstrip()
            self._reasoning_started = bool(text)
        return text

    def finish(self) -> tuple[str, str]:
        """The text held back at the end of the reply: an unfinished tag is plain text of its part."""
        rest, self._pending = self._pending, ""
        if self._state == "reasoning":
            return ("", rest.strip()) if self._unclosed_is_answer else (self._reasoning_text(rest), "")
        return "", rest if self._answer_started else rest.lstrip()


def split_reasoning(text: str, in_reasoning: bool = False) -> tuple[str | None, str]:
    """A whole reply -> (reasoning or None when the reply did not reason, answer)."""
    splitter = ReasoningSplitter(in_reasoning)
    reasoning, answer = splitter.feed(text)
    more_reasoning, more_answer = splitter.finish()
    reasoning, answer = reasoning + more_reasoning, answer + more_answer
    opened = in_reasoning or text.lstrip().startswith(OPEN)
    return (reasoning.strip() if opened else None), answer
