"""Scores against expected answers, and the per-model summary of a compare report."""
from __future__ import annotations

import json
import statistics
from collections import Counter

import jsonschema


def score(text: str, expected: str | list[str] | tuple[str, ...] | None, schema: dict | None = None) -> dict | None:
    """exact_match: stripped answer equals a stripped expected answer; contains: case-folded substring;
    schema_valid: the answer is JSON that validates against the prompt's schema."""
    scores = {}
    if expected is not None:
        answers = [expected] if isinstance(expected, str) else list(expected)
        answer = text.strip()
        folded = answer.casefold()
        scores.update(exact_match=any(answer == e.strip() for e in answers),
                      contains=any(e.strip().casefold() in folded for e in answers))
    if schema is not None:
        scores["schema_valid"] = schema_valid(text, schema)
    return scores or None


def schema_valid(text: str, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError, jsonschema.SchemaError):
        return False
    return True


def summarize(results: list[dict]) -> dict:
    """Aggregate one model's results (dicts in the report's result format; None = not run)."""
    done = [r for r in results if r is not None]
    ok = [r for r in done if r.get("error") is None]
    scored = [r["scores"] for r in ok if r.get("scores") and "exact_match" in r["scores"]]
    with_schema = [r["scores"]["schema_valid"] for r in ok if r.get("scores") and "schema_valid" in r["scores"]]
    prompt_tokens = sum(r["prompt_tokens"] for r in ok)
    cached_tokens = sum(r["cached_tokens"] for r in ok)
    return {
        "requests": len(done),
        "errors": len(done) - len(ok),
        "ttft_mean": _mean(r["ttft"] for r in ok),
        "ttft_p50": _median(r["ttft"] for r in ok),
        "decode_tok_s_mean": _mean(r["decode_tok_s"] for r in ok),
        "prompt_tok_s_mean": _mean(r["prompt_tok_s"] for r in ok),
        "prompt_tokens": prompt_tokens,
        "cached_tokens": cached_tokens,
        "generated_tokens": sum(r["generated_tokens"] for r in ok),
        "prefix_cache_hits": sum(1 for r in ok if r["cached_tokens"] > 0),
        "prefix_cache_hit_rate": cached_tokens / prompt_tokens if prompt_tokens else None,
        "finish_reasons": dict(sorted(Counter(r["finish_reason"] for r in done).items())),
        "scored": len(scored),
        "exact_match": _rate(s["exact_match"] for s in scored) if scored else None,
        "contains": _rate(s["contains"] for s in scored) if scored else None,
        "schema_checked": len(with_schema),
        "schema_valid": _rate(with_schema) if with_schema else None,
    }


def _values(values) -> list[float]:
    return [v for v in values if v is not None]


def _mean(values) -> float | None:
    vals = _values(values)
    return statistics.fmean(vals) if vals else None


def _median(values) -> float | None:
    vals = _values(values)
    return statistics.median(vals) if vals else None


def _rate(flags) -> float:
    flags = list(flags)
    return sum(1 for f in flags if f) / len(flags)
