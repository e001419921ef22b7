"""The cost of a JSON-schema constraint, one run: decode tok/s of one session and aggregate tok/s of N sessions,
each reply constrained to the schema, against the same prompts unconstrained for exactly as many tokens.

A constrained reply ends where its JSON does, so the unconstrained twin of each request is fixed to the
constrained one's length: both runs do the same work but for the token masks. Aggregate rates count decode
time only (prefill, the same in both, would dilute the difference), with the prefix cache off. Give a schema whose replies are
long (an array with minItems, say); replies of a few tokens measure little but the start of a request.
"""
from __future__ import annotations

import json

import torch

from ..llm import LLM
from ..sampling_params import SamplingParams
from ..structured_outputs import StructuredOutputs
from .common import fixed_length

ONE_SESSION_RUNS = 3
AGGREGATE_RUNS = 2
TOPICS = ["a city", "a book", "a planet", "a recipe", "a film", "a garden", "a train trip", "a museum"]


def requests(schema: dict, n: int) -> list[list[dict]]:
    """n chat requests asking for JSON of the schema, about different topics (different replies)."""
    return [[{"role": "user", "content": f"Describe {TOPICS[i % len(TOPICS)]} (number {i}) as JSON of this "
                                         f"schema: {json.dumps(schema)}"}] for i in range(n)]


def decode_rate(outs) -> float:
    """Aggregate decode tok/s of a batch: the tokens after each reply's first, over the time from the first
    first token to the last finish (the prompts' prefill, the same work in both runs, left out)."""
    start = min(o.metrics.first_token_time for o in outs)
    end = max(o.metrics.finish_time for o in outs)
    return sum(len(o.token_ids) - 1 for o in outs) / (end - start)


def run(model_path, schema: dict, sessions=(1, 16), new_tokens: int = 256, dtype: str = "auto",
        kv_cache_gb: float = 1.0, attention_backend: str = "kernels", num_threads: int | None = None) -> dict:
    constraint = StructuredOutputs(json=schema, parameter="--json-schema")
    constraint.validate()
    # no prefix cache: the second run of a prompt would skip its prefill and look faster for it; no guessing:
    # constrained replies do not guess yet (engine/speculation.py), so their twins must not either
    llm = LLM(model_path, dtype=dtype, kv_cache_gb=kv_cache_gb, attention_backend=attention_backend,
              num_threads=num_threads, max_num_seqs=max(max(sessions), 1), enable_prefix_caching=False,
              speculative="off")
    constrained = SamplingParams(max_tokens=new_tokens, temperature=0.0, structured_outputs=constraint)
    llm.generate(requests(schema, 1), constrained)                       # warm-up: the grammar tokenizer too
    figures: dict = {}
    # one session: the best of a few runs, each against its unconstrained twin of the same length
    best = {"constrained": 0.0, "unconstrained": 0.0}
    for r in range(ONE_SESSION_RUNS):
        prompt = requests(schema, r + 1)[r:]
        out = llm.generate(prompt, constrained)[0]
        twin = llm.generate(prompt, fixed_length(len(out.token_ids)))[0]
        best["constrained"] = max(best["constrained"], out.metrics.decode_tokens_per_s or 0.0)
        best["unconstrained"] = max(best["unconstrained"], twin.metrics.decode_tokens_per_s or 0.0)
        figures["reply_tokens_1"] = len(out.token_ids)
        figures["valid_json_1"] = _is_json(out.text)
    figures["decode_tok_s_1"] = best
    for k in (s for s in sessions if s > 1):
        prompts = requests(schema, k)
        rates = {"constrained": 0.0, "unconstrained": 0.0}
        for _ in range(AGGREGATE_RUNS):   # alternated, the best of each: the machine's noise hits both alike
            outs = llm.generate(prompts, [constrained] * k)
            twins = llm.generate(prompts, [fixed_length(len(o.token_ids)) for o in outs])
            rates = {"constrained": max(rates["constrained"], decode_rate(outs)),
                     "unconstrained": max(rates["unconstrained"], decode_rate(twins))}
        tokens = sum(len(o.token_ids) for o in outs)
        figures[f"aggregate_tok_s_{k}"] = rates
        figures[f"reply_tokens_{k}"] = tokens / k
        figures[f"valid_json_{k}"] = sum(_is_json(o.text) for o in outs) / k
    return {"model": str(model_path), "schema_bytes": len(json.dumps(schema)), "new_tokens": new_tokens,
            "threads": torch.get_num_threads(), "figures": figures}


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def format_report(r: dict) -> str:
    lines = [f"llmchat bench --json-schema: {r['model']} (schema of {r['schema_bytes']} bytes, up to "
             f"{r['new_tokens']} tokens a reply, greedy)",
             f"{'figure':<30}{'constrained':>13}{'unconstrained':>15}{'ratio':>8}{'tokens/reply':>14}{'valid':>8}"]
    for key, value in r["figures"].items():
        if not isinstance(value, dict):
            continue
        n = key.rsplit("_", 1)[1]
        label = "decode tok/s, 1 session" if n == "1" else f"aggregate tok/s, {n} sessions"
        ratio = value["constrained"] / value["unconstrained"] if value["unconstrained"] else float("nan")
        valid = r["figures"][f"valid_json_{n}"]
        lines.append(f"{label:<30}{value['constrained']:>13.1f}{value['unconstrained']:>15.1f}{ratio:>7.2f}x"
                     f"{r['figures'][f'reply_tokens_{n}']:>14.0f}{float(valid):>8.0%}")
    lines.append("unconstrained: the same prompts, each fixed to its constrained reply's length")
    return "\n".join(lines)
