"""Imported models: a small JSON registry in llmchat's data dir (never holds tokens or secrets)."""
from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from pathlib import Path

import platformdirs

_LOCK = threading.Lock()


def default_data_dir() -> Path:
    """llmchat's data dir (chats, exports, the library): LLMCHAT_DATA_DIR (`~` expanded), else the platform's.
    The one place that reads the variable."""
    override = os.environ.get("LLMCHAT_DATA_DIR")
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_data_dir("llmchat", appauthor=False))


def safe_name(text: str) -> str:
    """A registry name usable as a folder name too."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return name or "model"


class Registry:
    """name -> {"path": str, "source": "folder"|"gguf"|"copy", "owned": bool} in models/registry.json."""

    def __init__(self, data_dir: Path):
        self.dir = Path(data_dir) / "models"
        self.file = self.dir / "registry.json"

    def load(self) -> dict[str, dict]:
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
            return data.get("models", {}) if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save(self, models: dict[str, dict]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".registry-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "models": models}, f, indent=2, sort_keys=True)
        os.replace(tmp, self.file)  # atomic: readers never see half a file

    def add(self, name: str, path: Path, source: str, owned: bool, origin: dict | None = None) -> None:
        """`origin` identifies what was imported (file path, size, mtime) so a re-import is a no-op."""
        with _LOCK:
            models = self.load()
            models[name] = {"path": str(Path(path).resolve()), "source": source, "owned": owned,
                            **({"origin": origin} if origin else {})}
            self._save(models)

    def find_origin(self, origin: dict) -> str | None:
        for name, entry in self.load().items():
            if entry.get("origin") == origin:
                return name
        return None

    def remove(self, name: str) -> dict | None:
        with _LOCK:
            models = self.load()
            entry = models.pop(name, None)
            if entry is not None:
                self._save(models)
            return entry

    def unique_name(self, wanted: str, taken: set[str]) -> str:
        base, n, name = safe_name(wanted), 2, safe_name(wanted)
        while name in taken or name in self.load():
            name, n = f"{base}-{n}", n + 1
        return name
