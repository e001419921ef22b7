"""`llmchat bench MODEL --determinism`: what determinism costs, one run. The same engine figures (bench/throughput.py)
for EngineConfig.deterministic off and on, each measured twice in the order off, on, on, off (drift on a shared
machine then weighs on both sides alike); the best of each side's two is reported, with the ratio on / off.
Only the projections differ between the sides: the attention kernel is the deterministic one in both.
"""
from __future__ import annotations

import gc

import torch

from ..llm import LLM
from .throughput import engine_figures

ORDER = (False, True, True, False)


def run(model_path, dtype: str = "auto", sessions=(4, 8, 16), new_tokens: int = 64, prompt_len: int = 32,
        prefix_len: int = 1024, kv_cache_gb: float = 1.0, **engine_kwargs) -> dict:
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for deterministic in ORDER:
        llm = LLM(model_path, dtype=dtype, kv_cache_gb=kv_cache_gb, deterministic=deterministic, **engine_kwargs)
        runs[deterministic].append(engine_figures(llm, list(sessions), new_tokens, prompt_len, prefix_len))
        resolved = str(llm.engine.runner.dtype).replace("torch.", "")
        del llm
        gc.collect()
    best = {side: {k: (min if k.startswith("ttft") else max)(r[k] for r in rs) for k in rs[0]}
            for side, rs in runs.items()}
    keys = [k for k in best[True] if "tok_s" in k or k.startswith("ttft_c")]
    return {"model": str(model_path), "dtype": resolved, "threads": torch.get_num_threads(),
            "off": best[False], "on": best[True], "ratio_on_over_off": {k: best[True][k] / best[False][k] for k in keys}}


def format_report(r: dict) -> str:
    lines = [f"llmchat bench --determinism: {r['model']} ({r['dtype']}, {r['threads']} threads; best of 2 each, "
             f"order off-on-on-off)", f"{'figure':<28}{'off':>10}{'on':>10}{'on/off':>9}"]
    for key, ratio in r["ratio_on_over_off"].items():
        off, on = r["off"][key], r["on"][key]
        fmt = "{:.3f}" if key.startswith("ttft") else "{:.1f}"
        lines.append(f"{key:<28}{fmt.format(off):>10}{fmt.format(on):>10}{ratio:>8.2f}x")
    return "\n".join(lines)
