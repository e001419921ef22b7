"""--kv-disk on|off, shared by the app, run, serve and bench: whether full KV blocks also go to the disk tier
under the prefix cache (engine/kv_disk.py), so a chat reopened after a restart starts warm. It sets
LLMCHAT_KV_DISK, which EngineConfig reads, so every engine the command builds follows it."""
from __future__ import annotations

import argparse
import os

HELP = ("keep full KV blocks on disk too, so a chat (or a conversation resent to serve) starts warm after a "
        "restart: on (default) or off; `llmchat cache` shows and clears it")


def add_kv_disk_option(parser: argparse.ArgumentParser, default: str | None = None, help: str = HELP) -> None:
    parser.add_argument("--kv-disk", choices=["on", "off"], default=default, help=help)


def apply_kv_disk(args: argparse.Namespace) -> None:
    if getattr(args, "kv_disk", None) is not None:
        os.environ["LLMCHAT_KV_DISK"] = "1" if args.kv_disk == "on" else "0"
