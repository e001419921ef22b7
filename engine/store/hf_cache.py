"""The standard Hugging Face cache (HF_HOME / HF_HUB_CACHE): find model snapshots, measure, delete.

Layout: <cache>/models--org--name/{blobs/<etag>, snapshots/<commit>/<file> -> ../../blobs/<etag>,
refs/<branch> = commit}. Partial downloads live in blobs/ as <etag>.llmchat-partial.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants

PARTIAL_SUFFIX = ".llmchat-partial"


def hub_cache_dir() -> Path:
    """Read the environment at call time (huggingface_hub's constants are frozen at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)


def repo_dir(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


@dataclass
class CachedSnapshot:
    repo_id: str
    commit: str | None          # None: only partial blobs, no snapshot yet
    path: Path                  # snapshot folder (or repo folder when commit is None)
    refs: list[str]
    is_only: bool               # the repo's single snapshot


def read_refs(rdir: Path) -> dict[str, list[str]]:
    """commit -> ref names (main, pr/1, ...)."""
    out: dict[str, list[str]] = {}
    refs = rdir / "refs"
    if refs.is_dir():
        for p in refs.rglob("*"):
            if p.is_file():
                try:
                    out.setdefault(p.read_text().strip(), []).append(p.relative_to(refs).as_posix())
                except OSError:
                    continue
    return out


def scan(cache: Path) -> list[CachedSnapshot]:
    found: list[CachedSnapshot] = []
    if not cache.is_dir():
        return found
    for rdir in sorted(cache.glob("models--*")):
        repo_id = rdir.name[len("models--"):].replace("--", "/")
        snaps = sorted(p for p in (rdir / "snapshots").glob("*") if p.is_dir()) if (rdir / "snapshots").is_dir() else []
        refs = read_refs(rdir)
        for snap in snaps:
            found.append(CachedSnapshot(repo_id, snap.name, snap, refs.get(snap.name, []), len(snaps) == 1))
        if not snaps and any((rdir / "blobs").glob("*" + PARTIAL_SUFFIX)):
            found.append(CachedSnapshot(repo_id, None, rdir, [], True))
    return found


def _real_size(path: Path) -> int:
    """Bytes of regular files under path (symlinks not followed: each blob counted once)."""
    total = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                try:
                    total += os.path.getsize(p)
                except OSError:
                    pass
    return total


def _blobs_of(snapshot: Path) -> set[str]:
    blobs = set()
    for p in snapshot.rglob("*"):
        if p.is_symlink():
            blobs.add(os.path.realpath(p))
    return blobs


def remove_snapshot(cache: Path, snap: CachedSnapshot) -> int:
    """Delete a snapshot (the whole repo folder when it is the only one). Returns bytes freed."""
    rdir = repo_dir(cache, snap.repo_id)
    if snap.is_only or snap.commit is None:
        freed = _real_size(rdir)
        shutil.rmtree(rdir, ignore_errors=True)
        shutil.rmtree(cache / ".locks" / rdir.name, ignore_errors=True)
        return freed
    mine = _blobs_of(snap.path)
    others = set()
    for other in (rdir / "snapshots").iterdir():
        if other.name != snap.commit:
            others |= _blobs_of(other)
    freed = _real_size(snap.path)
    shutil.rmtree(snap.path, ignore_errors=True)
    for blob in mine - others:
        try:
            freed += os.path.getsize(blob)
            os.remove(blob)
        except OSError:
            pass
    for ref in snap.refs:
        (rdir / "refs" / ref).unlink(missing_ok=True)
    return freed
