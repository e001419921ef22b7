"""Where llmchat keeps what it can rebuild (prepared weights, tokenizer snapshots): one root for all of it."""
from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir


def cache_root() -> Path:
    """LLMCHAT_CACHE_DIR (`~` expanded), else the platform's user cache dir for llmchat."""
    override = os.environ.get("LLMCHAT_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    return Path(user_cache_dir("llmchat"))
