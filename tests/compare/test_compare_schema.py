"""Prompts that carry a JSON schema: the replies are constrained to it (or, with --no-constrain, only scored),
and the report scores validity per model, in report.json, report.csv and report.md."""
from __future__ import annotations

import csv
import json

from llmchat.engine import LLM
from llmchat.engine.compare.plan import CompareSettings
from llmchat.engine.compare.prompts import load_prompts
from llmchat.engine.compare.scoring import score
from llmchat.tui.cli import main

PAIR = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                         "b": {"enum": ["x", "y"]}}, "required": ["a", "b"], "additionalProperties": False}
LIST = {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2}
LINES = [{"prompt": "Give a pair as JSON.", "schema": PAIR},
         {"prompt": "Hello there"},
         {"prompt": "Two booleans.", "schema": LIST, "expected": "[true, true]"}]


def _run(tmp_path, model, lines, *extra):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    code = main(["compare", "--models", str(model), "--prompts", str(prompts), "--out", str(out),
                 "--max-tokens", "120", "--kv-cache-gb", "0.02", *extra])
    return code, prompts, out


def test_schema_prompts_are_constrained_and_scored_valid(compare_models, tmp_path):
    code, prompts, out = _run(tmp_path, compare_models["llama"], LINES)
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    rows = [row["tiny-llama"] for row in report["results"]]
    assert rows[0]["scores"] == {"schema_valid": True} and rows[1]["scores"] is None
    assert rows[2]["scores"]["schema_valid"] is True and "exact_match" in rows[2]["scores"]
    summary = report["summary"]["tiny-llama"]
    assert (summary["schema_checked"], summary["schema_valid"], summary["scored"]) == (2, 1.0, 1)
    assert report["prompts"][0]["schema"] == PAIR and report["prompts"][1]["schema"] is None
    table = list(csv.DictReader((out / "report.csv").open(newline="")))
    assert [r["schema_valid"] for r in table] == ["1", "", "1"]
    assert "schema valid" in (out / "report.md").read_text() and "100.0% of 2" in (out / "report.md").read_text()
    # each reply is the one the engine gives that request alone, constrained to its schema
    llm = LLM(compare_models["llama"], kv_cache_gb=0.02)
    settings = CompareSettings(max_tokens=120)
    for item in load_prompts(prompts)[0]:
        single = llm.generate([item.engine_input()], settings.sampling_params(item.index, item.schema))[0]
        assert rows[item.index]["token_ids"] == single.token_ids


def test_no_constrain_only_scores_and_reruns_with_its_own_settings(compare_models, tmp_path):
    code, _, out = _run(tmp_path, compare_models["llama"], LINES[:1], "--no-constrain")
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    text = report["results"][0]["tiny-llama"]["text"]
    assert report["run"]["settings"]["constrain"] is False
    assert report["results"][0]["tiny-llama"]["scores"] == {"schema_valid": score(text, None, PAIR)["schema_valid"]}
    assert not text.lstrip().startswith("{")        # a random model left alone does not write the JSON
    assert report["summary"]["tiny-llama"]["schema_valid"] == 0.0


def test_bad_schemas_are_reported_and_the_rest_completes(compare_models, tmp_path, capsys):
    lines = [{"prompt": "one", "schema": [1, 2]}, {"prompt": "two", "schema": {"type": "no-such-type"}},
             {"prompt": "three", "schema": LIST}]
    code, _, out = _run(tmp_path, compare_models["llama"], lines)
    report = json.loads((out / "report.json").read_text())
    errors = {(e["kind"], e["line"]): e["message"] for e in report["errors"]}
    assert "'schema' must be a JSON schema object" in errors[("prompt", 1)]
    assert "schema" in errors[("request", 2)] and "no-such-type" in errors[("request", 2)]
    assert report["results"][1]["tiny-llama"]["scores"]["schema_valid"] is True   # "three", the 2nd valid prompt
    assert "Traceback" not in capsys.readouterr().err


def test_schema_score():
    assert score('{"a": 1, "b": "x"}', None, PAIR) == {"schema_valid": True}
    assert score('{"a": 10, "b": "x"}', None, PAIR) == {"schema_valid": False}
    assert score("not json", "not json", PAIR) == {"exact_match": True, "contains": True, "schema_valid": False}
