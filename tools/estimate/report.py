"""The estimator's tables, in Markdown: cycles per multiply-accumulate side by side, and the projections."""
from __future__ import annotations

from .cpus import Cpu, by_key
from .projection import FORMATS, MODELS, Machine, attention_loop, prefill_loop, project
from .run import Estimate

# Which of our loops a format's decode / prefill runs, and llama.cpp's default path for it on ARM.
PATHS = {
    "Q4_0": ("Q4_0 GEMV (decode)", "Q4_0 GEMM (prefill)", "repacked"),
    "Q8_0": ("Q8_0 GEMV (decode)", "Q8_0 GEMM (prefill)", "repacked"),
    "bf16": ("bf16 GEMV (decode and prefill)", "bf16 GEMV (decode and prefill)", "BF16 vec_dot"),
}
ATTENTION = {64: ("attention QK, D=64", "attention P.V, D=64"), 128: ("attention QK, D=128", "attention P.V, D=128")}


def _fmt(x: float) -> str:
    return "-" if x != x else f"{x:.3f}"


def _rows(results: list[Estimate]) -> list[str]:
    return list(dict.fromkeys(r.spec.row for r in results))


def summary_table(results: list[Estimate], cpus: list[Cpu]) -> str:
    """One line per loop: ours and llama.cpp's best cycles per MAC on every CPU."""
    out = ["\n### Cycles per multiply-accumulate, llmchat / llama.cpp's best path (one core)",
           "\n| loop | " + " | ".join(c.key for c in cpus) + " |", "|---|" + "---|" * len(cpus)]
    for row in _rows(results):
        cells = []
        for cpu in cpus:
            o = _cpm(results, cpu.key, row, "llmchat")
            t = _cpm(results, cpu.key, row, "llama.cpp")
            cells.append(_fmt(o) + ("" if t != t else f" / {_fmt(t)}"))
        out.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def loop_tables(results: list[Estimate], cpus: list[Cpu], verbose: bool = False) -> str:
    """Per CPU: each operation's cycles per MAC, ours and llama.cpp's paths, and ours / llama.cpp's best."""
    out = []
    for cpu in cpus:
        mine = [r for r in results if r.cpu.key == cpu.key]
        out.append(f"\n### {cpu.key} ({cpu.product}; llvm-mca model {cpu.mca_cpu})")
        if cpu.model_note:
            out.append(f"_{cpu.model_note}_")
        out.append("\n| loop | llmchat cycles/MAC | llama.cpp cycles/MAC | llmchat / llama.cpp best |")
        out.append("|---|---|---|---|")
        for row in _rows(mine):
            ours = [r for r in mine if r.spec.row == row and r.spec.side == "llmchat"]
            theirs = [r for r in mine if r.spec.row == row and r.spec.side == "llama.cpp" and not r.error]
            o = ours[0].per_mac if ours and not ours[0].error else float("nan")
            t = ", ".join(f"{_fmt(r.per_mac)} ({r.spec.name} {r.spec.function.replace('ggml_', '')})" for r in theirs) or "-"
            best = min((r.per_mac for r in theirs), default=float("nan"))
            out.append(f"| {row} | {_fmt(o)} | {t} | {_fmt(o / best) if best == best else '-'} |")
        if verbose:
            out.append("\n| side | loop | hot loop in | MACs/trip | instructions | blocks | cycles/trip | RThroughput |")
            out.append("|---|---|---|---|---|---|---|---|")
            for r in mine:
                where = r.error or r.function[:60]
                out.append(f"| {r.spec.side} | {r.spec.row} ({r.spec.name}) | {where} | {r.macs} | {r.instructions} | "
                           f"{r.blocks} | {r.cycles:.2f} | {r.rthroughput:.2f} |")
    return "\n".join(out)


def _cpm(results: list[Estimate], cpu: str, row: str, side: str, name: str | None = None) -> float:
    vals = [r.per_mac for r in results if r.cpu.key == cpu and r.spec.row == row and r.spec.side == side
            and not r.error and (name is None or r.spec.name == name)]
    return min(vals) if vals else float("nan")


def projection_table(results: list[Estimate], ms: list[Machine], with_llama: bool) -> str:
    """One line per model and format; per machine "decode / prefill" tok/s, llama.cpp's in brackets, and
    m or c: whether the decode estimate is memory- or compute-bound."""
    ms = [m for m in ms if _cpm(results, m.cpu_key, PATHS["bf16"][0], "llmchat") == _cpm(results, m.cpu_key, PATHS["bf16"][0], "llmchat")]
    out = ["\n### Projected tokens/s: decode (512 tokens of context) / prefill (512-token prompt), one session"
           + ("; llama.cpp in brackets" if with_llama else ""),
           "\n| model | format | " + " | ".join(m.name for m in ms) + " |", "|---|---|" + "---|" * len(ms)]

    def cell(model, fmt, m, side, name=None):
        qk, pv = ATTENTION[model.head_dim]
        gemv, gemm, _ = PATHS[fmt]
        if side == "llmchat":
            features = by_key([m.cpu_key])[0].features
            gemm = prefill_loop(fmt, gemm, features)
            qk, pv = attention_loop(qk, features), attention_loop(pv, features)
        attn = (_cpm(results, m.cpu_key, qk, side) + _cpm(results, m.cpu_key, pv, side)) / 2
        p = project(model, fmt, m, _cpm(results, m.cpu_key, gemv, side, name), _cpm(results, m.cpu_key, gemm, side, name), attn)
        return f"{p.decode_tok_s:,.0f}{p.decode_bound[0]} / {p.prefill_tok_s:,.0f}"

    for model in MODELS:
        for fmt in FORMATS:
            cells = []
            for m in ms:
                c = cell(model, fmt, m, "llmchat")
                if with_llama:
                    c += f" ({cell(model, fmt, m, 'llama.cpp', PATHS[fmt][2])})"
                cells.append(c)
            out.append(f"| {model.name} | {fmt} | " + " | ".join(cells) + " |")
    return "\n".join(out)
