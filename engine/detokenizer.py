"""Incremental detokenization: text deltas that are always valid UTF-8 and never show a stop string.

Each new token is decoded inside a short window of recent tokens (decoding one token alone loses
leading spaces and splits multi-byte characters). While the window's text ends in U+FFFD a character
is still incomplete, so nothing is released. Released text is then held back by the longest suffix
that could still grow into a stop string; once a stop string appears, the text is cut before it.
"""
from __future__ import annotations

REPLACEMENT = "\ufffd"
PROMPT_CONTEXT = 5   # prompt tokens that seed the window, so the first output token decodes in context


class IncrementalDetokenizer:
    def __init__(self, tokenizer, prompt_token_ids: list[int], stop: list[str] | None = None,
                 skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.stop = [s for s in (stop or []) if s]
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = list(prompt_token_ids[-PROMPT_CONTEXT:])
        self.prefix_offset = 0               # window start
        self.read_offset = len(self.ids)     # tokens before this are already in self.text
        self.text = ""                       # decoded output text (complete characters only)
        self.emitted = 0                     # chars of self.text handed out
        self.stopped = False

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def add_token(self, token_id: int) -> str:
        """Feed one generated token; returns the newly showable text (may be "")."""
        if self.stopped:
            return ""
        self.ids.append(token_id)
        prefix_text = self._decode(self.ids[self.prefix_offset:self.read_offset])
        full_text = self._decode(self.ids[self.prefix_offset:])
        if len(full_text) > len(prefix_text) and not full_text.endswith(REPLACEMENT):
            self.text += full_text[len(prefix_text):]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
        return self._release()

    def flush(self) -> str:
        """At the end: release everything still held back (an incomplete character decodes as U+FFFD)."""
        if self.stopped:
            return ""
        if self.read_offset < len(self.ids):
            prefix_text = self._decode(self.ids[self.prefix_offset:self.read_offset])
            full_text = self._decode(self.ids[self.prefix_offset:])
            self.text += full_text[len(prefix_text):]
            self.read_offset = len(self.ids)
        out = self._release(final=True)
        return out

    def _release(self, final: bool = False) -> str:
        if self.stop:
            # A stop string can only start where it could overlap text not yet scanned.
            start = max(0, self.emitted - max(len(s) for s in self.stop) + 1)
            hits = [i for i in (self.text.find(s, start) for s in self.stop) if i != -1]
            if hits:
                self.text = self.text[:min(hits)]
                self.stopped = True
                return self._take(len(self.text))
        end = len(self.text) if final else len(self.text) - self._held_back()
        return self._take(end)

    def _take(self, end: int) -> str:
        if end <= self.emitted:
            return ""
        out = self.text[self.emitted:end]
        self.emitted = end
        return out

    def _held_back(self) -> int:
        """Length of the longest suffix of text that is a proper prefix of some stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.text)), best, -1):
                if self.text.endswith(s[:n]):
                    best = n
                    break
        return best
