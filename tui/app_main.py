"""Entry point of `llmchat` without a subcommand."""
from __future__ import annotations

from .engines import resolve_model
from .paths import data_dir


def run_app(model: str | None = None) -> int:
    if model is not None:
        # Fail before the screen opens: a clear message on stderr instead of a broken app.
        resolve_model(model, data_dir())
    from .app import LlmChatApp
    LlmChatApp(model=model).run()
    return 0
