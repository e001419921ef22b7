"""Live engine telemetry: generation tok/s with a sparkline, prompt tok/s, KV usage, prefix hits, queue."""
from __future__ import annotations

from collections import deque
from typing import Any

from textual.containers import Vertical
from textual.widgets import Label, ProgressBar, Sparkline, Static

from ..load_progress import LoadProgress

HISTORY = 60   # samples kept for the sparkline


class EnginePanel(Vertical):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.history: deque[float] = deque([0.0] * HISTORY, maxlen=HISTORY)

    def on_mount(self) -> None:
        self.query_one("#engine-loading").display = False

    def compose(self):
        yield Label("Engine", classes="panel-title")
        yield Static("no model loaded", id="engine-models")
        yield ProgressBar(total=None, show_eta=False, id="engine-loading")
        yield Static("gen 0.0 tok/s", id="engine-gen")
        yield Sparkline(list(self.history), id="engine-sparkline")
        yield Static("prompt 0.0 tok/s", id="engine-prompt")
        yield Label("KV cache", classes="engine-label")
        yield ProgressBar(total=1, show_eta=False, id="engine-kv")
        yield Static("0/0 blocks", id="engine-kv-blocks")
        yield Static("prefix hits 0%", id="engine-prefix")
        yield Static("running 0 · waiting 0", id="engine-queue")

    def show(self, snapshots: list[tuple[str, Any]], loading: list[tuple[str, LoadProgress | None]]) -> None:
        """Aggregate the snapshots of all loaded engines (one per model); `loading`: (name, its LoadProgress,
        None before its load has begun) of each model being loaded."""
        if not self.query("#engine-models"):
            return      # being torn down
        gen = sum(s.generation_tokens_per_s for _, s in snapshots)
        prompt = sum(s.prompt_tokens_per_s for _, s in snapshots)
        used = sum(s.kv_blocks_used for _, s in snapshots)
        total = sum(s.kv_blocks_total for _, s in snapshots)
        hit_rates = [s.prefix_cache_hit_rate for _, s in snapshots]
        running = sum(s.num_running for _, s in snapshots)
        waiting = sum(s.num_waiting for _, s in snapshots)
        self.history.append(gen)
        names = [name for name, _ in snapshots]
        models = ", ".join(names) if names else "no model loaded"
        if loading:
            models += "\nloading " + ", ".join(_loading_label(name, p) for name, p in loading)
        self.query_one("#engine-models", Static).update(models)
        bar = self.query_one("#engine-loading", ProgressBar)
        bar.display = bool(loading)
        fractions = [p.fraction for _, p in loading if p is not None and p.fraction is not None]
        if len(fractions) == len(loading) and loading:   # the share of the load done (the slowest model)
            bar.update(total=1.0, progress=min(fractions))
        else:
            bar.update(total=None)
        self.query_one("#engine-gen", Static).update(f"gen {gen:.1f} tok/s")
        self.query_one("#engine-sparkline", Sparkline).data = list(self.history)
        self.query_one("#engine-prompt", Static).update(f"prompt {prompt:.1f} tok/s")
        self.query_one("#engine-kv", ProgressBar).update(total=max(total, 1), progress=used)
        self.query_one("#engine-kv-blocks", Static).update(f"{used}/{total} blocks")
        rate = sum(hit_rates) / len(hit_rates) if hit_rates else 0.0
        disk_rates = [getattr(s, "prefix_disk_hit_rate", 0.0) for _, s in snapshots]
        disk = sum(disk_rates) / len(disk_rates) if disk_rates else 0.0
        from_disk = f" ({disk * 100:.0f}% from disk)" if disk > 0 else ""
        self.query_one("#engine-prefix", Static).update(
            f"prefix hits {rate * 100:.0f}%{from_disk}{_guessing(snapshots)}")
        self.query_one("#engine-queue", Static).update(f"running {running} · waiting {waiting}")


def _loading_label(name: str, progress: LoadProgress | None) -> str:
    """'qwen… 42% · about 6 s left' (the time left once the rate is measured), 'qwen…' before the weights."""
    label = progress.label() if progress is not None else ""
    return f"{name}… {label}" if label else f"{name}…"


def _guessing(snapshots) -> str:
    """' · guesses 62% held, 3.4 tok/step' once some engine has guessed (speculative decoding), else ''."""
    guessed = sum(getattr(s, "spec_guessed_tokens", 0) for _, s in snapshots)
    if not guessed:
        return ""
    accepted = sum(s.spec_accepted_tokens for _, s in snapshots)
    steps = sum(s.spec_verifications for _, s in snapshots)
    return f" · guesses {accepted / guessed:.0%} held, {(accepted + steps) / steps:.1f} tok/step"
