"""`llmchat bench --determinism` on a tiny model: both sides measured, every figure with its ratio (values
are not asserted: not a timed test)."""
from __future__ import annotations

import json

from llmchat.tui.cli import main as cli_main


def test_bench_determinism_reports_off_on_and_ratios(tiny_model_dir, capsys):
    code = cli_main(["bench", str(tiny_model_dir()), "--determinism", "--dtype", "float32", "--sessions", "2",
                     "--tokens", "4", "--prefix", "40", "--kv-cache-gb", "0.01", "--threads", "1", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("decode_tok_s_1", "aggregate_tok_s_2", "prefill_tok_s", "ttft_cold_s", "ttft_cached_prefix_s"):
        assert report["off"][key] > 0 and report["on"][key] > 0 and report["ratio_on_over_off"][key] > 0
