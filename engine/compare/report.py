"""Builds the report (the dict documented in schema.py) from the prompts, variants and stored results.

A pure function of its inputs (plus the time stamp), so an interrupted-then-resumed run and an
uninterrupted one give the same report: the same prompts, texts, token ids, finish reasons, token counts
and scores. Timings and prefix-cache reuse (cached_tokens, prefix-cache hits) are measurements of the
run that produced each result and can differ.
"""
from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from llmchat.engine.compare import __version__
from llmchat.engine.compare.plan import CompareSettings, Variant
from llmchat.engine.compare.prompts import PromptError, PromptItem
from llmchat.engine.compare.schema import SCHEMA_ID
from llmchat.engine.compare.scoring import score, summarize
from llmchat.engine.compare.store import ResultStore

STORED_FIELDS = ("text", "token_ids", "finish_reason", "error", "ttft", "decode_tok_s", "prompt_tok_s",
                 "prompt_tokens", "cached_tokens", "generated_tokens")


@dataclass
class VariantStatus:
    status: str = "pending"            # "ok" | "error" | "pending"
    path: str | None = None
    error: str | None = None
    kind: str | None = None            # "model" | "adapter" when status is "error"


@dataclass
class CompareInputs:
    prompts_file: Path
    prompts: list[PromptItem]
    prompt_errors: list[PromptError]
    variants: list[Variant]
    settings: CompareSettings
    status: dict[str, VariantStatus] = field(default_factory=dict)   # by variant id


def result_key(variant: Variant, item: PromptItem, settings: CompareSettings):
    return (variant.model, variant.adapter, item.index, item.input_hash(settings.raw), settings.output_hash())


def build_report(inputs: CompareInputs, store: ResultStore) -> dict:
    settings = inputs.settings
    results, errors = [], [{"kind": "prompt", "message": e.message, "line": e.line, "model": None,
                            "prompt_index": None} for e in inputs.prompt_errors]
    for v in inputs.variants:
        st = inputs.status.get(v.id, VariantStatus())
        if st.status == "error":
            errors.append({"kind": st.kind or "model", "message": st.error, "line": None, "model": v.id,
                           "prompt_index": None})
    for item in inputs.prompts:
        row = {}
        for v in inputs.variants:
            record = store.get(result_key(v, item, settings))
            row[v.id] = None if record is None else _result(record, item)
            if record is not None and record.get("error"):
                errors.append({"kind": "request", "message": record["error"], "line": item.line, "model": v.id,
                               "prompt_index": item.index})
        results.append(row)
    models = []
    for v in inputs.variants:
        st = inputs.status.get(v.id, VariantStatus())
        models.append({"id": v.id, "model": v.model, "adapter": v.adapter, "path": st.path,
                       "status": st.status, "error": st.error})
    return {
        "schema": SCHEMA_ID,
        "run": _run_info(inputs, complete=all(m["status"] != "pending" for m in models)),
        "models": models,
        "prompts": [p.to_json() for p in inputs.prompts],
        "results": results,
        "summary": {v.id: summarize([row[v.id] for row in results]) for v in inputs.variants},
        "errors": errors,
    }


def _result(record: dict, item: PromptItem) -> dict:
    result = {k: record.get(k) for k in STORED_FIELDS}
    result["scores"] = None if record.get("error") else score(record["text"], item.expected, item.schema_dict)
    return result


def _run_info(inputs: CompareInputs, complete: bool) -> dict:
    path = Path(inputs.prompts_file).resolve()
    return {
        "llmchat_version": __version__,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "complete": complete,
        "prompts_file": str(path),
        "prompts_sha256": hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None,
        "settings": inputs.settings.to_json(),
        "settings_hash": inputs.settings.output_hash(),
        "seed_rule": "request seed = settings.seed + prompt index",
        "host": {"platform": platform.platform(), "machine": platform.machine(),
                 "cpus": _cpus()},
    }


def _cpus() -> int | None:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
