"""The kernel benchmark runs end to end and reports every figure (values are not asserted: not a timed test)."""
from __future__ import annotations

import json

from llmchat.kernels import bench


def test_bench_json_has_all_figures(capsys):
    code = bench.main(["--contexts", "64", "300", "--prefill", "48", "--heads", "4", "2", "64", "--reps", "1",
                       "--pool-mb", "4", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["isa"] and report["bandwidth"]["read_gbps"] > 0
    assert [row["context"] for row in report["decode"]] == [64, 300]
    for row in report["decode"]:
        assert row["kv_gbps"] > 0 and row["speedup_vs_sdpa"] > 0 and row["pct_of_read_bw"] > 0
        # the share of bandwidth is the median of back-to-back (kernel, probe) pairs
        pairs = row["pct_of_read_bw_pairs"]
        assert len(pairs) == 5 and sorted(pairs)[2] == round(row["pct_of_read_bw"], 1)
    assert report["prefill"][0]["length"] == 48 and report["prefill"][0]["gflops"] > 0
    assert report["one_core"]["context"] == 300 and report["one_core"]["kv_gbps"] > 0


def test_bench_text_report(capsys):
    assert bench.main(["--contexts", "32", "--prefill", "32", "--heads", "2", "1", "32", "--reps", "1",
                       "--pool-mb", "2", "--dtype", "fp32", "--block-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "block_size=8" in out
    assert "memory bandwidth: read" in out and "decode attention" in out and "prefill attention" in out
    assert "one thread, context 32" in out


def test_bench_rejects_bad_heads():
    import pytest

    with pytest.raises(SystemExit):
        bench.main(["--heads", "5", "2", "64"])
