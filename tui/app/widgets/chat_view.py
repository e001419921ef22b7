"""The conversation of the selected session; follows the growing reply once per frame."""
from __future__ import annotations

import asyncio
from pathlib import Path

from textual.containers import VerticalScroll
from textual.widgets import Static

from ..chat_state import ChatSession
from .message_view import MessageView


class ChatView(VerticalScroll):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.session: ChatSession | None = None
        self.lock = asyncio.Lock()      # show() and sync() both await mounts: never interleave them

    def label_for(self, message) -> str:
        if message.role == "user":
            return "You"
        who = Path(message.model).name if message.model else "Assistant"
        return who + (f" + {message.adapter}" if message.adapter else "")

    async def show(self, session: ChatSession | None) -> None:
        async with self.lock:
            await self._show(session)

    async def _show(self, session: ChatSession | None) -> None:
        self.session = session
        await self.remove_children()
        if not self.app.is_running:     # the app closed meanwhile: a widget mounted now would never start
            return
        if session is None:
            await self.mount(Static("No session. Press ctrl+n to start one.", classes="empty-hint"))
            return
        if not session.messages:
            hint = f"New chat with {Path(session.settings.model).name or 'no model'}. Type below and press Enter."
            await self.mount(Static(hint, classes="empty-hint"))
        await self.mount_all([MessageView(m, self.label_for(m)) for m in session.messages])
        # Anchored: stays at the latest message (and a finished reply's stats line) while the Markdown bodies
        # lay out and grow, until the user scrolls up.
        self.anchor()
        self.scroll_end(animate=False)

    async def sync(self) -> None:
        """Mount views for new messages and stream new text into existing ones."""
        if self.session is None or self.lock.locked():
            return
        async with self.lock:
            await self._sync()

    async def _sync(self) -> None:
        views = list(self.query(MessageView))
        messages = self.session.messages
        if len(views) > len(messages) or any(v.message is not m for v, m in zip(views, messages)):
            await self._show(self.session)       # messages were removed or replaced: rebuild
            return
        at_end = self.scroll_offset.y >= self.max_scroll_y - 1
        changed = len(views) < len(messages)
        if changed:                              # appended: mount only the new ones
            await self.query(".empty-hint").remove()
            if not self.app.is_running:
                return
            new = [MessageView(m, self.label_for(m)) for m in messages[len(views):]]
            await self.mount_all(new)
            views += new
        for view in views[-2:]:           # only the newest messages change while streaming
            if not self.app.is_running:
                return
            changed |= await view.sync()
        if changed and at_end:
            self.anchor()
            self.scroll_end(animate=False)

    def message_views(self) -> list[MessageView]:
        return list(self.query(MessageView))
