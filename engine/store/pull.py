"""`ModelStore.pull`: plan (refuse early), check access and disk, download blobs, link the snapshot."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from urllib.parse import urlparse

from . import hf_cache
from .download import Tracker, fetch_blob, partial_size, verify
from .hub import api, endpoint, ensure_online, hub_errors, timeout, token
from .inspect_folder import describe_folder
from .support import adapter_reason, architecture_reason, select_files, weights_reason
from .types import (CorruptDownloadError, DownloadCancelled, NotEnoughDiskError, OfflineError,
                    UnsupportedModelError)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def cached_snapshot(cache: Path, repo_id: str, revision: str | None) -> Path | None:
    """A complete snapshot already in the cache for this revision (used offline)."""
    rdir = hf_cache.repo_dir(cache, repo_id)
    rev = revision or "main"
    commit = rev
    ref = rdir / "refs" / rev
    if ref.is_file():
        commit = ref.read_text().strip()
    snap = rdir / "snapshots" / commit
    if snap.is_dir() and describe_folder(snap).complete:
        return snap
    return None


def _fetch_json(repo_id: str, filename: str, commit: str) -> dict | None:
    """A small JSON file read into memory (not the cache): decide before downloading anything."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status
    url = hf_hub_url(repo_id, filename, revision=commit, endpoint=endpoint())
    resp = get_session().get(url, headers=build_hf_headers(token=token(), library_name="llmchat"),
                             timeout=timeout())
    hf_raise_for_status(resp)
    try:
        return json.loads(resp.content)
    except ValueError:
        return None


def plan(repo_id: str, revision: str | None) -> tuple[str, str, list[str], dict]:
    """(commit, kind, files, siblings by name) or UnsupportedModelError with the reason, before any download."""
    with hub_errors(repo_id, revision):
        info = api().model_info(repo_id, revision=revision, files_metadata=True, timeout=timeout())
        names = [s.rfilename for s in info.siblings or []]
        siblings = {s.rfilename: s for s in info.siblings or []}
        kind, files = select_files(names)
        if kind == "adapter":
            reason = "" if "adapter_model.safetensors" in names else \
                "adapter has no adapter_model.safetensors (only .bin): llmchat loads safetensors only"
            reason = reason or adapter_reason(_fetch_json(repo_id, "adapter_config.json", info.sha))
        else:
            reason = weights_reason(names) if "config.json" in names else "no config.json in the repo"
            if not reason:
                config = info.config if (info.config or {}).get("architectures") else None
                config = config or _fetch_json(repo_id, "config.json", info.sha)
                reason = architecture_reason(config)
    if reason:
        raise UnsupportedModelError(f"{repo_id} cannot be used: {reason}")
    return info.sha, kind, files, siblings


def pull(store, repo_id: str, revision: str | None, progress=None,
         cancel: threading.Event | None = None) -> Path:
    cache = store.cache_dir
    try:
        ensure_online()
    except OfflineError:
        snap = cached_snapshot(cache, repo_id, revision)
        if snap is not None:
            return snap  # already complete: offline is no reason to fail
        raise
    commit, kind, files, siblings = plan(repo_id, revision)
    sizes = {n: (s.lfs.size if s.lfs else s.size) for n, s in siblings.items()}
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.utils import WeakFileLock, build_hf_headers

    rdir = hf_cache.repo_dir(cache, repo_id)
    blobs = rdir / "blobs"
    metas = {}
    with hub_errors(repo_id, revision):
        for name in files:  # HEAD each file: access (gated!), etag, size, final location
            metas[name] = get_hf_file_metadata(hf_hub_url(repo_id, name, revision=commit, endpoint=endpoint()),
                                               token=token(), timeout=timeout(), endpoint=endpoint())
    todo = [n for n in files if not (blobs / metas[n].etag).exists()]
    total = sum(metas[n].size or sizes.get(n) or 0 for n in files)
    have = sum(partial_size(blobs / (metas[n].etag + hf_cache.PARTIAL_SUFFIX)) for n in todo)
    need = sum(metas[n].size or sizes.get(n) or 0 for n in todo) - have
    free = store.free_space(cache)
    if need > free:
        raise NotEnoughDiskError(f"not enough disk space for {repo_id}: needs {human_bytes(need)}, "
                                 f"{human_bytes(free)} free in {cache}")
    blobs.mkdir(parents=True, exist_ok=True)
    tracker = Tracker(repo_id, len(files), total, total - need, progress)
    headers = build_hf_headers(token=token(), library_name="llmchat")
    headers["Accept-Encoding"] = "identity"
    for index, name in enumerate(files, 1):
        meta = metas[name]
        if name not in todo:
            continue
        if cancel is not None and cancel.is_set():
            raise DownloadCancelled("download cancelled; run pull again to resume")
        tracker.begin(name, index)
        partial = blobs / (meta.etag + hf_cache.PARTIAL_SUFFIX)
        file_headers = dict(headers)
        if urlparse(meta.location).netloc != urlparse(endpoint()).netloc:
            file_headers.pop("authorization", None)  # signed CDN urls must not get the token
        # The same lock file huggingface_hub takes for this blob: two pulls never append to one partial.
        lock = cache / ".locks" / rdir.name / f"{meta.etag}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        with WeakFileLock(lock):
            if (blobs / meta.etag).exists():
                continue  # another process finished it meanwhile
            fetch_blob(meta.location, partial, meta.size, file_headers, tracker, cancel, name)
            try:
                sib = siblings.get(name)
                verify(partial, meta.size, name, sha256=sib.lfs.sha256 if sib and sib.lfs else None,
                       git_oid=sib.blob_id if sib else None)
            except CorruptDownloadError as exc:
                partial.unlink(missing_ok=True)
                raise CorruptDownloadError(f"{repo_id}: {exc}; the bad file was removed, run pull again") from None
            os.replace(partial, blobs / meta.etag)
    # Only now does the snapshot appear: huggingface_hub links the verified blobs (and writes refs/<rev>).
    with hub_errors(repo_id, revision):
        for name in files:
            hf_hub_download(repo_id, name, revision=revision or "main", cache_dir=str(cache),
                            endpoint=endpoint(), token=token(), etag_timeout=timeout())
    tracker.emit(finished=True)
    snap = rdir / "snapshots" / commit
    info = describe_folder(snap)
    if not info.complete:
        raise CorruptDownloadError(f"{repo_id}: {info.reason}")
    return snap
