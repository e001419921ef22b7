"""The Markdown report: run info, a summary table per model, errors, then each prompt side by side."""
from __future__ import annotations

import json

SUMMARY_HEADER = ["model", "status", "requests", "errors", "TTFT mean", "TTFT p50", "decode tok/s",
                  "prompt tok/s", "prompt tokens", "generated tokens", "prefix-cache hits", "stop reasons",
                  "exact match", "contains", "schema valid"]


# Control characters (random or broken outputs have them) shown as their Unicode pictures: U+2400 + code.
_CONTROL_PICTURES = {c: 0x2400 + c for c in range(0x20) if c not in (0x09, 0x0A)} | {0x7F: 0x2421}


def md_cell(text: str) -> str:
    """Text safe inside one table cell: HTML-escaped (answers may contain <tags>), pipes escaped,
    newlines as <br>, other control characters (\\r, form feed, ...) as visible symbols."""
    text = text.translate(_CONTROL_PICTURES)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\n", "<br>")


def summary_row(model: dict, s: dict) -> list[str]:
    reasons = ", ".join(f"{k} {v}" for k, v in s["finish_reasons"].items()) or "–"
    hits = f"{s['prefix_cache_hits']}/{s['requests'] - s['errors']} ({fmt_pct(s['prefix_cache_hit_rate'])} tokens)"
    scored = s["scored"]
    return [md_cell(model["id"]), model["status"], str(s["requests"]), str(s["errors"]), fmt_ms(s["ttft_mean"]),
            fmt_ms(s["ttft_p50"]), fmt_rate(s["decode_tok_s_mean"]), fmt_rate(s["prompt_tok_s_mean"]),
            str(s["prompt_tokens"]), str(s["generated_tokens"]), hits, reasons,
            f"{fmt_pct(s['exact_match'])} of {scored}" if scored else "–",
            f"{fmt_pct(s['contains'])} of {scored}" if scored else "–",
            f"{fmt_pct(s['schema_valid'])} of {s['schema_checked']}" if s.get("schema_checked") else "–"]


def result_rows(result: dict | None, model: dict) -> dict[str, str]:
    """The cells of one model's column under a prompt."""
    if result is None:
        return {"answer": f"*not run: {md_cell(model['error'] or 'pending')}*"}
    if result["error"]:
        return {"answer": f"*error: {md_cell(result['error'])}*", "finish": result["finish_reason"]}
    tokens = f"{result['prompt_tokens']} → {result['generated_tokens']}"
    if result["cached_tokens"]:
        tokens += f" ({result['cached_tokens']} cached)"
    cells = {"answer": md_cell(result["text"]) or "*(empty)*", "finish": result["finish_reason"],
             "tokens": tokens, "TTFT": fmt_ms(result["ttft"]), "decode tok/s": fmt_rate(result["decode_tok_s"])}
    if result["scores"] is not None:
        cells["score"] = " ".join(f"{name.replace('_', ' ')} {'✓' if ok else '✗'}"
                                  for name, ok in result["scores"].items())
    return cells


def to_markdown(report: dict) -> str:
    run, models = report["run"], report["models"]
    out = ["# llmchat compare report", ""]
    state = "complete" if run["complete"] else "partial (models still pending)"
    settings = ", ".join(f"{k}={v}" for k, v in run["settings"].items())
    out += [f"- prompts: `{run['prompts_file']}` ({len(report['prompts'])} prompts)",
            f"- settings: {settings} ({run['seed_rule']})",
            f"- run: {state}; written {run['generated_at']}; llmchat {run['llmchat_version']}; "
            f"{run['host']['machine']}, {run['host']['cpus']} CPUs", ""]
    out += ["## Summary", "", _row(SUMMARY_HEADER), _row(["---"] * len(SUMMARY_HEADER))]
    out += [_row(summary_row(m, report["summary"][m["id"]])) for m in models]
    out += ["", "All requests of a model run as one batch, so TTFT includes waiting for the batch's other prefills; "
            "prompt tok/s = uncached prompt tokens / TTFT; prefix-cache hits = requests that reused cached "
            "prompt tokens (share of all prompt tokens); scores count prompts with an expected answer, schema valid "
            "those with a JSON schema.", ""]
    if report["errors"]:
        out += ["## Errors", ""] + [f"- {_error_line(e)}" for e in report["errors"]] + [""]
    out += ["## Prompts", ""]
    for prompt, row in zip(report["prompts"], report["results"]):
        out += _prompt_section(prompt, row, models)
    return "\n".join(out).rstrip() + "\n"


def _prompt_section(prompt: dict, row: dict, models: list[dict]) -> list[str]:
    title = f"### {prompt['index'] + 1}. {md_cell(_short(prompt['display']))}"
    lines = [title, "", f"line {prompt['line']}" + (f", id `{prompt['id']}`" if prompt["id"] else "")]
    if prompt["system"]:
        lines[-1] += f"; system: {md_cell(prompt['system'])}"
    if prompt["expected"] is not None:
        expected = prompt["expected"]
        lines[-1] += "; expected: " + md_cell(json.dumps(expected, ensure_ascii=False)
                                              if isinstance(expected, list) else expected)
    lines.append("")
    cells = {m["id"]: result_rows(row.get(m["id"]), m) for m in models}
    labels = list(dict.fromkeys(label for c in cells.values() for label in c))
    lines += [_row([""] + [md_cell(m["id"]) for m in models]), _row(["---"] * (len(models) + 1))]
    for label in labels:
        lines.append(_row([f"**{label}**"] + [cells[m["id"]].get(label, "") for m in models]))
    return lines + [""]


def _error_line(e: dict) -> str:
    where = [f"line {e['line']}" if e["line"] is not None else None, f"model {e['model']}" if e["model"] else None]
    prefix = ", ".join(w for w in where if w)
    return f"{e['kind']} error" + (f" ({md_cell(prefix)})" if prefix else "") + f": {md_cell(e['message'])}"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def fmt_ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:.1f} ms"


def fmt_rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def fmt_pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"
