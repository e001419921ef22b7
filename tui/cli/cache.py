"""`llmchat cache`: the KV disk tier (engine/kv_disk.py) per model: entries, size, hit rate; `clear` all of it or
one model's."""
from __future__ import annotations

import argparse

from llmchat.engine.kv_disk import cache_dir, clear, models_on_disk
from llmchat.engine.store import resolve_model


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("cache", help="the KV blocks kept on disk (chats reopen warm): show or clear",
                              description="Full KV blocks kept on disk per model, so a reopened chat does not pay "
                                          "its prompt again.")
    p.add_argument("action", nargs="?", choices=["show", "clear"], default="show")
    p.add_argument("model", nargs="?", help="with clear: only this model's blocks (a name, folder or .gguf)")


def run(args: argparse.Namespace) -> int:
    if args.action == "clear":
        model = resolve_model(args.model) if args.model else None
        freed = clear(model=model)
        print(f"cleared {_size(freed)} of KV blocks" + (f" of {args.model}" if args.model else ""))
        return 0
    if args.model:
        raise ValueError("a model is given only with `clear` (`llmchat cache clear MODEL`)")
    models = models_on_disk()
    if not models:
        print(f"no KV blocks on disk ({cache_dir()})")
        return 0
    print(f"{'entries':>8} {'size':>10} {'hit rate':>9}  {'dtype':<9} model")
    for m in sorted(models, key=lambda m: -m["bytes"]):
        looked = m["looked_up_tokens"]
        rate = f"{m['hit_tokens'] / looked:.0%}" if looked else "-"
        print(f"{m['entries']:>8} {_size(m['bytes']):>10} {rate:>9}  {m['dtype'].replace('torch.', ''):<9} {m['model']}")
    print(f"in {cache_dir()}; hit rate: prompt tokens read from disk / looked for there")
    return 0


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
