"""Entry point of `llmchat` without a subcommand."""
from __future__ import annotations

import sys
from pathlib import Path

from llmchat.engine.remote import is_remote, merge_endpoints, parse_endpoint_arg, split_remote
from llmchat.engine.store import ModelStore, resolve_model

from ..paths import data_dir
from .app import LlmChatApp


def prepare_model(model: str) -> str:
    """Check `--model` before the screen opens (a wrong name is one line, not a screen) and return what the
    session names it by. A .gguf file is registered in place here, once (its weights stay in the file), and
    named by its library name; the app loads it once, when the session first uses it."""
    if is_remote(model):
        split_remote(model)   # ValueError when malformed; the endpoint is checked when the session uses it
        return model
    path = Path(model).expanduser()
    if path.suffix.lower() == ".gguf" and path.is_file():
        print(f"llmchat: registering {path.name} in the library (in place)…", file=sys.stderr)
        return ModelStore(data_dir=data_dir()).import_path(path).name
    resolve_model(model, data_dir())    # FileNotFoundError / StoreError with a clear message
    return str(path.resolve()) if path.exists() else model


def run_app(model: str | None = None, endpoints: list[str] | tuple = ()) -> int:
    # A bad --endpoint is refused before the screen opens; settings.toml's are merged (and checked) by the app.
    remote = merge_endpoints([], [parse_endpoint_arg(e) for e in endpoints])
    if model is not None:
        model = prepare_model(model)
    LlmChatApp(model=model, endpoints=remote).run()
    return 0
