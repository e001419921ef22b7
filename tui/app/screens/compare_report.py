"""Browse a `llmchat compare` report (schema llmchat.compare/1): prompts on the left, one column per model."""
from __future__ import annotations

from pathlib import Path

from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, ListItem, ListView, Markdown, Static

from llmchat.engine.compare.schema import load_report as load


def load_report(path: str | Path) -> dict:
    return load(Path(path).expanduser())


def result_stats(result: dict) -> str:
    parts = []
    if result.get("ttft") is not None:
        parts.append(f"TTFT {result['ttft'] * 1000:.0f} ms")
    if result.get("decode_tok_s") is not None:
        parts.append(f"{result['decode_tok_s']:.1f} tok/s")
    parts.append(f"{result.get('generated_tokens', 0)} tokens")
    parts.append(f"{result.get('cached_tokens', 0)}/{result.get('prompt_tokens', 0)} cached")
    if result.get("finish_reason") not in (None, "stop"):
        parts.append(str(result["finish_reason"]))
    for name, value in (result.get("scores") or {}).items():   # exact_match: yes · contains: no
        if value is not None:
            shown = ("yes" if value else "no") if isinstance(value, bool) else f"{value:.2f}" \
                if isinstance(value, float) else str(value)
            parts.append(f"{name.replace('_', ' ')}: {shown}")
    return " · ".join(parts)


class CompareReportScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="report.back")]

    def __init__(self, report: dict) -> None:
        super().__init__()
        self.report = report

    def compose(self):
        yield Header()
        with Horizontal():
            items = [ListItem(Label(str(p.get("display") or p.get("prompt") or "")[:60]))
                     for p in self.report["prompts"]]
            with Vertical(id="report-side"):
                yield Label("Prompts", classes="compare-title")
                yield ListView(*items, id="report-prompts")
            with Vertical():
                yield Static("", id="report-prompt")
                yield Horizontal(id="report-columns")
        yield Footer()

    def on_mount(self) -> None:
        run = self.report.get("run", {})
        self.sub_title = f"compare report · {len(self.report['models'])} models · {run.get('generated_at', '')}"

    async def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        if event.list_view.index is not None:
            await self.show_prompt(event.list_view.index)

    async def show_prompt(self, index: int) -> None:
        prompt = self.report["prompts"][index]
        self.query_one("#report-prompt", Static).update(
            f"[b]Prompt {index + 1}:[/b] {prompt.get('prompt') or prompt.get('display') or ''}")
        columns = self.query_one("#report-columns", Horizontal)
        await columns.remove_children()
        results = self.report["results"][index] or {}
        for model in self.report["models"]:
            result = results.get(model["id"])
            if result is None:
                body, stats = f"*{model.get('error') or 'not run'}*", model.get("status", "")
            else:
                body, stats = result.get("text") or f"*{result.get('error') or ''}*", result_stats(result)
            await columns.mount(Vertical(Label(model["id"], classes="compare-title"),
                                         VerticalScroll(Markdown(body)),
                                         Static(stats, classes="compare-stats"), classes="compare-column"))
