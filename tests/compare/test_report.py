"""Report building and writing from a real prompt file and a real results file (no engine needed)."""
import json

import pytest

from llmchat.engine.compare.plan import CompareSettings, build_variants
from llmchat.engine.compare.prompts import load_prompts
from llmchat.engine.compare.report import CompareInputs, VariantStatus, build_report, result_key
from llmchat.engine.compare.schema import SCHEMA_ID, load_report
from llmchat.engine.compare.scoring import score
from llmchat.engine.compare.store import ResultStore
from llmchat.engine.compare.writers import write_report
from report_checks import assert_report_files_agree, parse_markdown

TEXTS = {"a": ["Paris", "four | <b>4</b>\nsecond line", ""], "a+lora": ["paris, France", "4", " \x0c\r\\|x\x1c\x85 \u2028e&amp;nd\t"]}


@pytest.fixture
def inputs(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join([
        json.dumps({"prompt": "Capital of France?", "expected": "Paris"}),
        "not json",
        json.dumps({"prompt": "2+2?", "expected": ["4", "four"]}),
        json.dumps({"prompt": "Say nothing"}),
    ]) + "\n", encoding="utf-8")
    prompts, errors = load_prompts(path)
    variants = build_variants(["a", "b"], ["a=/adapters/lora"])
    return CompareInputs(path, prompts, errors, variants, CompareSettings(max_tokens=8))


def fill_store(inputs, tmp_path):
    store = ResultStore(tmp_path / "out" / "results.jsonl").load()
    records = []
    for v in inputs.variants[:2]:
        for item in inputs.prompts:
            key = result_key(v, item, inputs.settings)
            text = TEXTS[v.id][item.index]
            records.append({"model": key[0], "adapter": key[1], "prompt_index": key[2], "prompt_hash": key[3],
                            "settings_hash": key[4], "model_path": "/m/a", "text": text,
                            "token_ids": list(range(len(text))), "finish_reason": "stop" if text else "length",
                            "error": None, "ttft": 0.0123 + item.index / 1000, "decode_tok_s": 150.5 + item.index,
                            "prompt_tok_s": None if item.index == 2 else 900.25, "prompt_tokens": 10,
                            "cached_tokens": 4 if item.index else 0, "generated_tokens": len(text)})
    store.append(records)
    inputs.status.update({"a": VariantStatus("ok", "/m/a"), "a+lora": VariantStatus("ok", "/m/a"),
                          "b": VariantStatus("error", None, "unknown model 'b': no such model", "model")})
    return store


def test_scores():
    assert score(" Paris\n", "Paris") == {"exact_match": True, "contains": True}
    assert score("It is paris.", "Paris") == {"exact_match": False, "contains": True}
    assert score("5", ["4", "four"]) == {"exact_match": False, "contains": False}
    assert score("anything", None) is None


def test_report_contents_and_files_agree(inputs, tmp_path):
    store = fill_store(inputs, tmp_path)
    report = build_report(inputs, store)
    write_report(report, tmp_path / "out")
    loaded = assert_report_files_agree(tmp_path / "out")
    assert loaded["schema"] == SCHEMA_ID and loaded["run"]["complete"] is True
    assert [m["id"] for m in loaded["models"]] == ["a", "a+lora", "b"]
    assert loaded["results"][0]["b"] is None
    assert loaded["results"][1]["a"]["scores"] == {"exact_match": False, "contains": True}
    summary = loaded["summary"]["a"]
    assert summary["requests"] == 3 and summary["exact_match"] == 0.5 and summary["contains"] == 1.0
    assert summary["finish_reasons"] == {"length": 1, "stop": 2}
    assert summary["prefix_cache_hits"] == 2 and summary["cached_tokens"] == 8
    assert summary["prompt_tok_s_mean"] == 900.25
    assert loaded["summary"]["a+lora"]["exact_match"] == 0.5 and loaded["summary"]["a+lora"]["contains"] == 1.0
    assert loaded["summary"]["b"]["requests"] == 0
    kinds = [(e["kind"], e["line"], e["model"]) for e in loaded["errors"]]
    assert kinds == [("prompt", 2, None), ("model", None, "b")]
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "prompt error (line 2): invalid JSON" in md
    assert "not run: unknown model &#x27;b&#x27;" in md or "not run: unknown model 'b'" in md
    assert "<b>" not in md                                  # answer HTML is escaped
    _, sections = parse_markdown(md)
    assert sections[1]["score"]["a"] == "exact match ✗ contains ✓"


def test_partial_report_and_pending_models(inputs, tmp_path):
    store = ResultStore(tmp_path / "out" / "results.jsonl").load()
    report = build_report(inputs, store)
    assert report["run"]["complete"] is False
    assert all(m["status"] == "pending" for m in report["models"])
    write_report(report, tmp_path / "out")
    assert_report_files_agree(tmp_path / "out")
    assert "partial" in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")


def test_results_for_other_settings_are_not_used(inputs, tmp_path):
    store = fill_store(inputs, tmp_path)
    other = CompareInputs(inputs.prompts_file, inputs.prompts, [], inputs.variants, CompareSettings(max_tokens=9))
    report = build_report(other, store)
    assert all(r is None for row in report["results"] for r in row.values())


def test_load_report_rejects_other_json(tmp_path):
    (tmp_path / "report.json").write_text('{"schema": "something/else"}')
    with pytest.raises(ValueError, match="not a llmchat.compare/1 report"):
        load_report(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_report(tmp_path / "missing")
