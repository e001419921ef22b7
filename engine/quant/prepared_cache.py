"""The quantized weights of a GGUF model as the kernels run them, kept in a cache file for the next start.

A cold GGUF load reads every block, repacks it (engine/quant/gguf_blocks.py), reorders it into the tile layout
and moves it into one huge-page buffer (CausalLM._quantized_for_kernels): seconds of numpy and torch work on a
1 GB file. That buffer depends only on the file and on this build's layouts, so it is written once, byte for
byte, with a manifest of which projection runs on which bytes; the next start reads it back with one read into
a fresh huge-page buffer and attaches the same weights, skipping the repacking. The bits are the ones a cold
load makes (tests compare them).

A file is used only when its identity matches everything that shapes those bytes: the GGUF file (path, size,
mtime), the layout version below, the kernels' level and tile paths, and the load switches. It is written under
a temporary name and renamed, so a reader never sees half a file; one whose size or manifest does not add up is
deleted with a log line and the load goes on cold. Old files beyond the budget are evicted, least recently used
first. EngineConfig.prepared_cache=False (LLMCHAT_PREPARED_CACHE=0) turns it off.

The file is mapped (MAP_PRIVATE) rather than read: nothing is copied, the pages are the page cache's, shared by
every process that runs the model (the app and `llmchat serve`), and where the filesystem keeps large folios
they are mapped as huge pages. A file is never rewritten in place (new ones are renamed over, old ones
unlinked), so a mapping never sees it shrink. EngineConfig.prepared_mmap=False reads it into huge-page memory
instead.

A cold start does not wait for the file: `save_in_background` writes it on a thread of its own (at the lowest
CPU priority) while the model already answers, because writing a 1 GB file took 2.8 s of a 6 s first start (the
disk's pace, not the CPU's). The process's exit waits for the write (atexit), and `wait_for_writes` does on demand.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import logging
import mmap
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import torch

from llmchat.kernels.memory import huge_page_buffer
from llmchat.kernels.quant import QuantWeight, holds_q6

from ..cache_paths import cache_root, disk_budget, drop_stale_temporaries, evict_least_recent
from ..layers.linear import Linear

log = logging.getLogger(__name__)

LAYOUT_VERSION = 5          # bump whenever QuantWeight's layouts or the tile orders change
MAGIC = b"LLMCPREP"
HEADER = struct.Struct("<8sQI")   # magic, manifest bytes, manifest crc32
DATA_ALIGN = 4096
READ_CHUNK = 64 << 20
MADV_POPULATE_READ = 22     # Linux 5.14+: map the (page-cached) file's pages now, not at the first step
BUDGET_BYTES = 8 << 30      # at most this much of prepared files, or a tenth of the free disk if less
LOWEST_PRIORITY = 19        # the writer's nice value: the model's threads come first

_writers: dict[Path, threading.Thread] = {}   # file being written -> its writer thread
_writers_lock = threading.Lock()


def wait_for_writes() -> None:
    """Return once every prepared file this process started writing is in place (or has failed)."""
    with _writers_lock:
        pending = list(_writers.values())
    for thread in pending:
        thread.join()


atexit.register(wait_for_writes)   # `llmchat run` exits right after its reply: the file is still finished


def cache_dir() -> Path:
    """Prepared weights live in prepared/ under the cache root."""
    return cache_root() / "prepared"


def identity(gguf: Path, kernels, tiles: bool, q8_wide: bool) -> dict:
    stat = gguf.stat()
    paths = {}
    if kernels is not None:
        paths = {"level": kernels.level(), "tiles": kernels.tiles_isa(), "quant": kernels.quant_isa()}
    return {"layout": LAYOUT_VERSION, "file": str(gguf.resolve()), "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns, "kernels": paths, "tiles": tiles, "q8_wide": q8_wide,
            "q6k_bits": 6 if holds_q6() else 8}


class PreparedCache:
    """One model's prepared-weights file: `load(model)` attaches its weights (True) or finds none (False);
    `save_in_background(model)` writes them after a cold load."""

    def __init__(self, ident: dict, folder: Path | None = None, mapped: bool = True):
        self.identity, self.mapped = ident, mapped
        key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
        self.path = (folder or cache_dir()) / f"{key}.bin"

    # reading -----------------------------------------------------------------------------------------------
    def load(self, model, progress: Callable[[int, int], None] | None = None) -> bool:
        """Attach the cached weights to `model` (its quantized projections and token table), or return False
        (no file, or a bad one, deleted). Call after the dense tensors are loaded, before finish_init."""
        try:
            with open(self.path, "rb", buffering=0) as handle:
                manifest, data_start = self._read_header(handle)
                if self.mapped:
                    buffer = self._map_data(handle, data_start, manifest["nbytes"])
                else:
                    buffer = self._read_data(handle, data_start, manifest["nbytes"], progress)
            # everything checked before anything is attached: a bad manifest leaves the model untouched
            weights = [_weight_from(entry, buffer) for entry in manifest["weights"]]
            linears = [(model.get_submodule(name), [(start, weights[i]) for start, i in runs])
                       for name, runs in manifest["linears"].items()]
            table = None if manifest["embedding"] is None else weights[manifest["embedding"]]
            os.utime(self.path)   # recently used: the last to be evicted
        except (FileNotFoundError, NotADirectoryError):
            return False
        except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError, RuntimeError) as exc:
            self._discard(f"unreadable ({exc})")
            return False
        for module, runs in linears:
            module.attach_prepared_runs(runs)
        if table is not None:
            model.set_quantized_embedding(table)
        model.__dict__["_weights_prepared"] = True
        return True

    def _read_header(self, handle) -> tuple[dict, int]:
        head = handle.read(HEADER.size)
        if len(head) != HEADER.size:
            raise ValueError("cut short")
        magic, length, crc = HEADER.unpack(head)
        text = handle.read(length)
        if magic != MAGIC or len(text) != length or zlib.crc32(text) != crc:
            raise ValueError("bad header")
        manifest = json.loads(text)
        if manifest.get("identity") != self.identity:
            raise ValueError("identity differs")
        data_start = _aligned(HEADER.size + length)
        if os.fstat(handle.fileno()).st_size != data_start + manifest["nbytes"]:
            raise ValueError("size differs from its manifest")
        return manifest, data_start

    @staticmethod
    def _read_data(handle, start: int, nbytes: int, progress) -> torch.Tensor:
        buffer = huge_page_buffer(nbytes)
        view, done = memoryview(buffer.numpy()), 0
        handle.seek(start)
        while done < nbytes:
            got = handle.readinto(view[done:done + READ_CHUNK])
            if not got:
                raise ValueError("cut short")
            done += got
            if progress is not None:
                progress(done, nbytes)
        return buffer

    @staticmethod
    def _map_data(handle, start: int, nbytes: int) -> torch.Tensor:
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        whole = torch.frombuffer(mapping, dtype=torch.uint8)
        data = whole[start:start + nbytes]
        for advice in (getattr(mmap, "MADV_HUGEPAGE", None), MADV_POPULATE_READ):
            try:
                if advice is not None:
                    mapping.madvise(advice)
            except OSError:   # an older kernel: pages are mapped as the first step reads them
                pass
        return data

    def _discard(self, why: str) -> None:
        log.warning("prepared weights %s: %s; discarded, loading from the GGUF file", self.path.name, why)
        try:
            self.path.unlink()
        except OSError:
            pass

    # writing -----------------------------------------------------------------------------------------------
    def save_in_background(self, model) -> threading.Thread | None:
        """Start writing the model's prepared weights (after finish_init) on a thread of its own and return it;
        None when there is nothing to write or this process is already writing the same file."""
        contents = self._contents(model)
        if contents is None:
            return None
        with _writers_lock:
            if self.path in _writers:
                return None
            thread = threading.Thread(target=self._write_and_forget, args=contents, name="llmchat-prepared-writer")
            _writers[self.path] = thread
        thread.start()
        return thread

    def _contents(self, model) -> tuple[bytes, torch.Tensor] | None:
        """(header and manifest, the weights' bytes) to write, or None."""
        try:
            manifest, blob = _manifest(model)
        except ValueError as exc:   # weights not in one buffer: nothing to gain from a file
            log.debug("prepared weights not cached: %s", exc)
            return None
        if blob is None:
            return None
        manifest["identity"] = self.identity
        return json.dumps(manifest).encode(), blob

    def _write_and_forget(self, text: bytes, blob: torch.Tensor) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)   # this thread only
        except (OSError, AttributeError):
            pass
        try:
            self._write(text, blob)
        except Exception as exc:   # never a traceback from a background thread: the next start loads cold
            log.warning("prepared weights not cached: %s", exc)
        finally:
            with _writers_lock:
                _writers.pop(self.path, None)

    def _write(self, text: bytes, blob: torch.Tensor) -> None:
        tmp = self.path.with_name(f"{self.path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _evict(self.path.parent, blob.nbytes)
            with open(tmp, "wb") as handle:
                handle.write(HEADER.pack(MAGIC, len(text), zlib.crc32(text)) + text)
                handle.write(bytes(_aligned(HEADER.size + len(text)) - HEADER.size - len(text)))
                handle.write(memoryview(blob.numpy()))
            os.replace(tmp, self.path)
        except OSError as exc:   # a full disk or a read-only cache: the next start loads cold, as this one did
            log.warning("prepared weights not cached in %s: %s", self.path.parent, exc.strerror or exc)
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass


def _aligned(n: int) -> int:
    return (n + DATA_ALIGN - 1) // DATA_ALIGN * DATA_ALIGN


def _manifest(model) -> tuple[dict, torch.Tensor | None]:
    """(manifest, the bytes every quantized weight lies in) of a finished model; (…, None) if it has none."""
    linears = {name: m.quantized_run_calls() for name, m in model.named_modules()
               if isinstance(m, Linear) and m.is_quantized}
    table = model.quantized_embedding
    unique: dict[int, QuantWeight] = {}
    for runs in linears.values():
        for _, w in runs:
            unique.setdefault(id(w), w)
    if table is not None:
        unique.setdefault(id(table), table)
    if not unique:
        return {}, None
    tensors = [t for w in unique.values() for t in w.present()]
    storage = tensors[0].untyped_storage()
    if any(t.untyped_storage().data_ptr() != storage.data_ptr() or not t.is_contiguous() for t in tensors):
        raise ValueError("quantized weights are not in one buffer")
    base = min(t.data_ptr() for t in tensors)
    end = max(t.data_ptr() + t.nbytes for t in tensors)
    whole = torch.empty(0, dtype=torch.uint8).set_(storage)
    blob = whole[base - storage.data_ptr():end - storage.data_ptr()]
    index = {key: i for i, key in enumerate(unique)}
    manifest = {
        "nbytes": end - base,
        "weights": [_weight_entry(w, base) for w in unique.values()],
        "linears": {name: [[start, index[id(w)]] for start, w in runs] for name, runs in linears.items()},
        "embedding": None if table is None else index[id(table)],
        "written": time.time(),
    }
    return manifest, blob


def _weight_entry(w: QuantWeight, base: int) -> dict:
    return {"kind": w.kind, "source": w.source, "min_offset": w.min_offset, "tiled": w.tiled,
            "wide": w.wide_activations, "has_mins": w.mins is not None, "has_high": w.high is not None,
            "tensors": [[t.data_ptr() - base, str(t.dtype).removeprefix("torch."), list(t.shape)]
                        for t in w.present()]}


def _weight_from(entry: dict, buffer: torch.Tensor) -> QuantWeight:
    tensors = []
    for offset, dtype, shape in entry["tensors"]:
        dtype = getattr(torch, dtype)
        numel = 1
        for s in shape:
            numel *= s
        nbytes = numel * torch.empty(0, dtype=dtype).element_size()
        if offset < 0 or offset + nbytes > buffer.numel():
            raise ValueError("a tensor lies outside the data")
        tensors.append(buffer[offset:offset + nbytes].view(dtype).view(shape))
    it = iter(tensors)
    values, scales = next(it), next(it)
    mins = next(it) if entry["has_mins"] else None
    high = next(it) if entry["has_high"] else None
    return QuantWeight(entry["kind"], values, scales, mins, high, entry["source"], entry["min_offset"],
                       entry["tiled"], entry["wide"])


def _evict(folder: Path, incoming: int) -> None:
    """Delete the least recently used prepared files until `incoming` more bytes fit the budget."""
    budget = disk_budget(folder, BUDGET_BYTES, at_least=incoming)
    files = []
    for path in folder.glob("*.bin"):
        try:
            stat = path.stat()
        except OSError:
            continue
        files.append((stat.st_mtime, stat.st_size, path))
    evict_least_recent(files, budget - incoming)
    drop_stale_temporaries(folder.glob("*.tmp"))
