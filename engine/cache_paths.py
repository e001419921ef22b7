"""Where llmchat keeps what it can rebuild (prepared weights, tokenizer snapshots, KV blocks): one root for all of
it, and the one rule its caches are kept within (a budget, least recently used first)."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterable

from platformdirs import user_cache_dir


def cache_root() -> Path:
    """LLMCHAT_CACHE_DIR (`~` expanded), else the platform's user cache dir for llmchat."""
    override = os.environ.get("LLMCHAT_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    return Path(user_cache_dir("llmchat"))


STALE_TMP_S = 3600   # a temporary file this old belongs to a writer that died: no write takes an hour


def disk_budget(folder: Path, cap: int, at_least: int = 0) -> int:
    """Bytes a cache in `folder` may hold: `cap`, or a tenth of the disk's free space if that is less (but at
    least `at_least`, the file about to be written)."""
    try:
        stat = os.statvfs(folder)
    except (OSError, AttributeError):
        return max(cap, at_least)
    return max(min(cap, stat.f_bavail * stat.f_frsize // 10), at_least)


def evict_least_recent(files: list[tuple[float, int, Path]], budget: int, down_to: int | None = None) -> None:
    """files: (mtime, bytes, path). When they hold more than `budget` bytes, delete the least recently used
    until they hold at most `down_to` (default: the budget). A file gone already (another process) is skipped."""
    total = sum(size for _, size, _ in files)
    if total <= budget:
        return
    target = budget if down_to is None else down_to
    for _, size, path in sorted(files):
        if total <= target:
            break
        try:
            path.unlink()
            total -= size
        except OSError:
            pass


def drop_stale_temporaries(paths: Iterable[Path]) -> None:
    """Delete the temporary files that writers which died left behind."""
    now = time.time()
    for path in paths:
        try:
            if now - path.stat().st_mtime > STALE_TMP_S:
                path.unlink()
        except OSError:
            pass
