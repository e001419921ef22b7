"""`llmchat bench` end to end on a tiny model: every figure is reported (values are not asserted: not a
timed test), and the transformers baseline ran in its own process with OpenMP's default wait policy."""
from __future__ import annotations

import json
import os

from llmchat.engine.bench import throughput as bench
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
    import llmchat.kernels as K
    quantized = f"{K.tiles_isa()} (tile layout), else {K.quant_isa()}" if K.tiles_native() else K.quant_isa()
    assert report["kernel_paths"] == {"vector": K.isa(), "bf16_projections": K.packed_isa(), "quantized": quantized,
                                      "bf16_lora": K.lora_path()}
    assert "policy" in seen and seen["policy"] is None


def test_bench_context_reports_decode_at_each_length_and_the_windows_kv_reads(tiny_model_dir, capsys):
    """--context on a sliding-window model (tiny Gemma 3: window 20 on one of two layers); a length past the
    model's context is skipped, not an error."""
    code = cli_main(["bench", str(tiny_model_dir("gemma3")), "--context", "64", "256", "100000", "--tokens", "4",
                     "--dtype", "float32", "--kv-cache-gb", "0.01", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["context"] for r in report["rows"]] == [64, 256] and report["skipped_contexts"] == [100000]
    assert report["sliding_layers"] == 1 and report["windows"] == [20]
    for row in report["rows"]:
        assert row["decode_tok_s"] > 0
        assert row["kv_mb_read_per_token"] < row["kv_mb_if_all_global"]   # the local layer reads its window only
    assert report["kv_tokens"] >= 260 and report["kv_cache_gb"] <= report["kv_gb_one_pool"]


def test_the_llamacpp_baseline_runs_with_openmps_default_wait_policy(monkeypatch, tmp_path):
    """llama.cpp is an OpenMP build: under llmchat's PASSIVE policy each of its barriers sleeps (4x slower)."""
    import sys

    import torch

    from llmchat.engine.bench import gguf_quality as bench_gguf
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("LLMCHAT_LLAMACPP_PYTHON", sys.executable)   # has no llama_cpp: the run fails, reported
    seen = {}
    real_run = bench_gguf.subprocess.run

    def spy(cmd, **kw):
        seen["policy"] = kw["env"].get("OMP_WAIT_POLICY", "unset")
        return real_run(cmd, **kw)

    monkeypatch.setattr(bench_gguf.subprocess, "run", spy)
    fig = bench_gguf.llamacpp_figures(tmp_path / "x.gguf", [1, 2], [1, 2, 3], 2, [1, 2, 3], torch.zeros(3, 4))
    assert "error" in fig and fig["error"].startswith("llama.cpp failed")
    assert seen["policy"] == "unset"


def test_bench_json_schema_reports_constrained_against_unconstrained(tiny_model_dir, capsys, tmp_path):
    schema = {"type": "array", "minItems": 3, "maxItems": 3, "items": {"enum": ["alpha", "beta", "gamma"]}}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    code = cli_main(["bench", str(tiny_model_dir()), "--json-schema", str(tmp_path / "schema.json"), "--sessions",
                     "3", "--tokens", "200", "--dtype", "float32", "--kv-cache-gb", "0.01", "--json"])
    assert code == 0
    figures = json.loads(capsys.readouterr().out)["figures"]
    for n in (1, 3):
        key = "decode_tok_s_1" if n == 1 else "aggregate_tok_s_3"
        assert figures[key]["constrained"] > 0 and figures[key]["unconstrained"] > 0
        assert figures[f"valid_json_{n}"] == 1 and figures[f"reply_tokens_{n}"] > 3
    (tmp_path / "list.json").write_text("[1, 2]")
    for path, message in ((tmp_path / "list.json", "not a JSON schema object"), (tmp_path / "none.json", "cannot read")):
        assert cli_main(["bench", str(tiny_model_dir()), "--json-schema", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("llmchat: error: --json-schema: ") and message in err


def test_bench_workload_compares_speculation_with_none(tiny_model_dir, capsys):
    # the tiny model's 512-token context holds the chat workload only
    before = os.environ.get("LLMCHAT_SPECULATIVE")
    code = cli_main(["bench", str(tiny_model_dir()), "--workload", "chat", "--speculative", "ngram",
                     "--sessions", "3", "--tokens", "24", "--dtype", "float32", "--kv-cache-gb", "0.05", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "ngram" and report["sessions"] == 3
    f = report["figures"]["chat"]
    assert f["same_tokens"] is True and f["speedup_1"] > 0 and f["speedup_3"] > 0
    assert f["off"]["guessed"] == 0 and f["off"]["decode_tok_s_1"] > 0
    assert cli_main(["bench", str(tiny_model_dir()), "--workload", "chat", "--speculative", "off"]) == 2
    assert "give --speculative auto or ngram" in capsys.readouterr().err
    # the switch was bench's engines' alone: nothing built later in this process inherits it
    assert os.environ.get("LLMCHAT_SPECULATIVE") == before


def test_bench_restart_reads_the_chat_back_in_a_new_process(tiny_model_dir, capsys):
    code = cli_main(["bench", str(tiny_model_dir()), "--restart", "--prefix", "300", "--tokens", "16",
                     "--dtype", "float32", "--kv-cache-gb", "0.05", "--json"])
    assert code == 0
    r = json.loads(capsys.readouterr().out)
    assert r["prompt_len"] == 300 + 16 + 24
    # every full block the first process computed (the chat and its reply but for the last token), read back
    assert r["disk_tokens"] == (300 + 16 - 1) // 16 * 16
    assert r["same_tokens"] is True
    assert r["ttft_cold_s"] > 0 and r["ttft_warm_s"] > 0 and r["decode_tok_s_disk_on"] > 0
    assert "--restart" in bench_help(capsys)


def bench_help(capsys) -> str:
    try:
        cli_main(["bench", "--help"])
    except SystemExit:
        pass
    return capsys.readouterr().out
