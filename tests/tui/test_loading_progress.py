"""Loading a model shows how much of it is done: the engine reports bytes as it reads the checkpoint and then
as it prepares the projections, the engine manager keeps the share per model, and the engine panel's bar
follows it."""
from __future__ import annotations

from textual.app import App
from textual.widgets import ProgressBar

from llmchat.engine import LLM
from llmchat.tui.app.engines import EngineManager
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

    class Recording(dict):
        def __setitem__(self, key, value):
            seen.append(value)
            super().__setitem__(key, value)

    manager = EngineManager(memory_budget_gb=8, kv_cache_gb=0.01, data_dir=tmp_path)
    manager.load_fraction = Recording()
    model = await manager.get(str(tiny_model_dir()))
    try:
        assert seen[0] == 0.0 and seen[-1] == 1.0 and any(0 < f < 1 for f in seen)
        assert not manager.load_fraction          # nothing shown once loaded
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
        panel.show([], [("tiny", 0.25), ("other", 0.75)])
        assert bar.total == 1.0 and bar.progress == 0.25            # the slowest model
        panel.show([], [])
        assert not bar.display
