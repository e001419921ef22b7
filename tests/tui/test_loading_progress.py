"""Loading a model shows how much of it is done and how long is left: the engine reports bytes as it reads the
checkpoint and then as it prepares the projections, the engine manager keeps a LoadProgress per model, and the
engine panel's bar and text follow it."""
from __future__ import annotations

from textual.app import App
from textual.widgets import ProgressBar, Static

from llmchat.engine import LLM
from llmchat.tui.app.engines import EngineManager
from llmchat.tui.app.load_progress import LoadProgress
from llmchat.tui.app.widgets.engine_panel import EnginePanel


def test_the_engine_reports_bytes_read_then_prepared(tiny_model_dir):
    folder = tiny_model_dir()
    calls = []
    llm = LLM(folder, load_progress=lambda done, total: calls.append((done, total)), kv_cache_gb=0.01)
    read = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    projections = sum(m.in_features * m.out_features for m in llm.engine.runner.model.modules()
                      if type(m).__name__ == "Linear") * 4   # fp32 weights, prepared twice (packed, moved)
    total = read + 2 * projections
    assert len(calls) > 2 and all(t == total for _, t in calls)
    dones = [d for d, _ in calls]
    assert dones == sorted(dones) and 0 < dones[0] < read and dones[-1] == total
    assert any(read < d < total for d in dones)          # the preparation is reported too, not only the end


async def test_the_manager_keeps_the_share_read_while_loading(tiny_model_dir, tmp_path):
    seen = []

    class Recording(dict):       # the manager's LoadProgress, with every share it was told
        def __setitem__(self, key, progress):
            report = progress.report
            progress.report = lambda done, total: (report(done, total), seen.append(progress.fraction))
            super().__setitem__(key, progress)

    manager = EngineManager(memory_budget_gb=8, kv_cache_gb=0.01, data_dir=tmp_path)
    manager.load_progress = Recording()
    model = await manager.get(str(tiny_model_dir()))
    try:
        assert 0 < seen[0] < 1 and seen[-1] == 1.0 and seen == sorted(seen)
        assert not manager.load_progress          # nothing shown once loaded
    finally:
        await model.engine.shutdown()


class PanelApp(App):
    def compose(self):
        yield EnginePanel()


async def test_the_panel_bar_follows_the_share_read():
    app = PanelApp()
    async with app.run_test():
        panel = app.query_one(EnginePanel)
        bar = panel.query_one("#engine-loading", ProgressBar)
        panel.show([], [("tiny", None)])
        assert bar.display and bar.total is None                    # not known yet: indeterminate
        panel.show([], [("tiny", at_share(0.25)), ("other", at_share(0.75))])
        assert bar.total == 1.0 and bar.progress == 0.25            # the slowest model
        panel.show([], [])
        assert not bar.display


def at_share(share: float) -> LoadProgress:
    progress = LoadProgress()
    progress.report(int(share * 100), 100)
    return progress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_time_left_is_the_measured_rate_from_the_first_report():
    clock = Clock()
    progress = LoadProgress(clock)
    assert progress.label() == "" and progress.seconds_left() is None      # before the weights: nothing to say
    progress.report(10, 100)                 # the first report: no rate yet
    assert progress.label() == "10%"
    clock.now += 2.0
    progress.report(50, 100)                 # 40% in 2 s: 50% left takes 2.5 s
    assert progress.seconds_left() == 2.5 and progress.label() == "50% · about 2 s left"
    clock.now += 1.0                         # no report for a second: the estimate counts down
    assert progress.seconds_left() == 1.5
    clock.now += 0.5
    progress.report(99, 100)
    assert progress.label() == "99% · almost done"


def test_a_load_that_jumps_to_the_end_shows_no_guess():
    clock = Clock()
    progress = LoadProgress(clock)
    progress.report(1, 100)
    clock.now += 0.1                         # a mapped, cached start: done in a tenth of a second
    progress.report(100, 100)
    assert progress.seconds_left() is None and progress.label() == "100%"


async def test_the_panel_says_how_long_is_left():
    clock = Clock()
    progress = LoadProgress(clock)
    progress.report(20, 100)
    clock.now += 4.0
    progress.report(60, 100)                 # 40% in 4 s: 40% left takes 4 s
    app = PanelApp()
    async with app.run_test():
        panel = app.query_one(EnginePanel)
        panel.show([], [("qwen.gguf", progress)])
        text = str(panel.query_one("#engine-models", Static).render())
        assert "loading qwen.gguf… 60% · about 4 s left" in text
