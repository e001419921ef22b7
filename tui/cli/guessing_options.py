"""--speculative and --draft, shared by run, serve and bench: how the engine guesses tokens to verify in one pass
(engine/speculation.py, engine/draft_model.py). Both are engine options; bench hands them to every engine it
builds through the environment EngineConfig reads (LLMCHAT_SPECULATIVE, LLMCHAT_DRAFT_MODEL)."""
from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

from llmchat.engine.store import resolve_model

SPECULATIVE_HELP = ("guess tokens from the text so far and verify them in one pass (the same tokens, faster where "
                    "replies repeat their context): auto (default: while few sessions decode), ngram (always), off")
DRAFT_HELP = ("a smaller model with the same tokenizer (a folder, a .gguf file or a library name) that guesses "
              "where the text offers nothing to repeat, e.g. Qwen2.5-0.5B for a Qwen2.5 7B; same tokens, "
              "faster when its guesses hold")


def add_guessing_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--speculative", choices=["auto", "ngram", "off"], default=None, help=SPECULATIVE_HELP)
    parser.add_argument("--draft", metavar="MODEL", default=None, help=DRAFT_HELP)


def guessing_engine_options(args: argparse.Namespace) -> dict:
    """The options given, as engine keyword arguments (unset: the engine's defaults); a draft model that
    cannot be found is a ValueError naming it, before anything loads."""
    options = {} if args.speculative is None else {"speculative": args.speculative}
    if args.draft is not None:
        if args.speculative == "off":
            raise ValueError("--draft guesses tokens: it does not go with --speculative off")
        try:
            options["draft_model"] = str(resolve_model(args.draft))
        except (FileNotFoundError, RuntimeError) as exc:   # not found, or a model that cannot load (StoreError)
            raise ValueError(f"--draft: {exc}") from None
    return options


@contextlib.contextmanager
def guessing_environment(args: argparse.Namespace) -> Iterator[None]:
    """The options given, for every engine built inside (EngineConfig reads the environment); the environment
    as it was afterwards, so a caller in the same process (a test, a later command) sees no trace of them."""
    options = guessing_engine_options(args)
    values = {"LLMCHAT_SPECULATIVE": options.get("speculative"), "LLMCHAT_DRAFT_MODEL": options.get("draft_model")}
    before = {name: os.environ.get(name) for name in values}
    os.environ.update({name: value for name, value in values.items() if value is not None})
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
