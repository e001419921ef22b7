"""Textual's Select, safe while it is taken down: quitting right after a dialog opens (F3) removes the Select's
own children before its Mount is handled, and Textual's Select._on_mount then raises NoMatches (looking up its
overlay or its label to show the value)."""
from __future__ import annotations

from textual.css.query import NoMatches
from textual.widget import Widget
from textual.widgets import Select


class MountSafeSelect(Select):
    def _on_mount(self, event) -> None:
        event.prevent_default()     # the handlers below run here, in the order Textual would run them
        try:
            Select._on_mount(self, event)
        except NoMatches:   # its children are gone: the widget is being removed, there is nothing to show
            return
        Widget._on_mount(self, event)
