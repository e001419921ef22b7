"""Moving bytes from the Hub into the HF cache: the files of one commit (HEAD for access and etags, disk
check, blob locks, then the snapshot links), each blob resumable, with progress, cancel and verification.

huggingface_hub 2.x retries a dropped connection within one call but deletes its temporary file on any
failure, so a cancelled or killed download would start over. We keep `<etag>.llmchat-partial` next to
the blobs instead, continue it with an HTTP Range request, check size and hash, then rename it to the blob
name huggingface_hub expects; hf_hub_download then only links it into the snapshot.
The Hub client (~0.3 s with its HTTP stack) is imported in the functions that call it: starts never wait for it.
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

from .hf_cache import PARTIAL_SUFFIX, repo_dir
from .hub import endpoint, hub_errors, timeout, token
from .types import CorruptDownloadError, DownloadCancelled, DownloadProgress, NotEnoughDiskError, OfflineError

CHUNK = 1 << 20
MAX_RETRIES = 5


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


class Tracker:
    """Aggregates bytes over a whole pull and calls the progress callback (at most ~10 times/s). Bytes that
    arrive within the interval are reported at its end, from a timer: a connection that sends a burst and then
    stalls still shows what it sent (without it, the burst waited for the next byte or the read timeout)."""

    INTERVAL = 0.1

    def __init__(self, repo_id: str, num_files: int, total: int, done: int,
                 callback: Callable[[DownloadProgress], None] | None):
        self.repo_id, self.num_files, self.total, self.done = repo_id, num_files, total, done
        self.callback, self.filename, self.index = callback, "", 0
        self.start, self.start_done, self.last = time.monotonic(), done, 0.0
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        self.closed = False

    def begin(self, filename: str, index: int) -> None:
        self.filename, self.index = filename, index
        self.emit(force=True)

    def add(self, n: int) -> None:
        self.done += n
        self.emit()

    def emit(self, force: bool = False, finished: bool = False) -> None:
        if self.callback is None:
            return
        with self.lock:
            if self.closed:
                return
            now = time.monotonic()
            if not force and not finished and now - self.last < self.INTERVAL:
                if self.timer is None:  # report these bytes at the interval's end unless more come first
                    self.timer = threading.Timer(self.INTERVAL - (now - self.last), self._flush)
                    self.timer.daemon = True
                    self.timer.start()
                return
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            self.last = now
            self.closed = finished
            elapsed = now - self.start
            rate = (self.done - self.start_done) / elapsed if elapsed > 0 else 0.0
            eta = (self.total - self.done) / rate if rate > 0 else None
            # under the lock: reports arrive in order, whichever thread sends them
            self.callback(DownloadProgress(self.repo_id, self.filename, self.index, self.num_files, self.done,
                                           self.total, rate, 0.0 if finished else eta, finished))

    def _flush(self) -> None:
        try:
            self.emit(force=True)
        except Exception:  # noqa: BLE001 - a late report to a front end already gone: the pull is unaffected
            pass

    def close(self) -> None:
        """No report after this (a pending one is dropped): the pull has finished, failed or been cancelled."""
        with self.lock:
            self.closed = True
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None


def verify(path: Path, expected_size: int | None, filename: str, sha256: str | None = None,
           git_oid: str | None = None) -> None:
    """Size, then the content hash the Hub lists for the file: LFS sha256, else the git blob sha1."""
    size = path.stat().st_size
    if expected_size is not None and size != expected_size:
        raise CorruptDownloadError(f"{filename}: got {size} bytes, the Hub announced {expected_size}")
    if sha256:
        digest, want = hashlib.sha256(), sha256
    elif git_oid and re.fullmatch(r"[0-9a-f]{40}", git_oid):
        digest, want = hashlib.sha1(b"blob %d\0" % size), git_oid
    else:
        return  # no content hash known: the size check is all we can do
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != want:
        raise CorruptDownloadError(f"{filename}: checksum mismatch (expected {want}, got {digest.hexdigest()})")


def fetch_blob(url: str, partial: Path, expected_size: int | None, headers: dict, tracker: Tracker,
               cancel: threading.Event | None, filename: str) -> None:
    """Download `url` into `partial`, continuing what is there; retries dropped connections."""
    # httpx and huggingface_hub's session (~0.1 s): when a download runs, not whenever the store is imported
    import httpx2
    from huggingface_hub.utils import get_session, hf_raise_for_status


    failures = 0
    while True:
        have = partial.stat().st_size if partial.exists() else 0
        if expected_size is not None and have > expected_size:
            partial.unlink()  # longer than the file: not ours to continue
            tracker.add(-have)
            have = 0
        if expected_size is not None and have == expected_size:
            return
        request_headers = dict(headers)
        if have:
            request_headers["Range"] = f"bytes={have}-"
        try:
            with hub_errors(filename):
                with get_session().stream("GET", url, headers=request_headers,
                                          timeout=httpx2.Timeout(timeout() * 3, connect=timeout())) as resp:
                    hf_raise_for_status(resp)
                    mode = "ab"
                    if have and resp.status_code == 200:  # server ignored Range: start over
                        tracker.add(-have)
                        mode = "wb"
                    with open(partial, mode) as f:
                        for chunk in resp.iter_bytes():  # as received: a drop loses nothing
                            if cancel is not None and cancel.is_set():
                                raise DownloadCancelled("download cancelled; run pull again to resume")
                            f.write(chunk)
                            tracker.add(len(chunk))
                            failures = 0
            if expected_size is None:
                return
            if partial_size(partial) < expected_size:  # body ended early without a transport error
                raise OfflineError(f"{filename}: connection closed early")
        except OfflineError:
            failures += 1
            if failures > MAX_RETRIES:
                raise
            time.sleep(min(0.5 * failures, 3.0))


def partial_size(partial: Path) -> int:
    try:
        return os.path.getsize(partial)
    except OSError:
        return 0


def fetch_files(store, repo_id: str, revision: str | None, commit: str, files: list[str], siblings: dict,
                progress=None, cancel: threading.Event | None = None) -> Path:
    """Download `files` of `commit` into the HF cache (resumable, verified) and link them into its snapshot."""
    cache = store.cache_dir
    sizes = {n: (s.lfs.size if s.lfs else s.size) for n, s in siblings.items()}
    # huggingface_hub's download helpers (~0.3 s): when a download runs
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    rdir = repo_dir(cache, repo_id)
    blobs = rdir / "blobs"
    metas = {}
    with hub_errors(repo_id, revision):
        for name in files:  # HEAD each file: access (gated!), etag, size, final location
            metas[name] = get_hf_file_metadata(hf_hub_url(repo_id, name, revision=commit, endpoint=endpoint()),
                                               token=token(), timeout=timeout(), endpoint=endpoint())
    todo = [n for n in files if not (blobs / metas[n].etag).exists()]
    total = sum(metas[n].size or sizes.get(n) or 0 for n in files)
    have = sum(partial_size(blobs / (metas[n].etag + PARTIAL_SUFFIX)) for n in todo)
    need = sum(metas[n].size or sizes.get(n) or 0 for n in todo) - have
    free = store.free_space(cache)
    if need > free:
        raise NotEnoughDiskError(f"not enough disk space for {repo_id}: needs {human_bytes(need)}, "
                                 f"{human_bytes(free)} free in {cache}")
    blobs.mkdir(parents=True, exist_ok=True)
    tracker = Tracker(repo_id, len(files), total, total - need, progress)
    try:
        _fetch_all(cache, rdir, files, todo, metas, siblings, tracker, cancel, repo_id)
        # Only now does the snapshot appear: huggingface_hub links the verified blobs (and writes refs/<rev>).
        with hub_errors(repo_id, revision):
            for name in files:
                hf_hub_download(repo_id, name, revision=revision or "main", cache_dir=str(cache),
                                endpoint=endpoint(), token=token(), etag_timeout=timeout())
        tracker.emit(finished=True)
    finally:
        tracker.close()
    return rdir / "snapshots" / commit


def _fetch_all(cache: Path, rdir: Path, files: list[str], todo: list[str], metas: dict, siblings: dict,
               tracker: Tracker, cancel: threading.Event | None, repo_id: str) -> None:
    """Each blob not yet in the cache: fetched into its partial file, verified, renamed to its etag."""
    from huggingface_hub.utils import WeakFileLock, build_hf_headers

    blobs = rdir / "blobs"
    headers = build_hf_headers(token=token(), library_name="llmchat")
    headers["Accept-Encoding"] = "identity"
    for index, name in enumerate(files, 1):
        meta = metas[name]
        if name not in todo:
            continue
        if cancel is not None and cancel.is_set():
            raise DownloadCancelled("download cancelled; run pull again to resume")
        tracker.begin(name, index)
        partial = blobs / (meta.etag + PARTIAL_SUFFIX)
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
