"""Where llmchat keeps its files: platformdirs locations, overridable by env for tests and portable setups."""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from llmchat.engine.store.registry import default_data_dir

APP_NAME = "llmchat"


def data_dir() -> Path:
    """Chats database, exports and the model library (LLMCHAT_DATA_DIR overrides; the store reads it)."""
    path = default_data_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def config_dir() -> Path:
    """settings.toml (LLMCHAT_CONFIG_DIR overrides)."""
    override = os.environ.get("LLMCHAT_CONFIG_DIR")
    path = Path(override).expanduser() if override else Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def exports_dir() -> Path:
    path = data_dir() / "exports"
    path.mkdir(parents=True, exist_ok=True)
    return path
