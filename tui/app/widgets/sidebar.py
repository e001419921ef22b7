"""Sessions sidebar: one row per session with its model, adapter and whether it is generating."""
from __future__ import annotations

from pathlib import Path

from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Label, ListItem, ListView

from ..chat_state import ChatSession


def short_model(model: str) -> str:
    return Path(model).name if model else "no model"


class SessionItem(ListItem):
    def __init__(self, session: ChatSession) -> None:
        super().__init__(id=f"session-{session.id}")
        self.session = session
        self.generating = False

    def compose(self):
        yield Label(self.session.title, classes="session-title")
        yield Label(self._detail(), classes="session-detail")

    def _detail(self) -> str:
        s = self.session.settings
        detail = short_model(s.model) + (f" + {s.adapter}" if s.adapter else "")
        return ("● " if self.generating else "") + detail

    def refresh_labels(self, generating: bool) -> None:
        self.generating = generating
        self.set_class(generating, "-generating")
        if self.is_mounted:
            self.query_one(".session-title", Label).update(self.session.title)
            self.query_one(".session-detail", Label).update(self._detail())


class Sidebar(Vertical):
    class Selected(Message):
        def __init__(self, session_id: int) -> None:
            super().__init__()
            self.session_id = session_id

    def compose(self):
        yield Label("Sessions", classes="panel-title")
        yield ListView(id="session-list")

    @property
    def list_view(self) -> ListView:
        return self.query_one("#session-list", ListView)

    def item(self, session_id: int) -> SessionItem | None:
        found = self.list_view.query(f"#session-{session_id}")
        return found.first(SessionItem) if found else None

    async def add(self, session: ChatSession) -> None:
        await self.list_view.append(SessionItem(session))

    async def remove_session(self, session_id: int) -> None:
        item = self.item(session_id)
        if item is not None:
            await item.remove()

    def select(self, session_id: int) -> None:
        for index, child in enumerate(self.list_view.children):
            if isinstance(child, SessionItem) and child.session.id == session_id:
                if self.list_view.index != index:
                    # A programmatic move must not echo back as a user selection later.
                    with self.list_view.prevent(ListView.Highlighted):
                        self.list_view.index = index
                return

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        if isinstance(event.item, SessionItem):
            self.post_message(self.Selected(event.item.session.id))

    def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        event.stop()
        if isinstance(event.item, SessionItem):
            self.post_message(self.Selected(event.item.session.id))
