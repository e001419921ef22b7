"""ModelStore: the one entry point the TUI and CLI use for Hub search, downloads, the library and imports."""
from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Callable

from .gguf_import import import_gguf
from .hf_cache import CachedSnapshot, PARTIAL_SUFFIX, hub_cache_dir, remove_snapshot, scan
from .hub import search
from .inspect_folder import describe_folder, folder_size
from .pull import pull
from .registry import Registry, default_data_dir
from .types import DownloadProgress, HubModel, LocalModel, StoreError

ProgressFn = Callable[[DownloadProgress], None]


def _gguf_only(folder: Path) -> bool:
    return not (folder / "config.json").exists() and any(folder.glob("*.gguf"))


class ModelStore:
    """UI-free model store over the standard HF cache plus llmchat's own registry of imports.

    `free_space(path) -> int` is the disk probe (injectable for tests; env LLMCHAT_FREE_SPACE_BYTES
    overrides it too, for subprocess tests). The Hub token comes from HF_TOKEN / huggingface_hub's login
    and is never written anywhere by the store.
    """

    def __init__(self, data_dir: str | Path | None = None, *, cache_dir: str | Path | None = None,
                 free_space: Callable[[Path], int] | None = None):
        self.data_dir = Path(data_dir) if data_dir else default_data_dir()
        self.cache_dir = Path(cache_dir) if cache_dir else hub_cache_dir()
        self.registry = Registry(self.data_dir)
        self._free_space = free_space

    # ---- library -------------------------------------------------------------------------------
    def list(self) -> list[LocalModel]:
        """Every model in the HF cache and every import, usable or not (with the reason). No network."""
        # a Hub snapshot holding only GGUF files is listed once, as the model its file was registered as
        models = [self._from_snapshot(s) for s in scan(self.cache_dir) if not _gguf_only(s.path)]
        for name, entry in sorted(self.registry.load().items()):
            models.append(self._from_registry(name, entry))
        return models

    def _from_snapshot(self, snap: CachedSnapshot) -> LocalModel:
        name = snap.repo_id if (snap.is_only or "main" in snap.refs) else f"{snap.repo_id}@{snap.commit[:12]}"
        if snap.commit is None:
            partial = sum(p.stat().st_size for p in (snap.path / "blobs").glob("*" + PARTIAL_SUFFIX))
            return LocalModel(name, snap.path, snap.repo_id, None, "model", None, None, None, None, partial,
                              False, f"incomplete download: run `llmchat models pull {snap.repo_id}` to resume")
        info = describe_folder(snap.path)
        reason = info.reason
        if not info.complete:
            reason = f"incomplete download ({info.reason}): run `llmchat models pull {snap.repo_id}` to resume"
        return LocalModel(name, snap.path, snap.repo_id, snap.commit, info.kind, info.architecture,
                          info.num_params, info.dtype, info.context_length, folder_size(snap.path),
                          info.supported, reason, "hub", info.base_model)

    def _from_registry(self, name: str, entry: dict) -> LocalModel:
        path = Path(entry["path"])
        if not path.is_dir():
            return LocalModel(name, path, None, None, "model", None, None, None, None, 0, False,
                              f"folder {path} no longer exists", entry.get("source", "folder"))
        info = describe_folder(path)
        size = folder_size(path)
        if info.gguf_file is not None and info.gguf_file.is_file():
            size += info.gguf_file.stat().st_size   # the weights live in the registered GGUF file
        return LocalModel(name, path, None, None, info.kind, info.architecture, info.num_params, info.dtype,
                          info.context_length, size, info.supported, info.reason,
                          entry.get("source", "folder"), info.base_model, info.quant)

    def find(self, name: str) -> LocalModel | None:
        models = self.list()
        for m in models:
            if m.name == name:
                return m
        matches = [m for m in models if m.repo_id == name or (m.repo_id and m.repo_id.split("/")[-1] == name)]
        return matches[0] if len(matches) == 1 else None

    def resolve(self, name_or_path: str | Path) -> Path:
        """The folder the engine loads, for every way a user names a model (no network):
        a model folder -> itself; a .gguf file -> registered in place in the library (instant after the first
        time) -> its library folder; a library name or repo id -> its folder.
        FileNotFoundError for none of these, StoreError for a model that cannot be loaded."""
        text = str(name_or_path)
        path = Path(text).expanduser()
        if path.is_dir():
            info = describe_folder(path)
            if not info.supported:
                raise StoreError(f"{path}: cannot be loaded: {info.reason}")
            return path.resolve()
        if path.suffix.lower() == ".gguf":
            if not path.is_file():
                raise FileNotFoundError(f"no such GGUF file: {path}")
            return Path(self.import_path(path).path)
        model = self.find(text)
        if model is None:
            raise FileNotFoundError(f"no model named {text!r} in the library (see `llmchat models list`), "
                                    f"and no model folder or .gguf file at that path")
        if not model.supported:
            raise StoreError(f"{model.name} cannot be loaded: {model.reason}")
        return Path(model.path)

    def remove(self, name: str) -> int:
        """Delete a model; returns bytes freed. Registered (not copied) folders are only unregistered (0)."""
        model = self.find(name)
        if model is None:
            raise FileNotFoundError(f"no model named {name!r} in the library (see `llmchat models list`)")
        if model.source == "hub":
            snap = next(s for s in scan(self.cache_dir)
                        if s.path == model.path or (s.commit is None and s.repo_id == model.repo_id))
            return remove_snapshot(self.cache_dir, snap)
        entry = self.registry.remove(model.name) or {}
        if entry.get("owned"):
            freed = folder_size(model.path)
            shutil.rmtree(model.path, ignore_errors=True)
            return freed
        return 0

    # ---- imports -------------------------------------------------------------------------------
    def import_path(self, path: str | Path, copy: bool = False, progress: ProgressFn | None = None,
                    name: str | None = None, dtype: str = "auto", dequantize: bool = False) -> LocalModel:
        """Register a local HF folder (copied if `copy`), or a .gguf file in place (its weights run quantized;
        dtype: of activations and KV cache, "auto" = bfloat16). dequantize: convert the .gguf into a
        safetensors model instead (dtype "auto" = float32 below 2B parameters, else bfloat16)."""
        src = Path(path).expanduser()
        if not src.exists():
            raise FileNotFoundError(f"{src} does not exist")
        if src.is_file() and src.suffix.lower() == ".gguf":
            return import_gguf(self, src, progress=progress, name=name, dtype=dtype, dequantize=dequantize)
        if not src.is_dir():
            raise StoreError(f"{src}: expected a model folder or a .gguf file")
        origin = {"path": str(src.resolve()), "copy": copy}
        existing = self.registry.find_origin(origin)
        if existing is not None and name in (None, existing):
            return self._from_registry(existing, self.registry.load()[existing])
        info = describe_folder(src)
        if info.kind == "unknown":
            raise StoreError(f"{src}: not a model folder ({info.reason})")
        if not info.complete:
            raise StoreError(f"{src}: {info.reason}")
        taken = {m.name for m in self.list()}
        reg_name = name or self.registry.unique_name(src.resolve().name, taken)
        if name and name in taken:
            raise StoreError(f"a model named {name!r} already exists")
        target, source = src.resolve(), "folder"
        if copy:
            target = self.registry.dir / reg_name
            tmp = target.with_name(target.name + ".part")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp)
            os.replace(tmp, target)  # the library never sees a half copy
            source = "copy"
        self.registry.add(reg_name, target, source, owned=copy, origin=origin)
        return self._from_registry(reg_name, {"path": str(target), "source": source})

    # ---- Hub -----------------------------------------------------------------------------------
    def search(self, query: str, sort: str = "downloads", limit: int = 20,
               include_unsupported: bool = False) -> list[HubModel]:
        return search(query, sort=sort, limit=limit, include_unsupported=include_unsupported)

    def pull(self, repo_id: str, revision: str | None = None, progress: ProgressFn | None = None,
             cancel: threading.Event | None = None) -> LocalModel:
        if revision is None and "@" in repo_id:
            repo_id, revision = repo_id.split("@", 1)
        snapshot = pull(self, repo_id, revision, progress=progress, cancel=cancel)
        return next(m for m in self.list() if m.path == snapshot)

    def free_space(self, path: Path) -> int:
        if os.environ.get("LLMCHAT_FREE_SPACE_BYTES"):
            return int(os.environ["LLMCHAT_FREE_SPACE_BYTES"])
        if self._free_space is not None:
            return self._free_space(path)
        probe = Path(path)
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        return shutil.disk_usage(probe).free
