"""`llmchat` command line: the app with no arguments, subcommands for scripts.

Each subcommand lives in its own module here (run.py, models.py, compare.py, serve.py, bench.py) with
`add_parser(subparsers)` and `run(args) -> int`; only the one used is imported (the store and the Hub client
cost ~0.1 s), so `llmchat --help` and the app start without the others.
"""
from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys

from .endpoints import add_endpoint_option
from .kv_disk_option import add_kv_disk_option, apply_kv_disk

SUBCOMMANDS = {
    "run": "llmchat.tui.cli.run",
    "bench": "llmchat.tui.cli.bench",
    "models": "llmchat.tui.cli.models",
    "compare": "llmchat.tui.cli.compare",
    "serve": "llmchat.tui.cli.serve",
    "cache": "llmchat.tui.cli.cache",
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmchat", description="Chat with local language models.")
    parser.add_argument("--model", help="open the app with this model (path, name or remote:ENDPOINT/ID) loaded")
    add_endpoint_option(parser, dest="app_endpoints")
    add_kv_disk_option(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = [a for a in argv if a in SUBCOMMANDS][:1]
    for name in SUBCOMMANDS:
        if name in wanted or "-h" in argv or "--help" in argv:
            importlib.import_module(SUBCOMMANDS[name]).add_parser(subparsers)   # a broken one fails loudly
        else:
            subparsers.add_parser(name)   # only a name among the choices: the app starts without the modules
    return parser


def tune_process() -> None:
    """Process settings that must be in place before torch loads. OpenMP threads wait passively: torch's own
    ops in a step (argmax, logits copies) run OpenMP regions between llmchat's kernels, and with the default
    policy their threads keep spinning afterwards on the cores the kernels' pool needs (measured: 16 sessions
    +10-13% tokens/s). A value the user set is kept."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tune_process()
    args = build_parser(argv).parse_args(argv)
    try:
        apply_kv_disk(args)
        if args.command is None:
            from llmchat.tui.app.main import run_app   # Textual and the app: not loaded for a subcommand
            return run_app(model=args.model, endpoints=args.app_endpoints)
        return importlib.import_module(SUBCOMMANDS[args.command]).run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        # Expected failures (bad model path, bad settings): a message, never a traceback.
        print(f"llmchat: error: {exc}", file=sys.stderr)
        return 2



def entry() -> None:
    """The `llmchat` command (and `python -m llmchat.tui.cli`): main(), then, once torch is loaded, the process
    ends as soon as the atexit work is done (the KV disk tier's last blocks, logging) instead of going through
    Python's teardown of torch and the model, which frees what the OS frees anyway (~0.5 s after a reply)."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:   # `llmchat run ... | head -1`: the reader has gone, nothing is lost
        pass
    if "torch" in sys.modules:
        atexit._run_exitfuncs()   # what a normal exit runs first; os._exit skips only the module teardown
        os._exit(code)
    sys.exit(code)
