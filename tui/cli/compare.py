"""`llmchat compare`: run a prompt set against several models/adapters and write a side-by-side report.

    llmchat compare --models A B [--adapters A=PATH ...] --prompts FILE --out DIR
                    [--max-tokens N --temperature T --top-p P --top-k K --seed S --raw --resume]

The work is in llmchat.engine.compare (UI-free); this module parses arguments, checks them and shows
progress on stderr (a bar on a terminal, plain lines otherwise).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from llmchat.engine.compare import CompareSettings, build_variants, load_prompts
from llmchat.engine.compare.report import CompareInputs
from llmchat.engine.compare.runner import CompareRunner, engine_factory, resolver_for
from llmchat.engine.compare.schema import REPORT_MD, RESULTS_JSONL
from llmchat.engine.compare.store import ResultStore

from .endpoints import add_endpoint_option, endpoints_from


EPILOG = """example:
  llmchat compare --models HuggingFaceTB/SmolLM2-135M-Instruct ~/models/qwen2.5-0.5b \\
      --adapters qwen2.5-0.5b=~/adapters/my-lora --prompts prompts.jsonl --out cmp/

prompts.jsonl, one object per line:
  {"prompt": "Capital of France?", "expected": "Paris"}
  {"system": "You are terse.", "prompt": "2+2?", "expected": ["4", "four"], "id": "math"}
  {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": "Who are you?"}]}
Any other file is plain text, one prompt per line. Results go to DIR/results.jsonl as each model
finishes: run the same command again with --resume after an interruption. Exit status: 0 = all ran,
1 = the report lists errors, 2 = bad arguments. JSON schema: llmchat/engine/compare/schema.py."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compare", help="compare models and adapters on a prompt set",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run every prompt against every model (and model+adapter) with the same settings and "
                    "seeds;\nwrite report.md, report.json and report.csv to --out.",
        epilog=EPILOG)
    p.add_argument("--models", nargs="+", required=True, metavar="MODEL",
                   help="model names (from `llmchat models`), folders, or remote:ENDPOINT/MODEL-ID")
    p.add_argument("--adapters", nargs="+", default=[], metavar="MODEL=ADAPTER_PATH",
                   help="also run MODEL with this LoRA adapter (repeatable per model)")
    p.add_argument("--prompts", required=True, metavar="FILE",
                   help="JSONL (prompt or messages, optional system/expected/id) or text, one prompt per line")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the report and results.jsonl")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0, help="request i uses seed S+i (default 0)")
    p.add_argument("--raw", action="store_true", help="send prompts as bare text, without the chat template (JSONL 'messages' still use it)")
    p.add_argument("--no-constrain", dest="constrain", action="store_false",
                   help="do not constrain replies to their prompt's JSON schema, only score them (how well each "
                        "model follows a schema on its own)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--kv-cache-gb", type=float, default=None, help="KV cache budget per model")
    p.add_argument("--resume", action="store_true", help="continue the run already in --out")
    add_endpoint_option(p)
    return p


def run(args: argparse.Namespace) -> int:

    for model in sorted({m for m in args.models if args.models.count(m) > 1}):
        print(f"llmchat: {model} is given {args.models.count(model)} times in --models: it runs once "
              "(same model, same settings, same seeds: the same replies)", file=sys.stderr)
    settings = CompareSettings(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                               top_k=args.top_k, seed=args.seed, raw=args.raw, dtype=args.dtype,
                               kv_cache_gb=args.kv_cache_gb, constrain=args.constrain)
    settings.validate()
    if args.kv_cache_gb is not None and args.kv_cache_gb <= 0:
        raise ValueError(f"--kv-cache-gb must be > 0, got {args.kv_cache_gb}")
    endpoints = endpoints_from(args.endpoints)
    variants = build_variants(args.models, args.adapters)
    prompts, prompt_errors = load_prompts(args.prompts)
    for err in prompt_errors:
        print(f"llmchat: {args.prompts}: {err}", file=sys.stderr)
    if not prompts:
        raise ValueError(f"no usable prompts in {args.prompts}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
    results = out / RESULTS_JSONL
    if results.exists() and not args.resume:
        raise ValueError(f"{results} already exists: pass --resume to continue that run, or pick a new --out")
    store = ResultStore(results).load()
    inputs = CompareInputs(Path(args.prompts), prompts, prompt_errors, variants, settings)
    bar = ProgressBar(sys.stderr)
    try:
        report = CompareRunner(inputs, store, out, progress=bar.update, resolve=resolver_for(endpoints),
                               make_engine=engine_factory(endpoints)).run()
    except KeyboardInterrupt:
        bar.close()
        print(f"interrupted: finished models are saved in {results}; add --resume to continue", file=sys.stderr)
        return 130
    bar.close()
    errors = report["errors"]
    print(f"report: {out / REPORT_MD}" + (f" ({len(errors)} errors, listed in the report)" if errors else ""))
    return 1 if errors else 0


class ProgressBar:
    """`[#####-----] 5/10 what` redrawn in place on a terminal; in a log or pipe, a plain line whenever
    the activity changes or another tenth of the work is done."""

    def __init__(self, stream, width: int = 30):
        self.stream, self.width = stream, width
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.start = time.monotonic()
        self.last = None
        self.drawn = 0                 # width of the line on screen, to blank a longer previous one

    def update(self, done: int, total: int, what: str) -> None:
        filled = self.width * done // total if total else self.width
        line = f"[{'#' * filled}{'-' * (self.width - filled)}] {done}/{total} {what}"
        if self.tty:
            text = f"{line}  {time.monotonic() - self.start:.0f}s"[:120]
            self.stream.write("\r" + text.ljust(self.drawn))
            self.last, self.drawn = line, len(text)
        else:
            state = (what, 10 * done // total if total else 10)
            if state == self.last:
                return
            self.stream.write(f"compare: {done}/{total} {what}\n")
            self.last = state
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()
