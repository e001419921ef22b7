"""`llmchat run MODEL_PATH "prompt"`: stream one reply to stdout, no UI."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llmchat.engine.chat_templates import KNOWN_TEMPLATES, NoChatTemplateError, use_template
from llmchat.engine.store import resolve_model
from llmchat.engine.structured_outputs import StructuredOutputs

from .guessing_options import add_guessing_options, guessing_engine_options
from .kv_disk_option import add_kv_disk_option


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("run", help="print the model's reply to one prompt (non-interactive)",
                              description="Stream the reply of a local model to one chat message.")
    p.add_argument("model", metavar="MODEL_PATH", help="model folder, .gguf file, or a name from `llmchat models`")
    p.add_argument("prompt", help="the user message")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="stop the reply after this many tokens (default: when the model stops or the context is full)")
    p.add_argument("--temperature", type=float, default=None, help="0 = greedy (default: the model's)")
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--kv-cache-gb", type=float, default=None)
    p.add_argument("--quantize", choices=["q8_0", "q4_0", "q4_k"], default=None,
                   help="quantize a 16/32-bit model's weights while loading (GGUF files run as they are)")
    p.add_argument("--attention", dest="attention_backend", default="kernels", choices=["kernels", "torch"])
    p.add_argument("--raw", action="store_true", help="send the prompt as raw text, without the chat template")
    p.add_argument("--chat-template", metavar="NAME", choices=list(KNOWN_TEMPLATES),
                   help=f"for a model without one, a known template: {', '.join(KNOWN_TEMPLATES)}")
    p.add_argument("--adapter", help="LoRA adapter folder to apply")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json-schema", metavar="FILE",
                       help="constrain the reply to JSON valid against this JSON schema (a file, or the schema inline)")
    shape.add_argument("--grammar", metavar="FILE",
                       help="constrain the reply to a grammar: a GBNF (llama.cpp) or Lark file")
    add_guessing_options(p)
    add_kv_disk_option(p)
    p.add_argument("-v", "--verbose", action="store_true", help="print engine figures to stderr")


def one_request_sizing(kv_cache_gb: float | None) -> dict:
    """One request: a KV cache for that one sequence of the model's whole context, not for 64, within the
    engine's memory budget (a quarter of free RAM, at most 8 GiB); its memory is committed only as the reply
    fills it (kernels/memory.py), so no tokenizer pass is needed to size it. --kv-cache-gb sets it instead."""
    return {} if kv_cache_gb is not None else {"max_num_seqs": 1}


def reply_constraint(args: argparse.Namespace) -> StructuredOutputs | None:
    """--json-schema / --grammar as the engine's constraint; ValueError with the file's problem."""
    if args.json_schema:
        text = args.json_schema if args.json_schema.lstrip().startswith("{") else _read(args.json_schema)
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"--json-schema: not valid JSON: {e}") from None
        return StructuredOutputs(json=schema, parameter="--json-schema")
    if args.grammar:
        return StructuredOutputs(grammar=_read(args.grammar), parameter="--grammar")
    return None


def _read(path: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e.strerror if isinstance(e, OSError) else e}") from None


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except NoChatTemplateError as exc:   # one line with the two ways on (cli.main prints it)
        way = f" (--chat-template {exc.suggested})" if exc.suggested else ""
        raise ValueError(f"{exc}{way}; or pass --raw") from None


def _run(args: argparse.Namespace) -> int:
    folder = resolve_model(args.model)
    constraint = reply_constraint(args)   # a bad file fails before torch and the model load
    from llmchat.engine import LLM, SamplingParams   # torch (~1 s): after the arguments are checked, not on --help
    if args.raw:
        prompt = args.prompt
    else:
        prompt = ([{"role": "system", "content": args.system}] if args.system else []) + \
                 [{"role": "user", "content": args.prompt}]
    llm = LLM(folder, dtype=args.dtype, kv_cache_gb=args.kv_cache_gb, attention_backend=args.attention_backend,
              quantize=args.quantize, **guessing_engine_options(args),
              **one_request_sizing(args.kv_cache_gb))
    if args.chat_template and not args.raw:
        use_template(llm.tokenizer, args.chat_template)
    adapter = None
    if args.adapter:
        if not hasattr(llm, "load_adapter"):
            raise ValueError("this build of the engine cannot load adapters")
        adapter = "cli"
        llm.load_adapter(adapter, args.adapter)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, seed=args.seed, structured_outputs=constraint)
    engine = llm.engine
    seq = engine.add_request(prompt, params, adapter=adapter)
    while not seq.is_finished:
        for delta in engine.step():
            if delta.request_id == seq.request_id and delta.text:
                sys.stdout.write(delta.text)
                sys.stdout.flush()
    sys.stdout.write("\n")
    if args.verbose:
        m, out = llm.metrics(), engine.output_of(seq)
        rm = out.metrics
        print(f"[{engine.runner.dtype}, attention={engine.runner.attention_backend}, KV cache "
              f"{m.kv_cache_gb:.2f} GiB = {m.kv_blocks_total} blocks of {engine.config.block_size} tokens; "
              f"prompt {rm.num_prompt_tokens} tokens{disk_summary(rm)}, generated {rm.num_generated_tokens} "
              f"({out.finish_reason}); TTFT {rm.ttft or 0:.3f} s, {rm.decode_tokens_per_s or 0:.1f} tok/s"
              f"{guess_summary(rm)}]",
              file=sys.stderr)
    return 0


def disk_summary(metrics) -> str:
    """' (120 read from disk)' when the KV disk tier gave part of the prompt (an earlier run computed it)."""
    return f" ({metrics.num_disk_cached_tokens} read from disk)" if metrics.num_disk_cached_tokens else ""


def guess_summary(metrics) -> str:
    """'; guessed 40 tokens, 31 held' when speculation ran for the request."""
    if not metrics.num_guessed_tokens:
        return ""
    return f"; guessed {metrics.num_guessed_tokens} tokens, {metrics.num_accepted_guesses} held"
