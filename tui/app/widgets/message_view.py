"""One chat message: role header, Markdown body (streamed while the reply grows) and the stats line."""
from __future__ import annotations

from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Collapsible, Label, Markdown, Static

from ..chat_state import ChatMessage
from ..code_blocks import code_blocks
from ..reasoning import split_reasoning
from ..tool_call_view import show_tool_calls


class MessageView(Vertical, can_focus=True):
    BINDINGS = [
        Binding("c", "copy_message", "Copy", id="message.copy"),
        Binding("y", "copy_code", "Copy code", id="message.copy_code"),
        Binding("e", "edit", "Edit & resend", id="message.edit"),
    ]

    class EditRequested(Message):
        def __init__(self, message: ChatMessage) -> None:
            super().__init__()
            self.message = message

    def __init__(self, message: ChatMessage, label: str) -> None:
        super().__init__(classes=f"message -{message.role}")
        self.message = message
        self.label = label
        self.shown = ""          # answer text already handed to the Markdown widget
        self.shown_reasoning = None
        self.shown_status = None
        self._stream = None

    def parts(self) -> tuple[str | None, str]:
        """(reasoning, answer): a reply's <think> text is shown apart, collapsed; a user's text is all answer."""
        if self.message.role != "assistant":
            return None, self.message.content
        reasoning, answer = split_reasoning(self.message.content)
        return reasoning, show_tool_calls(answer)

    def compose(self):
        reasoning, answer = self.parts()
        yield Label(self.label, classes="message-role")
        if self.message.role == "assistant":
            with Collapsible(title="Reasoning", collapsed=True, classes="message-reasoning") as box:
                box.display = reasoning is not None
                yield Static(reasoning or "", classes="reasoning-text", markup=False)
        yield Markdown(answer, classes="message-body")
        yield Static("", classes="message-stats")

    def on_mount(self) -> None:
        self.shown_reasoning, self.shown = self.parts()
        self.update_status()

    def update_reasoning(self, reasoning: str | None) -> bool:
        boxes = self.query(".message-reasoning")
        if reasoning == self.shown_reasoning or not boxes:
            return False
        self.shown_reasoning = reasoning
        boxes.first().display = reasoning is not None
        self.query_one(".reasoning-text", Static).update(reasoning or "")
        return True

    def status_text(self) -> str:
        m = self.message
        if m.role != "assistant":
            return ""
        parts = [m.stats.line()] if m.stats else []
        if m.finish_reason is None:
            parts.append("generating…" if m.content else "waiting for the first token…")
        elif m.finish_reason == "length":
            parts.append("cut off (max tokens): ctrl+o continues")
        elif m.finish_reason == "context":
            parts.append("context full: start a new chat to go on")
        elif m.finish_reason == "abort":
            parts.append("stopped: ctrl+o continues")
        elif m.finish_reason == "interrupted":
            parts.append("interrupted (the app closed while it streamed): ctrl+o continues")
        elif m.finish_reason == "error":
            parts.append(f"error: {m.error}" if m.error else "error")
        return " · ".join(parts)

    def update_status(self) -> None:
        status = self.status_text()
        stats = self.query(".message-stats")      # empty until composed
        if status != self.shown_status and stats:
            self.shown_status = status
            stats.first(Static).update(status)

    async def sync(self) -> bool:
        """Bring the widget up to the message text; True if anything changed. Called once per frame."""
        self.update_status()
        reasoning, text = self.parts()
        reasoning_changed = self.update_reasoning(reasoning)
        if text == self.shown or not self.query(".message-body"):
            if text == self.shown and self.message.finish_reason is not None:
                await self.end_stream()   # the reply is whole and shown
            return reasoning_changed
        body = self.query_one(".message-body", Markdown)
        if text.startswith(self.shown):
            if self._stream is None:
                self._stream = Markdown.get_stream(body)
            await self._stream.write(text[len(self.shown):])
        else:
            await body.update(text)
        self.shown = text
        return True

    async def end_stream(self) -> None:
        """Stop the Markdown stream of a reply that ended. Left running until the app closes, its stop would
        append into a Markdown being taken down, whose new children's tasks are then cancelled mid-prune
        (a CancelledError out of the app's shutdown)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.stop()

    async def on_unmount(self) -> None:
        await self.end_stream()

    def action_copy_message(self) -> None:
        self.app.copy_to_clipboard(self.message.content)
        self.notify("Message copied to the clipboard")

    def action_copy_code(self) -> None:
        blocks = code_blocks(self.message.content)
        if not blocks:
            self.notify("No code block in this message", severity="warning")
            return
        self.app.copy_to_clipboard(blocks[-1])
        more = f" (last of {len(blocks)})" if len(blocks) > 1 else ""
        self.notify(f"Code block copied{more}")

    def action_edit(self) -> None:
        if self.message.role != "user":
            self.notify("Only your own messages can be edited", severity="warning")
            return
        self.post_message(self.EditRequested(self.message))
