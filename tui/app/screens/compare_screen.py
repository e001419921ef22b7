"""Compare: one prompt to 2-4 models or model+adapter pairs with the same seed, replies streaming in columns."""
from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import aclosing
from pathlib import Path

from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Label, Markdown, SelectionList, Static, TextArea

from llmchat.engine.sampling_params import SamplingParams

from ..chat_state import ReplyStats
from ..generation import stats_from
from ..widgets.app_header import AppHeader

FRAME_INTERVAL = 1 / 30


class CompareColumn(Vertical):
    def __init__(self, model: str, adapter: str | None) -> None:
        super().__init__(classes="compare-column")
        self.model, self.adapter = model, adapter
        self.text, self.shown, self.status = "", None, "waiting…"
        self.retired = False   # a new run is replacing this column

    def compose(self):
        yield Label(Path(self.model).name + (f" + {self.adapter}" if self.adapter else ""), classes="compare-title")
        with VerticalScroll():
            yield Markdown("", classes="compare-body")
        yield Static("", classes="compare-stats")

    async def sync(self) -> None:
        """Show the latest text and stats. Skipped while not composed yet, or while a new run removes it (the
        frame timer can reach a column whose children are half gone)."""
        bodies, stats = self.query(".compare-body"), self.query(".compare-stats")
        if self.retired or not bodies or not stats:
            return
        body, stat = bodies.first(Markdown), stats.first(Static)
        if self.text != self.shown:
            self.shown = self.text
            await body.update(self.text)
        stat.update(self.status)


def parse_target(value: str) -> tuple[str, str | None]:
    model, _, adapter = value.partition("\t")
    return model, adapter or None


class CompareScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="compare.back"),
                Binding("ctrl+r", "run", "Run", id="compare.run")]

    def __init__(self, models: list[str], adapters: list[str]) -> None:
        super().__init__()
        self.models, self.adapters = models, adapters

    def compose(self):
        yield AppHeader()
        with Horizontal(id="compare-setup"):
            with Vertical(id="compare-prompt-box"):
                yield Label("Prompt (ctrl+r runs)")
                yield TextArea(id="compare-prompt", soft_wrap=True)
                with Horizontal(classes="form-row"):
                    yield Label("Seed", classes="form-label")
                    yield Input("0", id="compare-seed")
                    yield Label("Max tokens", classes="form-label")
                    yield Input("128", id="compare-max-tokens")
            options = [(Path(m).name, m) for m in self.models]
            options += [(f"{Path(m).name} + {a}", f"{m}\t{a}") for m in self.models for a in self.adapters]
            yield SelectionList(*options, id="compare-targets")
        yield Horizontal(id="compare-columns")
        yield Footer()

    def on_mount(self) -> None:
        targets, prompt = self.query("#compare-targets"), self.query("#compare-prompt")
        if not targets or not prompt:       # quit right after F6: the screen is taken down while it mounts
            return
        targets.first(SelectionList).border_title = "Pick 2-4 (space)"
        self.set_interval(FRAME_INTERVAL, self.frame_tick)
        prompt.first(TextArea).focus()      # the first key starts the prompt

    async def frame_tick(self) -> None:
        # shielded from its timer's cancel at shutdown: a Markdown update half-way would have its removed
        # blocks' tasks cancelled (MainScreen.sync_chats)
        await asyncio.shield(self.sync_columns())

    async def sync_columns(self) -> None:
        for column in self.query(CompareColumn):
            if not self.app.is_running:
                return
            await column.sync()

    async def action_run(self) -> None:
        prompt = self.query_one("#compare-prompt", TextArea).text.strip()
        targets = [parse_target(v) for v in self.query_one("#compare-targets", SelectionList).selected]
        try:
            seed = int(self.query_one("#compare-seed", Input).value or 0)
            max_tokens = int(self.query_one("#compare-max-tokens", Input).value or 128)
        except ValueError:
            self.notify("Seed and max tokens must be integers", severity="error")
            return
        if not prompt or not 2 <= len(targets) <= 4:
            self.notify("Type a prompt and pick 2 to 4 models or adapters", severity="warning")
            return
        await self.run_comparison(prompt, targets, seed, max_tokens)

    async def run_comparison(self, prompt: str, targets: list[tuple[str, str | None]], seed: int,
                             max_tokens: int) -> None:
        self.workers.cancel_group(self, "compare")
        columns = self.query_one("#compare-columns", Horizontal)
        for old in columns.query(CompareColumn):
            old.retired = True
        await columns.remove_children()
        new = [CompareColumn(model, adapter) for model, adapter in targets]
        await columns.mount_all(new)
        for column in new:
            self.run_worker(self.stream_column(column, prompt, seed, max_tokens), group="compare",
                            exit_on_error=False)

    async def stream_column(self, column: CompareColumn, prompt: str, seed: int, max_tokens: int) -> None:
        try:
            column.status = "loading model…"
            model = await self.app.engines.get(column.model)
            await self.app.engines.ensure_adapter(model, column.adapter)
            column.status = "waiting for the first token…"
            params = SamplingParams(max_tokens=max_tokens, seed=seed)
            started, first, generated, metrics = time.monotonic(), None, 0, None
            stream = model.engine.generate([{"role": "user", "content": prompt}], params, adapter=column.adapter,
                                           request_id=f"compare-{uuid.uuid4().hex[:8]}")
            async with aclosing(stream):
                async for delta in stream:
                    first = first or (time.monotonic() if delta.token_ids else None)
                    generated += len(delta.token_ids)
                    metrics = delta.metrics or metrics
                    column.text += delta.text
                    stats: ReplyStats = stats_from(metrics, started, first, generated)
                    column.status = stats.line() + ("" if delta.finished else " · generating…")
        except (ValueError, FileNotFoundError, RuntimeError, OSError) as exc:
            column.status = f"error: {exc}"
