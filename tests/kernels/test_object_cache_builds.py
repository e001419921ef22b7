"""The driver builds' object cache (driver_builds.py), fast and with the real g++: an object compiled once is taken
from the cache folder by a later session (the compiler is not run again), one changed byte of a header the source
includes makes another object, a folder that cannot be written falls back to the session's, and the least recently
used objects beyond the bound are dropped. Compiles are counted by a wrapper script named g++ first on PATH."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

import driver_builds
from driver_builds import CSRC, ROOT, compile_object, evict_objects


@pytest.fixture
def counted_gxx(tmp_path, monkeypatch):
    """g++ on PATH is a wrapper that counts its compiles (-c) and runs the real one; returns the count."""
    real = shutil.which("g++")
    assert real, "g++ missing (apt package g++)"
    bin_dir, count = tmp_path / "bin", tmp_path / "compiles"
    bin_dir.mkdir()
    wrapper = bin_dir / "g++"
    wrapper.write_text(f'#!/bin/sh\ncase " $* " in *" -c "*) echo c >> "{count}" ;; esac\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return lambda: len(count.read_text().splitlines()) if count.exists() else 0


def fresh_session(monkeypatch):
    """What a new test process starts with: no object in memory."""
    monkeypatch.setattr(driver_builds, "_objects", {})
    monkeypatch.setattr(driver_builds, "_cache_dirs", {})


def tiny_source(folder: Path) -> Path:
    folder.mkdir()
    (folder / "tiny.h").write_text("#define TINY 3\n")
    source = folder / "tiny.cpp"
    source.write_text('#include "tiny.h"\nint tiny() { return TINY; }\n')
    return source


def test_a_later_session_takes_the_object_from_disk_and_a_changed_header_makes_another(tmp_path, monkeypatch, counted_gxx):
    cache = tmp_path / "cache"
    monkeypatch.setenv("LLMCHAT_TEST_OBJECT_CACHE", str(cache))
    source = tiny_source(tmp_path / "src")

    fresh_session(monkeypatch)
    first, failed = compile_object(tmp_path / "session1", "g++", ["-mavx2"], str(source))
    assert failed is None and counted_gxx() == 1
    assert first.parent == cache and first.stat().st_size > 0
    inode = first.stat().st_ino

    fresh_session(monkeypatch)  # another run: nothing in memory, the object on disk
    again, failed = compile_object(tmp_path / "session2", "g++", ["-mavx2"], str(source))
    assert failed is None and counted_gxx() == 1  # not compiled again
    assert again == first and again.stat().st_ino == inode

    fresh_session(monkeypatch)
    (source.parent / "tiny.h").write_text("#define TINY 4\n")  # one byte of an included header
    changed, failed = compile_object(tmp_path / "session3", "g++", ["-mavx2"], str(source))
    assert failed is None and counted_gxx() == 2
    assert changed != first and changed.parent == cache and first.exists()

    # other flags, another object; a -D the source never reads, the same one
    other, _ = compile_object(tmp_path / "session3", "g++", ["-mfma"], str(source))
    same, _ = compile_object(tmp_path / "session3", "g++", ["-DUNUSED", "-mavx2"], str(source))
    assert other not in (first, changed) and same == changed and counted_gxx() == 3
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]


def test_a_cache_folder_that_cannot_be_written_falls_back_to_the_session_folder(tmp_path, monkeypatch, counted_gxx):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("LLMCHAT_TEST_OBJECT_CACHE", str(tmp_path / "a-file" / "cache"))
    source = tiny_source(tmp_path / "src")
    fresh_session(monkeypatch)
    session = tmp_path / "session"
    session.mkdir()
    obj, failed = compile_object(session, "g++", [], str(source))
    assert failed is None and obj.parent == session and obj.exists() and counted_gxx() == 1


def test_compiles_name_repository_paths_relative_to_it():
    """So the preprocessed text, the key and the object are the same in every clone."""
    assert driver_builds._portable([f"-I{CSRC}", "-O2", str(ROOT / "tests" / "kernels" / "core_driver.cpp"), "/usr/x.cpp"]) \
        == ["-Ikernels/csrc", "-O2", "tests/kernels/core_driver.cpp", "/usr/x.cpp"]


def test_the_least_recently_used_objects_beyond_the_bound_are_dropped(tmp_path):
    now = time.time()
    ages = {"a.o": 5000, "b.o": 4000, "c.o": 3000, "recent.o": 10}  # seconds since last use
    for name, age in ages.items():
        (tmp_path / name).write_bytes(b"x" * 100)
        os.utime(tmp_path / name, (now - age, now - age))
    (tmp_path / ".tmp-killed.o").write_bytes(b"x")
    os.utime(tmp_path / ".tmp-killed.o", (now - 7200, now - 7200))
    (tmp_path / ".tmp-compiling.o").write_bytes(b"x")

    dropped = evict_objects(tmp_path, max_bytes=250, keep_seconds=3600)
    assert sorted(p.name for p in dropped) == ["a.o", "b.o"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".o") == [".tmp-compiling.o", "c.o", "recent.o"]

    # over the bound with only recent objects left: none dropped (a running session may still link them)
    assert evict_objects(tmp_path, max_bytes=0, keep_seconds=4000) == []


def test_a_failed_compile_is_reported_and_never_kept(tmp_path, monkeypatch, counted_gxx):
    cache = tmp_path / "cache"
    monkeypatch.setenv("LLMCHAT_TEST_OBJECT_CACHE", str(cache))
    source = tiny_source(tmp_path / "src")
    session = tmp_path / "session"
    session.mkdir()
    fresh_session(monkeypatch)
    source.write_text("int broken( { return 0; }\n")  # preprocesses, fails to compile
    _, failed = compile_object(session, "g++", [], str(source))
    assert failed is not None and failed.returncode != 0 and "error" in failed.stderr
    source.write_text('#include "missing.h"\n')  # does not even preprocess
    _, failed = compile_object(session, "g++", [], str(source))
    assert failed is not None and "missing.h" in failed.stderr
    assert not [p for p in cache.iterdir() if p.suffix == ".o"] and not list(session.iterdir())
