"""Name or path -> the model folder the engine loads: the one rule every front end (run, serve, compare, bench,
the app) and the engine's public constructors (LLM, AsyncEngine) follow."""
from __future__ import annotations

from pathlib import Path

from .store import ModelStore


def resolve_model(name_or_path: str | Path, data_dir: str | Path | None = None) -> Path:
    """A model folder -> itself; a .gguf file -> registered in place (cheap, instant after the first time) and
    its library folder; a library name or repo id -> its folder. FileNotFoundError (nothing by that name or
    path) or StoreError (a model that cannot be loaded) otherwise, with a message for the user. No network.
    data_dir: the library's (default: LLMCHAT_DATA_DIR, else the platform's data dir)."""
    return ModelStore(data_dir=data_dir).resolve(name_or_path)
