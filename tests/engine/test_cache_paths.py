"""The one rule llmchat's caches (prepared weights, KV blocks on disk) are kept within: a budget of at most a tenth
of the free disk, least recently used files deleted first, temporaries of dead writers cleared."""
from __future__ import annotations

import os
import shutil
import time

from llmchat.engine.cache_paths import STALE_TMP_S, disk_budget, drop_stale_temporaries, evict_least_recent
from llmchat.engine.quant import prepared_cache


def files_aged(folder, sizes, suffix=".bin"):
    """One file per size, the first the least recently used."""
    now = time.time()
    out = []
    for i, size in enumerate(sizes):
        path = folder / f"f{i}{suffix}"
        path.write_bytes(b"x" * size)
        os.utime(path, (now - 1000 + i, now - 1000 + i))
        out.append((path.stat().st_mtime, size, path))
    return out


def test_least_recently_used_go_first_until_the_target(tmp_path):
    files = files_aged(tmp_path, [100, 100, 100, 100])
    evict_least_recent(files, budget=400)                    # within the budget: nothing goes
    assert all(p.exists() for _, _, p in files)
    evict_least_recent(files, budget=300, down_to=150)       # over: oldest first, down to the target
    assert [p.exists() for _, _, p in files] == [False, False, False, True]


def test_a_file_gone_already_is_skipped(tmp_path):
    files = files_aged(tmp_path, [100, 100, 100])
    files[0][2].unlink()                                     # another process evicted it
    evict_least_recent(files, budget=200)
    assert [p.exists() for _, _, p in files] == [False, False, True]


def test_the_budget_is_the_cap_or_a_tenth_of_the_free_disk(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    assert disk_budget(tmp_path, cap=1 << 20) == min(1 << 20, free // 10)
    assert disk_budget(tmp_path, cap=free * 10) <= free // 10 + 4096
    assert disk_budget(tmp_path, cap=10, at_least=500) == 500          # the file about to be written fits
    assert disk_budget(tmp_path / "missing", cap=77) == 77


def test_only_old_temporaries_are_cleared(tmp_path):
    old, fresh = tmp_path / "a.tmp", tmp_path / "b.tmp"
    old.write_bytes(b"x")
    fresh.write_bytes(b"x")
    then = time.time() - STALE_TMP_S - 10
    os.utime(old, (then, then))
    drop_stale_temporaries([old, fresh])
    assert not old.exists() and fresh.exists()


def test_prepared_files_make_room_for_the_incoming_one(tmp_path, monkeypatch):
    monkeypatch.setattr(prepared_cache, "BUDGET_BYTES", 1000)
    files = files_aged(tmp_path, [300, 300, 300])
    prepared_cache._evict(tmp_path, incoming=300)            # 900 + 300 > 1000: the oldest goes
    assert [p.exists() for _, _, p in files] == [False, True, True]
