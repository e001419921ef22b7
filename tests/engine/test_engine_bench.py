"""`llmchat bench` end to end on a tiny model: every figure is reported (values are not asserted: not a
timed test), and the transformers baseline ran in its own process with OpenMP's default wait policy."""
from __future__ import annotations

import json

from llmchat.engine import bench
from llmchat.tui.cli import main as cli_main


def test_bench_reports_every_figure_with_a_baseline(tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")   # as the llmchat command sets it
    seen = {}
    real_run = bench.subprocess.run

    def spy(cmd, **kw):
        seen["policy"] = kw["env"].get("OMP_WAIT_POLICY")
        return real_run(cmd, **kw)

    monkeypatch.setattr(bench.subprocess, "run", spy)
    code = cli_main(["bench", str(tiny_model_dir()), "--dtype", "float32", "--sessions", "2", "--tokens", "4",
                     "--prefix", "40", "--kv-cache-gb", "0.01", "--threads", "1", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    engine, hf = report["engine"], report["transformers"]
    for key in ("decode_tok_s_1", "aggregate_tok_s_2", "prefill_tok_s", "ttft_cold_s", "ttft_cached_prefix_s"):
        assert engine[key] > 0 and hf[key] > 0 and report["ratio_vs_transformers"][key] > 0
    assert engine["cached_prefix_tokens"] > 0
    assert "policy" in seen and seen["policy"] is None
