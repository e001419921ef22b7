"""The kernel benchmark runs end to end and reports every figure (values are not asserted: not a timed test)."""
from __future__ import annotations

import json

from llmchat.engine.bench import kernels as bench


def test_bench_json_has_all_figures(capsys):
    code = bench.main(["--contexts", "64", "300", "--prefill", "48", "--heads", "4", "2", "64", "--reps", "1",
                       "--pool-mb", "4", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    bw = report["bandwidth"]
    assert report["isa"] and bw["read_gbps"] == max(bw["torch_sum_gbps"], bw["read_sum_gbps"]) > 0
    assert bw["scattered_gbps"] > 0
    assert report["block_size"] == 16 and report["blocks_per_group"] == 4  # the engine's defaults
    assert [row["context"] for row in report["decode"]] == [64, 300]
    for row in report["decode"]:
        assert row["kv_gbps"] > 0 and row["speedup_vs_sdpa"] > 0 and row["pct_of_read_bw"] > 0
        assert row["scattered_gbps_nearby"] > 0
        # the share of bandwidth is the median of back-to-back (kernel, probe) pairs
        pairs = row["pct_of_read_bw_pairs"]
        assert len(pairs) == 5 and sorted(pairs)[2] == round(row["pct_of_read_bw"], 1)
    assert report["prefill"][0]["length"] == 48 and report["prefill"][0]["gflops"] > 0
    assert report["one_core"]["context"] == 300 and report["one_core"]["kv_gbps"] > 0
    assert report["one_core"]["scattered_gbps_nearby"] > 0


def test_bench_text_report(capsys):
    assert bench.main(["--contexts", "32", "--prefill", "32", "--heads", "2", "1", "32", "--reps", "1",
                       "--pool-mb", "2", "--dtype", "fp32", "--block-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "block_size=8 blocks_per_group=8" in out  # 64 tokens' worth, as in the engine
    assert "memory bandwidth: read" in out and "decode attention" in out and "prefill attention" in out
    assert "one thread, context 32" in out and "scattered" in out


def test_bench_rejects_bad_heads():
    import pytest

    with pytest.raises(SystemExit):
        bench.main(["--heads", "5", "2", "64"])


def test_pool_gives_each_sequence_whole_groups_in_random_places():
    import torch

    pool = bench._Pool(ctx=200, batch=3, hkv=2, d=16, bs=16, dtype=torch.float32, pool_mb=1, per_group=4)
    assert pool.key.shape[2:] == (4, 16, 16)  # [groups, Hkv, blocks_per_group, block_size, D]
    runs = pool.tables.reshape(-1, 4)
    assert torch.equal(runs % 4, torch.arange(4).expand_as(runs))   # each group's blocks, in order
    firsts = runs[:, 0]
    assert firsts.unique().numel() == firsts.numel() == pool.key.shape[0]  # every group used once
    assert not torch.equal(firsts, firsts.sort().values)               # scattered, not the identity


def test_rows_read_in_a_bandwidth_burst_are_marked():
    rows = [{"read_gbps_nearby": g} for g in (34.0, 63.0, 35.5)]
    bench.mark_bursts(rows, run_read_gbps=33.0)
    assert [row["in_bandwidth_burst"] for row in rows] == [False, True, False]
    report = {"isa": "x", "threads": 2, "block_size": 16, "blocks_per_group": 4,
              "bandwidth": {"read_gbps": 33.0, "torch_sum_gbps": 33.0, "read_sum_gbps": 32.0, "copy_gbps": 30.0,
                            "scattered_gbps": 25.0},
              "decode": [dict(row, context=4096 * (i + 1), heads="32/8x128", dtype="bfloat16", kernel_ms=0.5,
                              kv_gbps=29.0, pct_of_read_bw=80.0, sdpa_gather_ms=18.0, speedup_vs_sdpa=36.0,
                              scattered_gbps_nearby=25.0)
                         for i, row in enumerate(rows)],
              "one_core": {"context": 4096, "kv_gbps": 20.0, "read_gbps_nearby": 33.0, "pct_of_read_bw": 60.0,
                           "scattered_gbps_nearby": 19.0},
              "prefill": []}
    lines = bench.format_report(report).splitlines()
    marked = [line for line in lines if line.rstrip().endswith(" *")]
    assert len(marked) == 1 and " 8192 " in marked[0]
    assert any("measured in a bandwidth burst" in line for line in lines)
    steady = [{"read_gbps_nearby": g} for g in (61.0, 63.0, 62.5)]  # a run spent in one burst marks nothing
    bench.mark_bursts(steady, run_read_gbps=60.0)
    assert not any(row["in_bandwidth_burst"] for row in steady)
