"""`llmchat bench MODEL_PATH [--json] [--kernels]`: engine throughput and latency vs transformers."""
from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

from llmchat.engine.bench.llama_cpp import check_binary
from llmchat.engine.store import resolve_model

from .guessing_options import add_guessing_options, guessing_environment
from .kv_disk_option import add_kv_disk_option


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("bench", help="measure tokens/s and TTFT of the engine vs transformers",
                              description="Decode, multi-session, prefill and cached-prefix figures in one run.")
    p.add_argument("model", metavar="MODEL_PATH", nargs="?", help="model folder (or a name from `llmchat models`)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="activations (and weights, for 16/32-bit models); auto: what the app runs")
    p.add_argument("--sessions", type=int, nargs="+", default=[4, 8, 16], help="concurrent sessions to measure")
    p.add_argument("--tokens", type=int, default=64, help="new tokens per session")
    p.add_argument("--prefix", type=int, default=1024, help="prompt length of the prefill/TTFT figures")
    p.add_argument("--kv-cache-gb", type=float, default=1.0)
    p.add_argument("--attention", dest="attention_backend", default="kernels", choices=["kernels", "torch"])
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    add_guessing_options(p)
    add_kv_disk_option(p, default="off", help="the KV disk tier in the engines the benchmark builds: off (default: a prompt read "
                                "back from an earlier run's blocks would pass for prefill speed) or on")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the transformers and llama-cpp-python baselines (not --llama-bench)")
    p.add_argument("--llama-bench", metavar="PATH", default=None,
                   help="llama.cpp's llama-bench binary: run it on the same GGUF file (-p PREFIX -n TOKENS, the same "
                        "threads) and print its tok/s and the ratios llmchat / llama.cpp")
    p.add_argument("--bandwidth-mib", type=int, default=1024, metavar="MIB",
                   help="buffer of the read-bandwidth probe behind the %% of roof figure (0: skip it)")
    p.add_argument("--quantize", choices=["q8_0", "q4_0", "q4_k"], default=None,
                   help="quantize a 16/32-bit model at load and measure that")
    p.add_argument("--context", type=int, nargs="+", default=None, metavar="N",
                   help="decode tok/s after prompts of these lengths (e.g. 1024 8192: sliding-window models)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--kernels", action="store_true", help="run the kernel micro-benchmark (engine/bench/kernels.py)")
    p.add_argument("--lora", action="store_true",
                   help="LoRA: N sessions over K random adapters vs N base sessions, in one run (engine/bench/lora.py)")
    p.add_argument("--lora-adapters", type=int, default=4, help="adapters for --lora")
    p.add_argument("--lora-rank", type=int, default=16, help="rank of the --lora adapters (all projections)")
    p.add_argument("--determinism", action="store_true",
                   help="the cost of determinism: engine figures with EngineConfig.deterministic off and on, one run")
    p.add_argument("--serve", action="store_true",
                   help="HTTP cost: concurrent streaming clients of `llmchat serve` vs the in-process engine, one run")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 16], help="concurrent HTTP clients for --serve")
    p.add_argument("--workload", nargs="+", choices=["code-edit", "quote", "chat"], default=None,
                   help="speculative decoding: each workload's decode with --speculative (auto unless given) vs off, "
                        "one session, and the first workload at the largest of --sessions (engine/bench/speculation.py)")
    p.add_argument("--llama-server", metavar="PATH", default=None,
                   help="with --workload: llama.cpp's llama-server binary, run on the same GGUF file and workloads, "
                        "plain and with its draft-free --spec-type modes, beside llmchat's figures")
    p.add_argument("--restart", action="store_true",
                   help="a chat of --prefix tokens reopened after a restart: time to first token with the KV disk "
                        "tier vs computed, and decode speed while it writes (engine/bench/restart.py)")
    p.add_argument("--json-schema", metavar="FILE",
                   help="the cost of a JSON-schema constraint: replies constrained to FILE's schema vs the same "
                        "prompts unconstrained, at 1 session and the largest of --sessions (engine/bench/structured.py)")


def run(args: argparse.Namespace) -> int:
    if args.kernels:
        from llmchat.engine.bench.kernels import main as kernels_main   # torch (~2 s): when asked, not on --help
        status = kernels_main(["--json"] if args.json else [])
        if not args.model:
            return status
    if not args.model:
        raise ValueError("give a MODEL_PATH (or --kernels alone)")
    if args.llama_bench:
        other = [f"--{m.replace('_', '-')}" for m in ("serve", "determinism", "context", "lora", "json_schema",
                                                       "workload", "restart")
                 if getattr(args, m)]
        if other:
            raise ValueError(f"--llama-bench goes with the plain bench (decode, prefill), not with {other[0]}")
        check_binary(args.llama_bench)   # before the model is resolved and loaded
    if args.llama_server and not args.workload:
        raise ValueError("--llama-server goes with --workload (the speculation benchmark)")
    with guessing_environment(args):   # every engine this benchmark builds, a server's too
        name, kwargs = benchmark(args)
        # imported when run: a benchmark loads torch and the engine, which `llmchat --help` should not wait for
        bench = importlib.import_module(f"llmchat.engine.bench.{name}")
        result = bench.run(resolve_model(args.model), **kwargs)
    print(json.dumps(result, indent=2) if args.json else bench.format_report(result))
    anchor_failed = "error" in result.get("llama_bench", {}) or "error" in result.get("llama_server", {})
    return 1 if anchor_failed else 0   # llmchat's figures printed, the anchor failed


def benchmark(args: argparse.Namespace) -> tuple[str, dict]:
    """The benchmark the flags ask for (engine/bench/NAME.py) and its keyword arguments."""
    engine = dict(dtype=args.dtype, kv_cache_gb=args.kv_cache_gb, attention_backend=args.attention_backend,
                  num_threads=args.threads)
    if args.serve:
        return "serve", dict(clients=args.clients, new_tokens=args.tokens, quantize=args.quantize, **engine)
    if args.restart:
        return "restart", dict(prefix_len=args.prefix, new_tokens=args.tokens, **engine)
    if args.determinism:
        return "determinism", dict(sessions=args.sessions, new_tokens=args.tokens, prefix_len=args.prefix, **engine)
    if args.context:
        return "context", dict(contexts=args.context, new_tokens=args.tokens, **engine)
    if args.workload:
        if args.speculative == "off":
            raise ValueError("--workload compares speculation with none: give --speculative auto or ngram")
        return "speculation", dict(workloads=args.workload, sessions=[1, max(args.sessions)], new_tokens=args.tokens,
                                   mode=args.speculative or "auto", llama_server=args.llama_server, **engine)
    if args.json_schema:
        return "structured", dict(schema=read_schema(args.json_schema), sessions=[1, max(args.sessions)],
                                  new_tokens=args.tokens, **engine)
    if args.lora:
        return "lora", dict(sessions=args.sessions[0] if len(args.sessions) == 1 else 8,
                            num_adapters=args.lora_adapters, rank=args.lora_rank, new_tokens=args.tokens, **engine)
    return "throughput", dict(sessions=args.sessions, new_tokens=args.tokens, prefix_len=args.prefix,
                              baseline=not args.no_baseline, llamacpp=not args.no_baseline, quantize=args.quantize,
                              llama_bench=args.llama_bench, bandwidth_mib=args.bandwidth_mib, **engine)


def read_schema(path: str) -> dict:
    """The --json-schema file as a dict; ValueError saying what is wrong with it."""
    try:
        schema = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"--json-schema: cannot read {path}: {e.strerror}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"--json-schema: {path} is not JSON: {e}") from None
    if not isinstance(schema, dict):
        raise ValueError(f"--json-schema: {path} holds a {type(schema).__name__}, not a JSON schema object")
    return schema
