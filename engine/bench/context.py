"""Decode at long context (`llmchat bench MODEL --context 1024 8192`): one session's decode tok/s after a
prompt of each length, next to the KV cache bytes a decode step reads. With sliding-window layers (Gemma 3:
five local layers of window 512-1024 per global one) the local layers read only their window, so at 8k a step
costs what the global layers read plus the windows; the figures show how close the engine comes to that.
Shared machines are noisy: compare figures of one run."""
from __future__ import annotations

from dataclasses import replace

import torch

from ..llm import LLM
from ..model_loader import read_config
from ..models import ModelArgs
from ..sampling_params import SamplingParams


def kv_bytes_read(args, context: int, itemsize: int) -> int:
    """K and V bytes one decode step reads at this context: each layer its window (or everything before it)."""
    per_token = 2 * args.num_kv_heads * args.head_dim * itemsize
    return sum(min(context, w) if w > 0 else context for w in args.sliding_windows) * per_token


def run(model_path, contexts=(1024, 8192), new_tokens: int = 32, dtype: str = "auto", kv_cache_gb: float = 1.0,
        attention_backend: str = "kernels", num_threads: int | None = None) -> dict:
    if num_threads:
        torch.set_num_threads(num_threads)
    limit = ModelArgs.from_config(read_config(model_path)).max_position_embeddings
    skipped = [c for c in contexts if c + new_tokens > limit]   # past the model's context
    contexts = [c for c in contexts if c + new_tokens <= limit]
    if not contexts:
        raise ValueError(f"every --context is past the model's context of {limit} tokens")
    longest = max(contexts) + new_tokens
    llm = LLM(str(model_path), dtype=dtype, kv_cache_gb=kv_cache_gb, attention_backend=attention_backend,
              max_model_len=longest, max_num_seqs=1, enable_prefix_caching=False)
    runner = llm.engine.runner
    args, vocab = runner.args, llm.engine.vocab_size
    fixed = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    llm.generate([[100 + i % 1000 for i in range(64)]], SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    rows = []
    for context in contexts:
        prompt = [100 + (7 * i) % max(1, min(vocab, 30000) - 101) for i in range(context)]
        out = llm.generate([prompt], fixed)[0]
        rate, size = out.metrics.decode_tokens_per_s, runner.dtype.itemsize
        rows.append({"context": context, "decode_tok_s": rate, "ms_per_token": 1000 / rate if rate else None,
                     "prefill_s": out.metrics.ttft, "kv_mb_read_per_token": kv_bytes_read(args, context, size) / 2**20,
                     "kv_mb_if_all_global": kv_bytes_read(_all_global(args), context, size) / 2**20})
    windows = sorted({w for w in args.sliding_windows if w > 0})
    blocks = llm.engine.block_manager.num_blocks
    return {"kv_cache_gb": llm.engine.kv_cache_gb, "kv_tokens": blocks * runner.block_size,
            "kv_gb_one_pool": blocks * runner.kv_block_bytes() / 2**30,
            "model": str(model_path), "dtype": str(runner.dtype).replace("torch.", ""),
            "attention": runner.attention_backend, "layers": args.num_layers,
            "sliding_layers": sum(w > 0 for w in args.sliding_windows), "windows": windows,
            "new_tokens": new_tokens, "rows": rows, "skipped_contexts": skipped}


def _all_global(args):
    return replace(args, sliding_windows=[-1] * args.num_layers)


def format_report(r: dict) -> str:
    lines = [f"decode at long context: {r['model']} ({r['dtype']}, attention={r['attention']}, {r['layers']} layers, "
             f"{r['sliding_layers']} sliding {r['windows'] or ''}), {r['new_tokens']} new tokens after each prompt",
             f"{'context':>8} {'decode tok/s':>13} {'ms/token':>9} {'prefill s':>10} {'KV MB/token':>12} "
             f"{'(all global)':>13}"]
    for row in r["rows"]:
        lines.append(f"{row['context']:>8} {row['decode_tok_s'] or 0:>13.1f} {row['ms_per_token'] or 0:>9.2f} "
                     f"{row['prefill_s'] or 0:>10.2f} {row['kv_mb_read_per_token']:>12.2f} "
                     f"{row['kv_mb_if_all_global']:>13.2f}")
    if r.get("kv_tokens"):
        lines.append(f"KV cache: {r['kv_cache_gb']:.3f} GiB for {r['kv_tokens']} tokens of context "
                     f"({r['kv_gb_one_pool']:.3f} GiB if every layer kept the whole context)")
    if r["skipped_contexts"]:
        lines.append(f"skipped (past the model's context): {', '.join(map(str, r['skipped_contexts']))}")
    return "\n".join(lines)
