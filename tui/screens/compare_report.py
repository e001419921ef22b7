"""Browse a report written by `llmchat compare`: prompts down the side, one column per model."""
from __future__ import annotations

import json
from pathlib import Path

from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, ListItem, ListView, Markdown, Static


def load_report(path: str | Path) -> dict:
    """{"prompts": [{"prompt": str, "results": [{"model", "adapter", "text", "stats"}]}]} from the JSON report."""
    data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("prompts"), list):
        raise ValueError("not a compare report (no 'prompts' list)")
    return data


def stats_text(stats: dict | None) -> str:
    if not stats:
        return ""
    return " · ".join(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}" for k, v in stats.items())


class CompareReportScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="report.back")]

    def __init__(self, report: dict) -> None:
        super().__init__()
        self.report = report

    def compose(self):
        yield Header()
        with Horizontal():
            items = [ListItem(Label(str(p.get("prompt", ""))[:60])) for p in self.report["prompts"]]
            yield ListView(*items, id="report-prompts")
            yield Horizontal(id="report-columns")
        yield Footer()

    async def on_mount(self) -> None:
        if self.report["prompts"]:
            await self.show_prompt(0)

    async def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        if event.list_view.index is not None:
            await self.show_prompt(event.list_view.index)

    async def show_prompt(self, index: int) -> None:
        entry = self.report["prompts"][index]
        columns = self.query_one("#report-columns", Horizontal)
        await columns.remove_children()
        for result in entry.get("results", []):
            title = str(result.get("model", "?")) + (f" + {result['adapter']}" if result.get("adapter") else "")
            column = Vertical(Label(title, classes="compare-title"),
                              VerticalScroll(Markdown(str(result.get("text", "")))),
                              Static(stats_text(result.get("stats")), classes="compare-stats"),
                              classes="compare-column")
            await columns.mount(column)
