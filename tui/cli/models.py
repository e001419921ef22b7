"""`llmchat models ...`: search the Hub, pull, list, remove and import models. Humans by default, --json
for scripts. All the work is in llmchat.engine.store.ModelStore; this file only parses and prints."""
from __future__ import annotations

import json
import shutil
import sys
import textwrap
import threading

from llmchat.engine.remote import list_all
from llmchat.engine.store import ModelStore
from llmchat.engine.store.hub import add_quant_sizes, unsupported_note
from llmchat.engine.store.pull import human_bytes, pull_gguf, quant_list

from .endpoints import add_endpoint_option, endpoints_from


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("models", help="find, download, list, remove and import models")
    sub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    s = sub.add_parser("search", help="search the Hugging Face Hub for models llmchat can run")
    s.add_argument("query")
    s.add_argument("--sort", choices=["downloads", "likes", "recent"], default="downloads")
    s.add_argument("--limit", type=int, default=20)
    s.add_argument("--all", action="store_true", help="also show models the engine cannot run, with why")
    s = sub.add_parser("pull", help="download REPO[@REVISION] into the Hugging Face cache (resumable)")
    s.add_argument("repo")
    s.add_argument("--quant", help="GGUF repos: the one quant file to download, e.g. Q4_K_M (`models search` "
                                   "lists them); it is then registered like `models import`")
    s = sub.add_parser("list", help="models in the library (HF cache + imports)")
    s.add_argument("--remote", action="store_true", help="also list the models of the remote endpoints")
    add_endpoint_option(s)
    s = sub.add_parser("rm", help="delete a model (imported folders are only unregistered)")
    s.add_argument("name")
    s = sub.add_parser("import", help="register a model folder or a .gguf file (run quantized, in place)")
    s.add_argument("path")
    s.add_argument("--copy", action="store_true", help="copy the folder into llmchat's data dir")
    s.add_argument("--name", help="library name (default: the folder or file name)")
    s.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="GGUF only: dtype of activations and KV cache (auto: bfloat16); with --dequantize, of the "
                        "written weights (auto: float32 below 2B parameters)")
    s.add_argument("--dequantize", action="store_true",
                   help="GGUF only: write a 16/32-bit safetensors copy instead of running the file as it is")
    for action in sub.choices.values():
        action.add_argument("--json", action="store_true", help="machine-readable output")


def _status(m) -> str:
    """"ok", with what a runnable model's note says (a multimodal checkpoint runs text only), or why not."""
    if not m.supported:
        return m.reason
    return f"ok ({m.reason})" if m.reason else "ok"


def _bytes(n) -> str:
    return "-" if n is None else human_bytes(n)


def _params(n) -> str:
    if not n:
        return "-"
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header)] + [line(r) for r in rows])


class _ProgressLine:
    """One self-rewriting stderr line (only on a terminal): file, bytes, rate, ETA."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()

    def __call__(self, p) -> None:
        if not self.enabled:
            return
        eta = "-" if p.eta_s is None else f"{int(p.eta_s) // 60}:{int(p.eta_s) % 60:02d}"
        text = (f"{p.filename[:40]} [{p.file_index}/{p.num_files}] {_bytes(p.done_bytes)} / "
                f"{_bytes(p.total_bytes)}  {_bytes(p.bytes_per_s)}/s  ETA {eta}")
        sys.stderr.write("\r" + text.ljust(100)[:120] + ("\n" if p.finished else ""))
        sys.stderr.flush()


def _quant_line(model) -> str:
    """GGUF hits: their quant files with sizes, on an indented line below the row."""
    return textwrap.fill("quants: " + quant_list(model.quants), width=shutil.get_terminal_size((120, 24)).columns,
                         initial_indent="    ", subsequent_indent="      ")


def _search(store, args) -> int:
    found = store.search(args.query, sort=args.sort, limit=args.limit if args.all else max(args.limit * 5, 50),
                         include_unsupported=True)
    shown = found[:args.limit] if args.all else [m for m in found if m.supported][:args.limit]
    hidden = [] if args.all else [m for m in found if not m.supported]
    add_quant_sizes(shown)  # search sized the first runnable GGUF hits; --all or a big --limit may show more
    if args.json:
        print(json.dumps({"results": [m.to_dict() for m in shown],
                          "hidden": [{"repo_id": m.repo_id, "reason": m.reason} for m in hidden]}, indent=2))
        return 0
    if not shown:
        print(f"no models llmchat can run match {args.query!r}")
    else:
        rows = [[m.repo_id + (" (gated)" if m.gated else ""), m.architecture or "-", _params(m.num_params),
                 "GGUF" if m.quants else _bytes(m.download_size), m.downloads if m.downloads is not None else "-",
                 m.likes if m.likes is not None else "-", (m.last_modified or "-")[:10]]
                + ([m.reason or "ok"] if args.all else []) for m in shown]
        header = ["MODEL", "ARCHITECTURE", "PARAMS", "SIZE", "DOWNLOADS", "LIKES", "UPDATED"]
        lines = _table(rows, header + (["CAN RUN"] if args.all else [])).splitlines()
        print(lines[0])
        for line, model in zip(lines[1:], shown):
            print(line)
            if model.quants:
                print(_quant_line(model))
        if any(m.quants for m in shown):
            print("\nGGUF repos: `llmchat models pull REPO --quant NAME` downloads one quant file.")
    if hidden:
        print(f"\n{len(hidden)} more result(s) hidden: {unsupported_note()}. "
              "Use --all to see them with the reason.")
    return 0


def _pull(store, args) -> int:
    repo, _, rev = args.repo.partition("@")
    cancel = threading.Event()
    try:
        if args.quant:
            model = pull_gguf(store, repo, args.quant, revision=rev or None, progress=_ProgressLine(not args.json),
                              cancel=cancel)
        else:
            model = store.pull(repo, revision=rev or None, progress=_ProgressLine(not args.json), cancel=cancel)
    except KeyboardInterrupt:
        cancel.set()
        again = f"{args.repo} --quant {args.quant}" if args.quant else args.repo
        print(f"\ninterrupted: run `llmchat models pull {again}` again to resume", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(model.to_dict(), indent=2))
    else:
        quant = f", {model.quant}" if model.quant else ""
        print(f"{model.name}: {model.architecture}{quant}, {_params(model.num_params)} parameters, "
              f"{_bytes(model.size_bytes)} at {model.path}")
    return 0


def _remote_rows(args) -> tuple[list[dict], list[str]]:
    """Each remote model as {"name": remote:NAME/ID, ...}, and one message per endpoint that did not answer."""
    if not getattr(args, "remote", False):
        return [], []
    endpoints = endpoints_from(args.endpoints)
    if not endpoints:
        return [], ["no remote endpoints: add [[endpoints]] to settings.toml or pass --endpoint NAME=URL"]
    rows, problems = [], []
    for endpoint, ids, problem in list_all(endpoints):
        rows += [{"name": endpoint.model_name(i), "kind": "remote", "endpoint": endpoint.name,
                  "base_url": endpoint.base_url, "id": i} for i in ids]
        if problem:
            problems.append(problem)
    return rows, problems


def _list(store, args) -> int:
    models = store.list()
    remote, problems = _remote_rows(args)
    for problem in problems:
        print(f"llmchat: {problem}", file=sys.stderr)
    if args.json:
        print(json.dumps([m.to_dict() for m in models] + remote, indent=2))
        return 0
    if remote:
        rows = [[r["name"], "remote", r["base_url"]] for r in remote]
        print(_table(rows, ["NAME", "KIND", "ENDPOINT"]) + "\n")
    if not models:
        print("no models yet: `llmchat models search QUERY`, `llmchat models pull REPO` "
              "or `llmchat models import PATH`")
        return 0
    rows = [[m.name, m.kind, m.architecture or "-", _params(m.num_params), m.quant or m.dtype or "-",
             m.context_length or "-", _bytes(m.size_bytes), m.source, _status(m)]
            for m in models]
    print(_table(rows, ["NAME", "KIND", "ARCHITECTURE", "PARAMS", "WEIGHTS", "CONTEXT", "SIZE", "SOURCE", "STATUS"]))
    return 0


def _rm(store, args) -> int:
    model = store.find(args.name)
    freed = store.remove(args.name)
    if args.json:
        print(json.dumps({"name": model.name if model else args.name, "freed_bytes": freed}))
    elif model is not None and model.source == "folder":
        print(f"unregistered {model.name}; its files stay at {model.path}")
    else:
        print(f"removed {model.name if model else args.name}, freed {_bytes(freed)}")
    return 0


def _import(store, args) -> int:
    before = {m.name for m in store.list()}
    model = store.import_path(args.path, copy=args.copy, progress=_ProgressLine(not args.json),
                              name=args.name, dtype=args.dtype, dequantize=args.dequantize)
    if args.json:
        print(json.dumps(model.to_dict(), indent=2))
    elif model.name in before:   # the store gives a new source a new name: the same name means the same source
        print(f"{model.name} is already in the library (from {args.path}): nothing imported")
    else:
        status = _status(model) if model.supported else f"cannot run: {model.reason}"
        quant = f", {model.quant} kept quantized" if model.quant else ""
        print(f"imported {model.name} ({model.architecture}, {_params(model.num_params)} parameters, "
              f"{_bytes(model.size_bytes)}{quant}) at {model.path}: {status}")
    return 0


def run(args) -> int:
    store = ModelStore()
    action = {"search": _search, "pull": _pull, "list": _list, "rm": _rm, "import": _import}
    return action[args.models_command](store, args)
