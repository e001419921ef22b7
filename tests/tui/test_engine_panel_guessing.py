"""The engine panel's speculation figures: nothing until an engine has guessed, then guesses held and tokens
per verification step over every loaded engine."""
from __future__ import annotations

from llmchat.engine.metrics import MetricsSnapshot
from llmchat.tui.app.widgets.engine_panel import _guessing


def test_guessing_line_sums_every_engine():
    assert _guessing([("a", MetricsSnapshot()), ("b", MetricsSnapshot())]) == ""
    a = MetricsSnapshot(spec_guessed_tokens=30, spec_accepted_tokens=20, spec_verifications=10)
    b = MetricsSnapshot(spec_guessed_tokens=10, spec_accepted_tokens=4, spec_verifications=6)
    assert _guessing([("a", a), ("b", b)]) == " · guesses 60% held, 2.5 tok/step"
