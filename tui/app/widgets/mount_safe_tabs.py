"""Textual's TabbedContent, safe while it is taken down: quitting right after a screen with tabs opens (F4)
removes the tab row's Tab widgets before the row's Mount is handled, and Textual's Tabs._on_mount then raises
ValueError ("No Tab with id ...") making the initial tab active."""
from __future__ import annotations

from textual.widgets import TabbedContent
from textual.widgets._tabbed_content import ContentTabs


class MountSafeTabbedContent(TabbedContent):
    def compose(self):
        for widget in super().compose():
            # TabbedContent builds its tab row itself and finds it by exact type (no subclass): give that instance
            # a validator that Textual's reactive runs before Tabs.validate_active
            if type(widget) is ContentTabs:
                widget._validate_active = _nothing_active_without_tabs(widget)
            yield widget


def _nothing_active_without_tabs(tabs: ContentTabs):
    def validate(active: str) -> str:
        # no Tab left at all: the row is being removed, there is nothing to make active (an unknown id among
        # existing tabs still raises in Tabs.validate_active)
        return active if tabs.query("#tabs-list > Tab") else ""
    return validate
