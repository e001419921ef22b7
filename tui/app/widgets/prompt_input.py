"""Multi-line message input: Enter sends, Ctrl+J (or Shift+Enter) adds a line, Up/Down walk the history."""
from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import TextArea


class PromptInput(TextArea):
    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, **kwargs) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)
        self.sent_history: list[str] = []
        self._history_index: int | None = None   # None = editing a new draft
        self._draft = ""

    def remember(self, text: str) -> None:
        if text and (not self.sent_history or self.sent_history[-1] != text):
            self.sent_history.append(text)
        self._history_index = None

    def _show(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text.strip()
            if text:
                self.post_message(self.Submitted(text))
            return
        if event.key in ("ctrl+j", "shift+enter"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        if event.key == "up" and self.cursor_at_first_line and self.sent_history:
            event.stop()
            event.prevent_default()
            if self._history_index is None:
                self._draft = self.text
                self._history_index = len(self.sent_history)
            self._history_index = max(0, self._history_index - 1)
            self._show(self.sent_history[self._history_index])
            return
        if event.key == "down" and self.cursor_at_last_line and self._history_index is not None:
            event.stop()
            event.prevent_default()
            self._history_index += 1
            if self._history_index >= len(self.sent_history):
                self._history_index = None
                self._show(self._draft)
            else:
                self._show(self.sent_history[self._history_index])
            return
        await super()._on_key(event)
