"""`llmchat compare` end to end on two tiny models with the real engine."""
from __future__ import annotations

import json

from llmchat.engine import LLM
from llmchat.engine.compare.plan import CompareSettings
from llmchat.engine.compare.prompts import load_prompts
from llmchat.tui.cli import main
from report_checks import assert_report_files_agree

ARGS = ["--max-tokens", "6", "--temperature", "0.8", "--top-k", "20", "--seed", "7", "--kv-cache-gb", "0.02"]


def run_cli(models, prompt_file, out, *extra):
    return main(["compare", "--models", *map(str, models), "--prompts", str(prompt_file), "--out", str(out),
                 *ARGS, *extra])


def test_report_agrees_and_outputs_equal_single_requests(compare_models, prompt_file, tmp_path, capsys):
    out = tmp_path / "out"
    models = [compare_models["llama"], compare_models["qwen"]]
    assert run_cli(models, prompt_file, out) == 0
    report = assert_report_files_agree(out)
    assert [m["id"] for m in report["models"]] == ["tiny-llama", "tiny-qwen"]
    assert all(m["status"] == "ok" for m in report["models"]) and report["errors"] == []
    assert report["run"]["complete"] and report["run"]["settings"]["seed"] == 7
    for model_id, summary in report["summary"].items():
        rows = [row[model_id] for row in report["results"]]
        assert summary["requests"] == 5 and summary["scored"] == 2
        assert summary["generated_tokens"] == sum(len(r["token_ids"]) for r in rows)
        assert summary["prompt_tokens"] == sum(r["prompt_tokens"] for r in rows) > 0
        assert summary["cached_tokens"] == sum(r["cached_tokens"] for r in rows)
    texts = {m: [row[m]["text"] for row in report["results"]] for m in ("tiny-llama", "tiny-qwen")}
    assert texts["tiny-llama"] != texts["tiny-qwen"]
    assert "report: " in capsys.readouterr().out

    # Each batched answer equals the same request run alone (same settings, seed = 7 + index).
    prompts, _ = load_prompts(prompt_file)
    settings = CompareSettings(max_tokens=6, temperature=0.8, top_k=20, seed=7)
    for model_id, path in (("tiny-llama", models[0]), ("tiny-qwen", models[1])):
        llm = LLM(path, kv_cache_gb=0.02)
        for item in prompts:
            single = llm.generate([item.engine_input()], settings.sampling_params(item.index))[0]
            got = report["results"][item.index][model_id]
            assert (got["token_ids"], got["text"], got["finish_reason"]) == (
                single.token_ids, single.text, single.finish_reason), (model_id, item.index)
        del llm


def test_same_inputs_same_outputs(compare_models, prompt_file, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli([compare_models["qwen"]], prompt_file, a) == 0
    assert run_cli([compare_models["qwen"]], prompt_file, b) == 0
    ra, rb = (json.loads((d / "report.json").read_text()) for d in (a, b))
    assert [r["tiny-qwen"]["token_ids"] for r in ra["results"]] == [r["tiny-qwen"]["token_ids"] for r in rb["results"]]
