"""The compare report's JSON schema (`DIR/report.json`), and a loader for readers such as the TUI.

Schema id: "llmchat.compare/1". Fields are only ever added within version 1; a renamed or removed
field bumps the version. Every number is a plain JSON number or null; times are seconds.

{
  "schema": "llmchat.compare/1",
  "run": {
    "llmchat_version": "0.1.0",
    "generated_at": "2026-11-29T19:00:00+00:00",   # when this report file was written (UTC, ISO 8601)
    "complete": true,                  # false while models are still pending (the report is rewritten)
    "prompts_file": "/abs/path/prompts.jsonl",
    "prompts_sha256": "…",             # of the prompt file's bytes
    "settings": {"max_tokens": 128, "temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 0,
                 "raw": false, "dtype": "auto", "kv_cache_gb": null},
    "settings_hash": "…",              # sampling settings that decide the outputs (part of the resume key)
    "seed_rule": "request seed = settings.seed + prompt index",
    "host": {"platform": "Linux-…", "machine": "x86_64", "cpus": 2}
  },
  "models": [                          # one entry per compared variant (a model, or a model + adapter)
    {"id": "tiny-llama+my-adapter",    # column / key used everywhere else in the report
     "model": "tiny-llama",            # as given on the command line (name or path)
     "adapter": "/abs/adapter" | null, # adapter path as given, null for the base model
     "path": "/abs/model/folder" | null,   # what the model store resolved (null if it failed)
     "status": "ok" | "error" | "pending",
     "error": "…" | null}
  ],
  "prompts": [                         # valid prompts only, in file order; index = position here
    {"index": 0, "line": 1,            # line = 1-based line number in the prompt file
     "id": "q1" | null,                # optional "id" from the JSONL line
     "prompt": "…" | null, "messages": [{"role": "user", "content": "…"}] | null,
     "system": "…" | null,
     "expected": "…" | ["…", "…"] | null,
     "schema": {…} | null,             # a JSON schema the reply was constrained to (unless settings.constrain
                                       # is false) and is scored against
     "display": "…"}                   # one-line text for titles and tables
  ],
  "results": [                         # results[prompt index][model id] -> result or null (not run)
    {"tiny-llama": {
        "text": "…", "token_ids": [1, 2], "finish_reason": "stop" | "length" | "abort" | "error",
        "error": "…" | null,
        "ttft": 0.012,                 # seconds from submission to first token (in a batch: incl. queueing)
        "decode_tok_s": 150.0,         # generated tokens after the first / decode seconds (null if < 2)
        "prompt_tok_s": 900.0,         # (prompt_tokens - cached_tokens) / ttft (null if ttft unknown)
        "prompt_tokens": 20, "cached_tokens": 16, "generated_tokens": 8,
        "scores": {"exact_match": true, "contains": true, "schema_valid": true} | null}}
                                       # each score only where the prompt has an expected answer / a schema
  ],
  "summary": {                         # per model id
    "tiny-llama": {
      "requests": 10, "errors": 0,
      "ttft_mean": 0.01, "ttft_p50": 0.01, "decode_tok_s_mean": 150.0, "prompt_tok_s_mean": 900.0,
      "prompt_tokens": 200, "cached_tokens": 64, "generated_tokens": 80,
      "prefix_cache_hits": 3,          # requests that got at least one prompt token from the prefix cache
      "prefix_cache_hit_rate": 0.32,   # cached_tokens / prompt_tokens
      "finish_reasons": {"stop": 7, "length": 3},
      "scored": 4, "exact_match": 0.5, "contains": 0.75,   # rates over prompts with expected; null if none
      "schema_checked": 2, "schema_valid": 1.0}            # rate over prompts with a schema; null if none
  },
  "errors": [                          # everything that went wrong; the rest of the run still completed
    {"kind": "prompt" | "model" | "adapter" | "request",
     "message": "…", "line": 3 | null, "model": "<model id>" | null, "prompt_index": 2 | null}
  ]
}

Resume: a killed run continued with --resume gives the same report except for timings and prefix-cache
reuse (cached_tokens, prefix_cache_hits/_rate, prompt_tok_s), which measure the engine run each result
came from.

Scores: exact_match = the answer, stripped, equals an expected answer, stripped; contains = an expected
answer (stripped, case-folded) occurs in the case-folded answer. `expected` may be one string or a list.
schema_valid = the answer parses as JSON and validates against the prompt's schema (jsonschema).
"""
from __future__ import annotations

import json
from pathlib import Path

SCHEMA_ID = "llmchat.compare/1"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_CSV = "report.csv"
RESULTS_JSONL = "results.jsonl"

RESULT_FIELDS = ("text", "token_ids", "finish_reason", "error", "ttft", "decode_tok_s", "prompt_tok_s",
                 "prompt_tokens", "cached_tokens", "generated_tokens", "scores")


def load_report(path: str | Path) -> dict:
    """Read a report.json (or the folder holding one); ValueError if it is not a compare report."""
    path = Path(path)
    if path.is_dir():
        path = path / REPORT_JSON
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no compare report at {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(report, dict) or report.get("schema") != SCHEMA_ID:
        found = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise ValueError(f"{path} is not a {SCHEMA_ID} report (schema: {found!r})")
    for key in ("run", "models", "prompts", "results", "summary", "errors"):
        if key not in report:
            raise ValueError(f"{path} lacks the {key!r} section")
    if len(report["results"]) != len(report["prompts"]):
        raise ValueError(f"{path}: results and prompts differ in length")
    return report
