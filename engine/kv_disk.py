"""A disk tier under the prefix cache: full KV blocks outlive the process, so a reopened chat, a conversation a
client sends again after a restart, or a system prompt shared across runs starts warm.

Each full, computed block is written once to cache_root()/kv/<identity>/<digest>.kv, where the identity covers
everything that shapes KV bits (the model's files, dtype, the kernels' paths and the engine's switches, the
KV layout, this llmchat version) and the digest chains the block's tokens and adapter onto its parent's, as the
RAM prefix cache's hash does but stable across processes. A lookup that misses in RAM reads the blocks that
continue the chain on disk into fresh KV blocks, which then enter the RAM prefix cache as if computed.

Writing never delays a step: the engine thread copies a finished block out (a memcpy) and a writer thread
writes it under a temporary name and renames it, so no reader ever sees half a file. Every read checks the
header, the block's tokens and a CRC32 of the bytes; a file that fails is deleted with a log line and the
block is computed instead. A full disk or a read-only folder turns writing off with one warning. Files beyond
the budget (default: 4 GiB or a tenth of the free disk, the smaller) are evicted least recently used first,
whole files, across every model's folder. Two processes may share the folder: files only ever appear whole
and are never rewritten in place.
"""
from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
import zlib
from array import array
from pathlib import Path

from .cache_paths import cache_root, disk_budget, drop_stale_temporaries, evict_least_recent

log = logging.getLogger(__name__)

KV_LAYOUT_VERSION = 1            # bump when a block's bytes mean something else (layout, dtype rules)
MAGIC = b"LLMCKV01"
HEADER = struct.Struct("<8sIQI")  # magic, tokens in the block, payload bytes, payload crc32
DEFAULT_BUDGET_BYTES = 4 << 30
MAX_PENDING_BYTES = 256 << 20    # blocks queued for the writer; beyond it a block is not written (never waits)


def cache_dir() -> Path:
    return cache_root() / "kv"


def block_digest(parent: bytes | None, token_ids, adapter_key: str) -> bytes:
    """A full block's key: its tokens and adapter chained onto its parent's digest (stable across processes)."""
    h = hashlib.blake2b(parent or b"", digest_size=16)
    h.update(adapter_key.encode())
    h.update(b"\0")
    h.update(array("q", token_ids).tobytes())
    return h.digest()


def identity_key(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def default_budget(folder: Path, gb: float | None) -> int:
    return int(gb * 2**30) if gb is not None else disk_budget(folder, DEFAULT_BUDGET_BYTES)


class KVDiskTier:
    """One model identity's folder of KV blocks: present / read on the engine thread, write queued for a
    writer thread. Counters: hit_tokens (restored from disk), written, discarded."""

    def __init__(self, identity: dict, block_size: int, budget_gb: float | None = None, root: Path | None = None):
        self.root = root or cache_dir()
        self.folder = self.root / identity_key(identity)
        self.block_size = block_size
        self.enabled = self.writable = True
        self.hit_tokens = self.written = self.discarded = 0
        self.looked_up_tokens = 0        # prompt tokens past the RAM match, looked for on disk
        self._stats_saved = (0, 0)       # what close() has added to the folder's stats.json
        self._known: set[bytes] = set()
        self._queued: set[bytes] = set()
        self._pending_bytes = 0
        self._queue: queue.Queue = queue.Queue()
        self._idle = threading.Condition()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._known = {bytes.fromhex(p.stem) for p in self.folder.glob("*.kv") if len(p.stem) == 32}
            info = self.folder / "identity.json"
            if not info.exists():
                _write_whole(info, json.dumps(identity, indent=1, sort_keys=True).encode())
        except OSError as exc:
            log.warning("KV disk cache off: %s: %s", self.folder, exc.strerror or exc)
            self.enabled = False
            return
        self.budget = default_budget(self.root, budget_gb)
        self._writer = threading.Thread(target=self._write_loop, name="llmchat-kv-disk", daemon=True)
        self._writer.start()
        atexit.register(self.close)   # a reply's last blocks reach the disk before the process ends

    # ---- engine thread ---------------------------------------------------------------------------------
    def path(self, digest: bytes) -> Path:
        return self.folder / f"{digest.hex()}.kv"

    def present(self, digest: bytes) -> bool:
        """On disk, written by this process or another one."""
        if not self.enabled:
            return False
        if digest in self._known:
            return True
        if self.path(digest).exists():
            self._known.add(digest)
            return True
        return False

    def read(self, digest: bytes, token_ids: tuple[int, ...], nbytes: int) -> bytes | None:
        """The block's KV bytes, or None (missing, or damaged: then deleted with a log line)."""
        path = self.path(digest)
        try:
            with open(path, "rb") as handle:
                blob = handle.read()
        except OSError:                      # evicted by another process since: compute it
            self._known.discard(digest)
            return None
        head = HEADER.size + 4 * self.block_size
        if len(blob) != head + nbytes:
            return self._discard(path, digest, f"{len(blob)} bytes, expected {head + nbytes}")
        magic, count, size, crc = HEADER.unpack_from(blob)
        if magic != MAGIC or count != self.block_size or size != nbytes:
            return self._discard(path, digest, "not a KV block of this layout")
        if tuple(array("i", blob[HEADER.size:head])) != tuple(token_ids):
            return self._discard(path, digest, "another block's tokens")
        payload = memoryview(blob)[head:]
        if zlib.crc32(payload) != crc:
            return self._discard(path, digest, "checksum mismatch")
        try:
            os.utime(path)                   # least recently used goes first
        except OSError:
            pass
        return payload

    def wants(self, digest: bytes) -> bool:
        """Whether a computed block should be queued: writing is on and it is neither queued nor on disk. The
        caller asks before it copies the block out."""
        return self.enabled and self.writable and digest not in self._queued and not self.present(digest)

    def write(self, digest: bytes, token_ids: tuple[int, ...], data) -> None:
        """Queue a computed block that wants() took. data: its KV as bytes, copied by the caller (a flat uint8
        tensor or numpy array: anything with a buffer; this module stays free of torch, so the command line
        lists and clears the folders without loading it)."""
        nbytes = memoryview(data).nbytes
        if self._pending_bytes + nbytes > MAX_PENDING_BYTES:
            return                           # the writer is behind: this block stays in RAM only
        with self._idle:
            self._pending_bytes += nbytes
            self._queued.add(digest)
        self._queue.put((digest, tuple(token_ids), data))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued block is written (or given up); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._queued:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self) -> None:
        """Write what is queued (up to 30 s) and add this process' lookups and hits to the folder's stats."""
        self.flush(30.0)
        looked_up, hits = self.looked_up_tokens - self._stats_saved[0], self.hit_tokens - self._stats_saved[1]
        if looked_up:
            add_stats(self.folder, looked_up, hits)
            self._stats_saved = (self.looked_up_tokens, self.hit_tokens)

    # ---- writer thread ---------------------------------------------------------------------------------
    def _write_loop(self) -> None:
        while True:
            digest, token_ids, data = self._queue.get()
            try:
                if self.writable and not self.path(digest).exists():
                    self._write_block(digest, token_ids, data)
            except Exception:   # never let the writer die: the blocks simply stay in RAM only
                log.exception("KV disk cache: writing a block failed")
            finally:
                with self._idle:
                    self._queued.discard(digest)
                    self._pending_bytes -= memoryview(data).nbytes
                    self._idle.notify_all()

    def _write_block(self, digest: bytes, token_ids: tuple[int, ...], data) -> None:
        payload = memoryview(data).tobytes()
        header = HEADER.pack(MAGIC, len(token_ids), len(payload), zlib.crc32(payload))
        try:
            _write_whole(self.path(digest), header + array("i", token_ids).tobytes() + payload)
        except OSError as exc:   # a full disk, a read-only folder: recompute from now on, say so once
            self.writable = False
            log.warning("KV disk cache: writing to %s failed (%s); blocks stay in memory only",
                        self.folder, exc.strerror or exc)
            return
        self._known.add(digest)
        self.written += 1
        if self.written % 64 == 1:
            evict(self.root, self.budget)

    def _discard(self, path: Path, digest: bytes, why: str) -> None:
        log.warning("KV disk cache: %s: %s; discarded, computing the block", path.name, why)
        self.discarded += 1
        self._known.discard(digest)
        try:
            path.unlink()
        except OSError:
            pass
        return None


def _write_whole(path: Path, data: bytes) -> None:
    """Write under a temporary name and rename: a reader sees the whole file or none."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise


def folder_usage(root: Path) -> list[tuple[float, int, Path]]:
    """(mtime, bytes, path) of every block file under root, every model's folder."""
    files = []
    for model in _subfolders(root):
        with os.scandir(model) as entries:
            for entry in entries:
                if entry.name.endswith(".kv"):
                    try:
                        stat = entry.stat()
                    except OSError:
                        continue
                    files.append((stat.st_mtime, stat.st_size, Path(entry.path)))
    return files


def evict(root: Path, budget: int) -> None:
    """Delete the least recently used block files until the folder holds at most `budget` bytes (down to 90% of
    it: eviction scans the folder, so it leaves room for a while), and the temporaries of dead writers."""
    evict_least_recent(folder_usage(root), budget, down_to=int(budget * 0.9))
    drop_stale_temporaries(stale for model in _subfolders(root) for stale in model.glob(".*.tmp"))


def _subfolders(root: Path) -> list[Path]:
    try:
        return [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return []


# ---- the folder as `llmchat cache` shows it ------------------------------------------------------------------
def add_stats(folder: Path, looked_up: int, hits: int) -> None:
    """Add to stats.json (tokens looked up on disk, tokens read), under a lock: processes share the folder."""
    try:
        with open(folder / "stats.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            stats = read_stats(folder)
            stats["looked_up_tokens"] += looked_up
            stats["hit_tokens"] += hits
            _write_whole(folder / "stats.json", json.dumps(stats).encode())
    except OSError:
        pass


def read_stats(folder: Path) -> dict:
    try:
        stats = json.loads((folder / "stats.json").read_text())
        return {"looked_up_tokens": int(stats["looked_up_tokens"]), "hit_tokens": int(stats["hit_tokens"])}
    except (OSError, ValueError, KeyError, TypeError):
        return {"looked_up_tokens": 0, "hit_tokens": 0}


def models_on_disk(root: Path | None = None) -> list[dict]:
    """One entry per model identity: its folder, model path, dtype, block files, bytes and hit figures."""
    out = []
    for folder in _subfolders(root or cache_dir()):
        try:
            identity = json.loads((folder / "identity.json").read_text())
        except (OSError, ValueError):
            identity = {}
        files = [p for p in folder.glob("*.kv")]
        size = 0
        for p in files:
            try:
                size += p.stat().st_size
            except OSError:
                pass
        out.append({"folder": folder, "model": identity.get("model", "?"), "dtype": identity.get("dtype", "?"),
                    "entries": len(files), "bytes": size, **read_stats(folder)})
    return out


def clear(root: Path | None = None, model: Path | None = None) -> int:
    """Delete every model's KV blocks, or one model's (every identity of that model folder); returns bytes freed."""
    import shutil
    freed = 0
    for entry in models_on_disk(root):
        if model is None or Path(entry["model"]) == Path(model).resolve():
            freed += entry["bytes"]
            shutil.rmtree(entry["folder"], ignore_errors=True)
    return freed
