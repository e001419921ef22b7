"""`llmchat serve MODEL [...]`: an OpenAI-compatible HTTP server on the engine (engine/serve)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from llmchat.engine.store import resolve_model

from .guessing_options import add_guessing_options, guessing_engine_options
from .kv_disk_option import add_kv_disk_option


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve models over an OpenAI-compatible HTTP API",
                              description="POST /v1/chat/completions and /v1/completions (streaming or not), "
                                          "GET /v1/models, /health, /metrics; OpenAPI at /openapi.json.")
    p.add_argument("models", metavar="MODEL", nargs="+",
                   help="model folder, .gguf file, or a name from `llmchat models`; its id is the name given "
                        "(a path's folder or file name)")
    p.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                   help="LoRA adapter (folder or library name) on the first model, served as model id NAME")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (non-loopback needs an API key)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY (default: $LLMCHAT_API_KEY)")
    p.add_argument("--max-pending", type=int, default=256,
                   help="requests admitted at once (running + waiting); more are refused with 429")
    p.add_argument("--max-body-mb", type=float, default=4.0, help="largest request body (413 beyond)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--kv-cache-gb", type=float, default=None, help="KV cache per model (default: from free RAM)")
    p.add_argument("--quantize", choices=["q8_0", "q4_0", "q4_k"], default=None,
                   help="quantize a 16/32-bit model's weights while loading")
    p.add_argument("--max-num-seqs", type=int, default=64, help="requests in the running batch at most")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--attention", dest="attention_backend", default="kernels", choices=["kernels", "torch"])
    add_kv_disk_option(p)
    add_guessing_options(p)
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def model_id(name: str) -> str:
    """A path's last part (without .gguf), else the library name as given."""
    path = Path(name).expanduser()
    if path.exists():
        return path.stem if path.suffix.lower() == ".gguf" else path.resolve().name
    return name


def parse_adapters(values: list[str]) -> list[tuple[str, str]]:
    adapters = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--adapter takes NAME=PATH, got {value!r}")
        adapters.append((name, path))
    return adapters


def build_specs(args: argparse.Namespace):
    from llmchat.engine.serve import ModelSpec   # FastAPI and uvicorn (~0.6 s): loaded when serving, not on --help

    adapters = parse_adapters(args.adapter)
    return [ModelSpec(model_id(name), resolve_model(name), adapters if i == 0 else [])
            for i, name in enumerate(args.models)]


def run(args: argparse.Namespace) -> int:
    from llmchat.engine.serve import ServerSettings, serve   # FastAPI and uvicorn (~0.6 s): see build_specs
    from llmchat.engine.serve.security import check_bind   # with the server, as above

    api_key = args.api_key or os.environ.get("LLMCHAT_API_KEY") or None
    check_bind(args.host, api_key)               # before any model is resolved or loaded
    if args.max_pending <= 0 or args.max_body_mb <= 0:
        raise ValueError("--max-pending and --max-body-mb must be positive")
    engine_kwargs = dict(dtype=args.dtype, kv_cache_gb=args.kv_cache_gb, quantize=args.quantize,
                         max_num_seqs=args.max_num_seqs, num_threads=args.threads,
                         attention_backend=args.attention_backend,
                         **guessing_engine_options(args))
    settings = ServerSettings(api_key=api_key, max_pending=args.max_pending,
                              max_body_bytes=int(args.max_body_mb * 2**20), engine_kwargs=engine_kwargs)
    try:
        serve(build_specs(args), settings, args.host, args.port, args.log_level)
    except KeyboardInterrupt:   # Ctrl-C is how a server is stopped: uvicorn re-raises it after a clean shutdown
        pass
    return 0
