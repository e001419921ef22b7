"""Writes a report dict (schema.py) as report.json, report.csv and report.md in the output folder.

Every file is written to a temporary name and renamed, so a reader never sees half a report.
Markdown shows rounded numbers (markdown.py); JSON and CSV keep full precision.
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from llmchat.engine.compare.markdown import to_markdown
from llmchat.engine.compare.schema import REPORT_CSV, REPORT_JSON, REPORT_MD

CSV_COLUMNS = ["prompt_index", "line", "prompt_id", "model_id", "model", "adapter", "prompt", "expected",
               "text", "finish_reason", "error", "prompt_tokens", "cached_tokens", "generated_tokens",
               "ttft", "decode_tok_s", "prompt_tok_s", "exact_match", "contains", "schema_valid"]


def write_report(report: dict, out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / REPORT_JSON, "csv": out / REPORT_CSV, "md": out / REPORT_MD}
    _write_atomic(files["json"], json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    _write_atomic(files["csv"], to_csv(report))
    _write_atomic(files["md"], to_markdown(report))
    return files


def to_csv(report: dict) -> str:
    """One row per prompt x model, also for models that did not run (error column says why)."""
    buf = io.StringIO()
    # RFC 4180 line ends: with them the writer quotes any field holding \r or \n, so rows stay rows
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    models = {m["id"]: m for m in report["models"]}
    for prompt, row in zip(report["prompts"], report["results"]):
        for model_id, model in models.items():
            result = row.get(model_id)
            expected = prompt["expected"]
            line = {"prompt_index": prompt["index"], "line": prompt["line"], "prompt_id": prompt["id"] or "",
                    "model_id": model_id, "model": model["model"], "adapter": model["adapter"] or "",
                    "prompt": prompt["display"],
                    "expected": json.dumps(expected, ensure_ascii=False) if isinstance(expected, list)
                    else (expected or "")}
            if result is None:
                line["error"] = model["error"] or "not run"
            else:
                for key in ("text", "finish_reason", "error", "prompt_tokens", "cached_tokens",
                            "generated_tokens", "ttft", "decode_tok_s", "prompt_tok_s"):
                    line[key] = "" if result[key] is None else result[key]
                scores = result["scores"] or {}
                line["exact_match"] = _flag(scores.get("exact_match"))
                line["contains"] = _flag(scores.get("contains"))
                line["schema_valid"] = _flag(scores.get("schema_valid"))
            writer.writerow(line)
    return buf.getvalue()


def _flag(value: bool | None) -> str:
    return "" if value is None else str(int(value))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8", newline="")
    os.replace(tmp, path)
