"""What the chat controller asks of the screen that shows it: the whole of the UI it knows. The controller
never reads a screen's attributes; it tells the screen what changed through these calls (MainScreen
implements them)."""
from __future__ import annotations

from typing import Any, Protocol

from .chat_state import ChatSession


class ChatUI(Protocol):
    @property
    def closing(self) -> bool:
        """The app is shutting down: nothing is left to show changes on."""

    def notify(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None) -> None: ...

    def run_worker(self, work: Any, *, group: str, exit_on_error: bool) -> Any:
        """Run a coroutine as a Textual worker (a reply streams in one); returns the worker."""

    # ---- sessions --------------------------------------------------------------------------------
    async def add_session(self, session: ChatSession) -> None: ...

    async def remove_session(self, session_id: int) -> None: ...

    def shows(self, session: ChatSession) -> bool:
        """The conversation on screen is this session's."""

    async def show_session(self, session: ChatSession) -> None: ...

    def show_title(self, title: str) -> None: ...

    def refresh_session_item(self, session_id: int) -> None:
        """The session's row (title, model, whether it is generating) changed."""

    def offer_chat_template(self, session: ChatSession, suggested: str | None) -> None:
        """The session's model has no chat template: ask how to send."""

    def load_model(self, model: str, draft: str | None = None) -> None:
        """Load a model (with a draft model) in the background, showing its progress."""

    # ---- the message input -----------------------------------------------------------------------
    def prompt_sent(self, text: str) -> None:
        """The input's text was sent: into its history, and the input empties."""

    def clear_prompt(self) -> None: ...

    def edit_in_prompt(self, text: str) -> None:
        """Put a message in the input to be edited, and focus it."""

    def restore_prompt(self, text: str) -> None:
        """A send taken back: its text returns to the input, unless something new is typed there."""

    def copy_to_clipboard(self, text: str) -> None: ...
