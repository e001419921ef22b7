"""Reads a compare output folder back (JSON, CSV, Markdown) and checks the three agree.

The Markdown is parsed independently of the writer (tables split on unescaped pipes, cells unescaped),
so a writer that drops or garbles a number or a text fails here.
"""
from __future__ import annotations

import csv
import html
import math
import re
from pathlib import Path

from llmchat.engine.compare.schema import load_report

TIMING_KEYS = ("ttft", "decode_tok_s", "prompt_tok_s")


_PICTURES_BACK = {0x2400 + c: c for c in range(0x20)} | {0x2421: 0x7F}


def md_unescape(cell: str) -> str:
    return html.unescape(cell.replace("<br>", "\n").replace("\\|", "|")).translate(_PICTURES_BACK)


def md_table_rows(lines: list[str]) -> list[list[str]]:
    rows = []
    for line in lines:
        if line.startswith("| "):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            rows.append([c.strip(" ") for c in cells])
    return [r for r in rows if not all(c == "---" for c in r)]


def parse_markdown(text: str) -> tuple[dict, list[dict]]:
    """-> (summary rows by model id, per prompt {row label: {model id: cell}})."""
    summary_part, _, prompts_part = text.partition("## Prompts")
    summary_part = summary_part.split("## Summary", 1)[1].split("## Errors")[0]
    # split on "\n" only: str.splitlines would also split on characters Markdown keeps inside a line
    header, *rows = md_table_rows(summary_part.split("\n"))
    summary = {md_unescape(r[0]): dict(zip(header, r)) for r in rows}
    sections = []
    for block in prompts_part.split("\n### ")[1:]:
        header_row, *body = md_table_rows(block.split("\n"))
        ids = [md_unescape(c) for c in header_row[1:]]
        sections.append({row[0].strip("*"): dict(zip(ids, row[1:])) for row in body})
    return summary, sections


def _ms(cell: str) -> float | None:
    return None if cell == "–" else float(cell.removesuffix(" ms")) / 1000


def assert_report_files_agree(out_dir: Path) -> dict:
    report = load_report(out_dir)
    models = [m["id"] for m in report["models"]]
    # CSV: one row per prompt x model, same texts and numbers as the JSON
    with open(out_dir / "report.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(report["prompts"]) * len(models)
    for row in rows:
        result = report["results"][int(row["prompt_index"])][row["model_id"]]
        if result is None:
            assert row["error"] and row["text"] == ""
            continue
        assert row["text"] == result["text"]
        assert row["finish_reason"] == result["finish_reason"]
        for key in ("prompt_tokens", "cached_tokens", "generated_tokens"):
            assert int(row[key]) == result[key]
        for key in TIMING_KEYS:
            assert (row[key] == "") if result[key] is None else float(row[key]) == result[key]
        scores = result["scores"] or {}
        for key in ("exact_match", "contains"):
            assert row[key] == ("" if key not in scores else str(int(scores[key])))
    # Markdown: summary numbers and every answer text
    summary, sections = parse_markdown((out_dir / "report.md").read_text(encoding="utf-8"))
    assert list(summary) == models
    for model_id in models:
        s, cells = report["summary"][model_id], summary[model_id]
        for col, key in (("requests", "requests"), ("errors", "errors"), ("prompt tokens", "prompt_tokens"),
                         ("generated tokens", "generated_tokens")):
            assert int(cells[col]) == s[key]
        for col, key in (("TTFT mean", "ttft_mean"), ("TTFT p50", "ttft_p50")):
            got = _ms(cells[col])
            assert (got is None) == (s[key] is None)
            assert got is None or math.isclose(got, s[key], abs_tol=6e-5)
        assert cells["prefix-cache hits"].startswith(f"{s['prefix_cache_hits']}/")
        for reason, count in s["finish_reasons"].items():
            assert f"{reason} {count}" in cells["stop reasons"]
    assert len(sections) == len(report["prompts"])
    for section, row in zip(sections, report["results"]):
        for model_id in models:
            result = row[model_id]
            if result is not None and result["error"] is None:
                answer = section["answer"][model_id]
                # table cells lose their outer spaces in Markdown; everything else must survive
                assert (md_unescape(answer) if answer != "*(empty)*" else "") == result["text"].strip(" ")
                assert section["finish"][model_id] == result["finish_reason"]
    return report


def without_timings(report: dict) -> dict:
    """The report minus what legitimately differs between two runs: time stamps, speeds and prefix-cache
    reuse (which requests shared cached blocks depends on what else was in the same engine run)."""
    import copy
    r = copy.deepcopy(report)
    r["run"].pop("generated_at")
    for row in r["results"]:
        for result in row.values():
            if result is not None:
                for key in (*TIMING_KEYS, "cached_tokens"):
                    result.pop(key)
    for s in r["summary"].values():
        for key in ("ttft_mean", "ttft_p50", "decode_tok_s_mean", "prompt_tok_s_mean", "cached_tokens",
                    "prefix_cache_hits", "prefix_cache_hit_rate"):
            s.pop(key)
    return r


def report_differences(a: dict, b: dict) -> list[str]:
    """Readable list of what differs between two reports (for assertion messages)."""
    diffs = [f"{key} differs" for key in a if key not in ("results", "summary") and a[key] != b.get(key)]
    for i, (row_a, row_b) in enumerate(zip(a["results"], b["results"])):
        for model in row_a:
            ra, rb = row_a[model] or {}, row_b.get(model) or {}
            diffs += [f"results[{i}][{model}].{k}: {ra.get(k)!r} != {rb.get(k)!r}"
                      for k in sorted(set(ra) | set(rb)) if ra.get(k) != rb.get(k)]
    for model in a["summary"]:
        sa, sb = a["summary"][model], b["summary"].get(model, {})
        diffs += [f"summary[{model}].{k}: {sa.get(k)!r} != {sb.get(k)!r}" for k in sa if sa.get(k) != sb.get(k)]
    return diffs
