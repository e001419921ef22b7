"""Engine benchmark, one run: decode tok/s (1 session), aggregate tok/s (4/8/16 sessions), prefill tok/s,
TTFT cold vs on a cached 1k-token prefix, resident memory; the same workload through transformers'
generate as the baseline, reported as ratios. Shared machines are noisy: compare figures of one run.

Beside them: the machine's read bandwidth (the kernels benchmark's probe, best of a few sums over a large buffer),
the weight bytes one decode step reads, and decode's share of that roof (tok/s x bytes per token / bandwidth,
gpt-fast's "bandwidth achieved"); with `llama_bench` (a path to llama.cpp's llama-bench) llama.cpp's own figures
on the same GGUF file and the ratios llmchat / llama.cpp (bench/llama_cpp.py).

The baseline runs in its own process with OpenMP's default settings: transformers relies on OpenMP, and
the `llmchat` command makes OpenMP threads wait passively (good for llmchat, ~20% slower for transformers).
"""
from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import torch

from llmchat import kernels

from ..layers.linear import Linear
from ..llm import LLM
from ..model_loader import gguf_source
from . import gguf_quality, llama_cpp
from .common import baseline_env, fixed_length, prompt_ids
from .kernels import ReadProbe

MB = 1 << 20
ONE_SESSION_RUNS = 3


def engine_figures(llm: LLM, sessions: list[int], new_tokens: int, prompt_len: int, prefix_len: int) -> dict:
    vocab = llm.engine.vocab_size
    llm.generate([prompt_ids(prompt_len, 0, vocab)], fixed_length(8))                       # warm-up
    # one session: the best of a few runs (the least disturbed one), for llmchat and the baseline alike
    fig = {"decode_tok_s_1": max(llm.generate([prompt_ids(prompt_len, 1 + r, vocab)], fixed_length(new_tokens))[0]
                                 .metrics.decode_tokens_per_s for r in range(ONE_SESSION_RUNS))}
    for k in sessions:
        prompts = [prompt_ids(prompt_len, 100 * k + i, vocab) for i in range(k)]
        t0 = time.perf_counter()
        outs = llm.generate(prompts, fixed_length(new_tokens))
        fig[f"aggregate_tok_s_{k}"] = sum(len(o.token_ids) for o in outs) / (time.perf_counter() - t0)
    prefix = prompt_ids(prefix_len, 7, vocab)
    cold = llm.generate([prefix], fixed_length(1))[0]                                    # also fills the cache
    fig["prefill_tok_s"] = prefix_len / cold.metrics.ttft
    fig["ttft_cold_s"] = cold.metrics.ttft
    warm = llm.generate([prefix + prompt_ids(16, 8, vocab)], fixed_length(1))[0]
    fig["ttft_cached_prefix_s"] = warm.metrics.ttft
    fig["cached_prefix_tokens"] = warm.metrics.num_cached_tokens
    fig["ttft_cached_over_cold"] = warm.metrics.ttft / cold.metrics.ttft
    return fig


@torch.inference_mode()
def transformers_figures(model_path, dtype: torch.dtype, sessions: list[int], new_tokens: int,
                         prompt_len: int, prefix_len: int, vocab: int) -> dict:
    from transformers import AutoModelForCausalLM   # seconds to import; only the baseline's own process needs it
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype).eval()
    pad = model.generation_config.pad_token_id
    pad = pad if pad is not None else 0

    def gen(prompts: list[list[int]], n: int) -> float:
        width = max(len(p) for p in prompts)      # left padding, like batched chat serving in HF
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        t0 = time.perf_counter()
        model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n, min_new_tokens=n,
                       pad_token_id=pad)
        return time.perf_counter() - t0

    gen([prompt_ids(prompt_len, 0, vocab)], 8)                                        # warm-up
    best = 0.0
    for r in range(ONE_SESSION_RUNS):
        one = [prompt_ids(prompt_len, 1 + r, vocab)]
        t_first, t_all = gen(one, 1), gen(one, new_tokens)
        best = max(best, (new_tokens - 1) / max(t_all - t_first, 1e-9))
    fig = {"decode_tok_s_1": best}
    for k in sessions:
        prompts = [prompt_ids(prompt_len, 100 * k + i, vocab) for i in range(k)]
        fig[f"aggregate_tok_s_{k}"] = k * new_tokens / gen(prompts, new_tokens)
    ttft = gen([prompt_ids(prefix_len, 7, vocab)], 1)
    fig["prefill_tok_s"] = prefix_len / ttft
    fig["ttft_cold_s"] = ttft
    fig["ttft_cached_prefix_s"] = gen([prompt_ids(prefix_len, 7, vocab) + prompt_ids(16, 8, vocab)], 1)
    return fig


def transformers_baseline(model_path, dtype: str, sessions: list[int], new_tokens: int, prompt_len: int,
                          prefix_len: int, vocab: int) -> dict:
    """transformers_figures in a fresh process: OpenMP as a transformers user has it, this process's threads."""
    args = dict(model_path=str(model_path), dtype=dtype, sessions=sessions, new_tokens=new_tokens,
                prompt_len=prompt_len, prefix_len=prefix_len, vocab=vocab, threads=torch.get_num_threads())
    code = ("import json, sys, torch\n"
            "from llmchat.engine.bench.throughput import transformers_figures\n"
            "a = json.loads(sys.argv[1])\n"
            "torch.set_num_threads(a.pop('threads'))\n"
            "a['dtype'] = getattr(torch, a['dtype'])\n"
            "print(json.dumps(transformers_figures(**a)))\n")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True,
                          env=baseline_env())
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the transformers baseline failed: {tail[0]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(model_path, dtype: str = "auto", sessions=(4, 8, 16), new_tokens: int = 64, prompt_len: int = 32,
        prefix_len: int = 1024, kv_cache_gb: float = 1.0, baseline: bool = True, llamacpp: bool = True,
        llama_bench=None, bandwidth_mib: int = 1024, **engine_kwargs) -> dict:
    """llama_bench: path of llama.cpp's llama-bench binary, run on the same GGUF file after llmchat's figures;
    bandwidth_mib: size of the read-bandwidth probe's buffer (0: no probe, no % of roof)."""
    gguf = gguf_source(model_path)
    if llama_bench is not None:   # before minutes of loading and measuring: a wrong path fails at once
        llama_bench = llama_cpp.check_binary(llama_bench)
        llama_cpp.check_gguf(str(model_path), gguf)
    rss0 = psutil.Process().memory_info().rss
    llm = LLM(model_path, dtype=dtype, kv_cache_gb=kv_cache_gb, **engine_kwargs)
    runner = llm.engine.runner
    weights = runner.model.weight_bytes()
    result = {
        "model": str(model_path), "dtype": str(runner.dtype).replace("torch.", ""),
        "weights": _weights_label(runner.model, gguf, engine_kwargs.get("quantize")),
        "attention_backend": runner.attention_backend, "kernel_paths": kernel_paths(),
        "threads": torch.get_num_threads(),
        "kv_cache_gb": llm.metrics().kv_cache_gb, "new_tokens": new_tokens, "prompt_len": prompt_len,
        "prefix_len": prefix_len,
        "engine": engine_figures(llm, list(sessions), new_tokens, prompt_len, prefix_len),
    }
    rss = psutil.Process().memory_info().rss
    result["memory_mb"] = {"resident": rss / MB, "resident_before_load": rss0 / MB, "weights": weights / MB,
                           "kv_budget": llm.metrics().kv_cache_gb * 1024, "over_weights": (rss - weights) / MB}
    if gguf is not None:
        result["memory_mb"]["file"] = gguf.stat().st_size / MB
        result["memory_mb"]["over_file"] = (rss - gguf.stat().st_size) / MB
        _quantized_figures(result, llm, gguf, Path(model_path), new_tokens, prompt_len, prefix_len, llamacpp)
    result["decode_bytes_per_token"] = decode_bytes_per_token(runner.model)
    vocab = llm.engine.vocab_size
    del llm, runner
    gc.collect()
    if bandwidth_mib > 0:
        result["bandwidth"] = read_bandwidth(bandwidth_mib)
    if llama_bench is not None:
        try:
            result["llama_bench"] = llama_cpp.run(llama_bench, gguf, result["threads"], prefix_len, new_tokens,
                                                    env=baseline_env())
            result["llama_bench"]["decode_bytes_per_token"] = llama_cpp.file_decode_bytes(gguf)
            e, lb = result["engine"], result["llama_bench"]
            result["ratio_vs_llama_bench"] = {k: e[k] / lb[k] for k in ("decode_tok_s_1", "prefill_tok_s")}
        except llama_cpp.LlamaBenchError as exc:   # llmchat's figures stand; the report says what failed
            result["llama_bench"] = {"error": str(exc)}
    _roof(result)
    if baseline and gguf is None:
        hf = transformers_baseline(model_path, result["dtype"], list(sessions), new_tokens, prompt_len, prefix_len,
                                   vocab)
        result["transformers"] = hf
        result["ratio_vs_transformers"] = {
            k: result["engine"][k] / v if "tok_s" in k else v / result["engine"][k]
            for k, v in hf.items() if k in result["engine"] and result["engine"][k]}
    return result


def read_bandwidth(mib: int = 1024, passes: int = 3) -> dict:
    """Sequential read GB/s of this machine now: the best of `passes` sums over a `mib` MiB fp32 buffer (torch's
    sum and the kernels' vector-load read_sum, the faster one: engine/bench/kernels.py ReadProbe), torch's sum alone
    without the kernels."""
    if kernels.available():
        probe = ReadProbe(mib)
        gbps = probe(passes)
        del probe
        return {"read_gbps": gbps, "probe_mib": mib, "passes": passes, "reader": "best of torch sum, read_sum"}
    x = torch.ones(mib << 18, dtype=torch.float32)
    x.sum()
    best = float("inf")
    for _ in range(passes):
        t0 = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t0)
    return {"read_gbps": x.nbytes / best / 1e9, "probe_mib": mib, "passes": passes, "reader": "torch sum"}


def decode_bytes_per_token(model) -> int:
    """Weight bytes one decode step reads: the weights as held in memory (model.weight_bytes: quantized blocks,
    panels, dense tensors), less an input-embedding table that decode only looks one row up in, i.e. one the
    lm_head does not stream itself (tied quantized tables and tied dense heads without panels do)."""
    total = model.weight_bytes()
    head = getattr(model, "lm_head", None)
    table = getattr(model, "quantized_embedding", None)
    embed = getattr(getattr(getattr(model, "model", None), "embed_tokens", None), "weight", None)
    table_tensors = list(table.tensors()) if table is not None else [embed] if embed is not None else []
    if not isinstance(head, Linear) or not table_tensors:
        return total
    if head.quantized:
        head_reads = [t for w in head.quantized.values() for t in w.tensors()]
    else:
        head_reads = [t for t in (head.small_m_weight if head.small_m_weight is not None else head.weight,)
                      if t is not None]
    head_keys = {(t.data_ptr(), t.nbytes) for t in head_reads}   # (prepared weights share one buffer: not storage)
    if any((t.data_ptr(), t.nbytes) in head_keys for t in table_tensors if t.nbytes):
        return total
    return total - sum(t.nbytes for t in table_tensors)


def _roof(result: dict) -> None:
    """Decode's share of the read roof: tok/s x bytes per token / bandwidth, llmchat's and llama-bench's (the
    file's tensor bytes, its model_size, less a token table that is not the head: llama_cpp.file_decode_bytes)."""
    bw = result.get("bandwidth", {}).get("read_gbps")
    if not bw:
        return
    roof = {"llmchat": result["engine"]["decode_tok_s_1"] * result["decode_bytes_per_token"] / (bw * 1e9)}
    lb = result.get("llama_bench", {})
    if "decode_tok_s_1" in lb and lb.get("decode_bytes_per_token"):
        roof["llama_bench"] = lb["decode_tok_s_1"] * lb["decode_bytes_per_token"] / (bw * 1e9)
    result["roof"] = roof


def _weights_label(model, gguf, quantize) -> str:
    types = sorted({w.source for m in model.modules() if isinstance(m, Linear) for w in m.quantized.values()})
    if not types:
        return "dense"
    how = f"GGUF file {gguf.name}" if gguf is not None else f"--quantize {quantize}"
    return f"{how}: {', '.join(types)}"


def _quantized_figures(result: dict, llm, gguf, folder, new_tokens: int, prompt_len: int, prefix_len: int,
                       llamacpp: bool) -> None:
    """Quality vs the fp32 dequantized model, and llama.cpp on the same file and prompts (ratios)."""
    fits, why = gguf_quality.reference_fits(gguf)
    if not fits:   # a big model: its speed is still measured, its quality is not
        result["quality"] = {"error": f"not measured: {why}"}
        return
    ids = gguf_quality.text_ids(llm)
    reference = gguf_quality.reference_logits(gguf, folder, ids)
    result["quality"] = gguf_quality.quality(llm, reference, ids)
    if not llamacpp:
        return
    vocab = llm.engine.vocab_size
    lc = gguf_quality.llamacpp_figures(gguf, prompt_ids(prompt_len, 1, vocab), prompt_ids(prefix_len, 7, vocab), new_tokens,
                                     ids, reference)
    result["llamacpp"] = lc
    if "error" not in lc:
        e = result["engine"]
        result["ratio_vs_llamacpp"] = {k: e[k] / lc[k] for k in ("decode_tok_s_1", "prefill_tok_s")}


def kernel_paths() -> dict:
    """What computes here (kernels/): the vector path, bf16 projections (AMX tiles where granted), quantized ones."""
    if not kernels.available():
        return {}
    paths = {"vector": kernels.isa(), "bf16_projections": kernels.packed_isa(), "quantized": kernels.quant_isa(),
             "bf16_lora": kernels.lora_path()}
    if kernels.tiles_native():  # weights of 16-row groups take the tile layout (kernels/quant.py)
        paths["quantized"] = f"{kernels.tiles_isa()} (tile layout), else {paths['quantized']}"
    if kernels.level():  # a portable install: which of its CPU levels runs here
        paths["portable_level"] = kernels.level()
    return paths


def format_report(r: dict) -> str:
    e, hf, ratio = r["engine"], r.get("transformers", {}), r.get("ratio_vs_transformers", {})
    lb = r.get("llama_bench") if "error" not in r.get("llama_bench", {"error": None}) else None
    lb_ratio = r.get("ratio_vs_llama_bench", {})
    lines = [f"llmchat bench: {r['model']} ({r['dtype']}, attention={r['attention_backend']}, "
             f"{r['threads']} threads, KV cache {r['kv_cache_gb']:.2f} GiB; weights: {r.get('weights', 'dense')})",
             f"{'figure':<28}{'llmchat':>12}{'transformers':>14}{'ratio':>9}"
             + (f"{'llama-bench':>13}{'ratio':>9}" if lb else "")]
    if r.get("kernel_paths"):
        lines.insert(1, "kernels: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in r["kernel_paths"].items()))
    rows = [("decode tok/s, 1 session", "decode_tok_s_1")]
    rows += [(f"aggregate tok/s, {k[16:]} sessions", k) for k in e if k.startswith("aggregate_tok_s_")]
    rows += [(f"prefill tok/s ({r['prefix_len']} tok)", "prefill_tok_s"), ("TTFT cold, s", "ttft_cold_s"),
             ("TTFT cached prefix, s", "ttft_cached_prefix_s")]
    for label, key in rows:
        theirs = f"{hf[key]:.3f}" if key in hf and key.startswith("ttft") else (f"{hf[key]:.1f}" if key in hf else "-")
        mine = f"{e[key]:.3f}" if key.startswith("ttft") else f"{e[key]:.1f}"
        line = f"{label:<28}{mine:>12}{theirs:>14}{(f'{ratio[key]:.2f}x' if key in ratio else '-'):>9}"
        if lb:
            anchor = f"{lb[key]:.1f}" if key in lb_ratio else "-"
            line += f"{anchor:>13}{(f'{lb_ratio[key]:.2f}x' if key in lb_ratio else '-'):>9}"
        lines.append(line)
    lines.append(f"cached-prefix TTFT / cold TTFT: {e['ttft_cached_over_cold']:.1%} "
                 f"({e['cached_prefix_tokens']} prompt tokens from the cache)")
    lc = r.get("llamacpp")
    if lc is not None and "error" in lc:
        lines.append(f"llama.cpp: not measured ({lc['error']})")
    elif lc is not None:
        ratio = r["ratio_vs_llamacpp"]
        lines.append(f"llama.cpp, same file: decode {lc['decode_tok_s_1']:.1f} tok/s (llmchat {ratio['decode_tok_s_1']:.2f}x), "
                     f"prefill {lc['prefill_tok_s']:.1f} tok/s (llmchat {ratio['prefill_tok_s']:.2f}x)")
    if r.get("llama_bench") is not None:
        lines.append(_llama_bench_line(r["llama_bench"], r.get("prefix_len"), r.get("new_tokens")))
    if "decode_bytes_per_token" in r:
        lines.append(_roof_line(r))
    for who, q in (("llmchat", r.get("quality")), ("llama.cpp", (lc or {}).get("quality"))):
        if q and "error" in q:
            lines.append(f"quality vs fp32 dequantized ({who}): {q['error']}")
        elif q:
            lines.append(f"quality vs fp32 dequantized ({who}, {q['positions']} positions): KL {q['kl_divergence']:.5f}, "
                         f"top-1 agreement {q['top1_agreement']:.1%}")
    m = r["memory_mb"]
    file = f" (the file: {m['file']:.0f} MB)" if "file" in m else ""
    lines.append(f"resident {m['resident']:.0f} MB = weights {m['weights']:.0f} MB{file} + {m['over_weights']:.0f} MB "
                 f"of KV cache as far as this run filled it (budget {m['kv_budget']:.0f} MB), Python, torch, tokenizer")
    return "\n".join(lines)


def _llama_bench_line(lb: dict, prefix_len, new_tokens) -> str:
    if "error" in lb:
        return f"llama-bench: not measured ({lb['error']})"
    known = lb.get("build_number") and lb.get("build_commit") not in (None, "unknown")
    build = f"build {lb['build_number']} ({lb['build_commit']})" if known else "build unknown (not from git)"
    pp, tg = lb["pp"], lb["tg"]
    return (f"llama-bench, same file, {build}, {lb.get('n_threads', '?')} threads: pp{pp['tokens']} "
            f"{pp['avg_ts']:.1f} +- {pp['stddev_ts']:.1f} tok/s, tg{tg['tokens']} {tg['avg_ts']:.1f} +- "
            f"{tg['stddev_ts']:.1f} tok/s ({tg['repetitions']} runs each); ratios above are llmchat / llama-bench")


def _roof_line(r: dict) -> str:
    per_token = r["decode_bytes_per_token"] / MB
    per_token = f"{per_token:.0f}" if per_token >= 100 else f"{per_token:.2f}"
    bw, roof = r.get("bandwidth"), r.get("roof", {})
    if not bw:
        return f"decode reads {per_token} MB of weights per token (read bandwidth not measured)"
    line = (f"read bandwidth {bw['read_gbps']:.1f} GB/s (best of {bw['passes']} sums over {bw['probe_mib']} MiB); "
            f"decode reads {per_token} MB of weights per token: llmchat at {roof['llmchat']:.0%} of that roof")
    if "llama_bench" in roof:
        line += (f", llama-bench at {roof['llama_bench']:.0%} of its "
                 f"{r['llama_bench']['decode_bytes_per_token'] / MB:.0f} MB")
    return line
