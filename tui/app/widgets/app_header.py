"""Textual's Header, safe while it is taken down: quitting right after a screen opens (Compare) changes the
title while the Header's children are already gone, and Textual's own watcher then raises NoMatches."""
from __future__ import annotations

from textual.css.query import NoMatches
from textual.widgets import Header
from textual.widgets._header import HeaderTitle


class AppHeader(Header):
    def _on_mount(self, event) -> None:
        event.prevent_default()     # Textual's Header._on_mount (the raising watcher) does not run
        async def set_title() -> None:
            try:
                self.query_one(HeaderTitle).update(self.format_title())
            except NoMatches:       # being removed: there is no title to update
                pass
            except Exception as exc:    # NoScreen, as Textual's own watcher allows
                if type(exc).__name__ != "NoScreen":
                    raise

        for owner in (self.app, self.screen):
            self.watch(owner, "title", set_title)
            self.watch(owner, "sub_title", set_title)
