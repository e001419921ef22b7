"""One AsyncEngine per loaded model, inside a memory budget; the least recently used model goes first. A model
with a draft model is an engine of its own (the draft is part of an engine), beside the model's engine without it.

Loading runs in a worker thread (it reads weights and sizes the KV cache); the event loop never waits on it.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from llmchat.engine.generation_defaults import read_generation_config, sampling_defaults
from llmchat.engine.store import resolve_model

from .load_progress import LoadProgress
from .loaded_model import LoadedModel
from .remote_models import RemoteModels, is_remote

GB = 1024 ** 3
EngineKey = tuple[str, str | None]    # (model path, draft model path or None)


def engine_key(path: Path, draft: Path | None) -> EngineKey:
    return str(path), None if draft is None else str(draft)


def resolve_draft(name: str, data_dir: Path | None) -> Path:
    """A draft model's folder, found as `llmchat run --draft` finds it; ValueError naming it otherwise."""
    try:
        return resolve_model(name, data_dir)
    except (FileNotFoundError, RuntimeError) as exc:   # not found, or a model that cannot load (StoreError)
        raise ValueError(f"draft model: {exc}") from None


def weights_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    pointer = path / "gguf.json"   # a GGUF registered in place: its weights are that file, kept quantized
    if pointer.exists():
        gguf = Path(json.loads(pointer.read_text()).get("file", ""))
        return gguf.stat().st_size if gguf.is_file() else 0
    return sum(p.stat().st_size for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf"))


def weights_label(path: Path, engine_kwargs: dict) -> str:
    """What the engine panel says about a model's weights: its GGUF quant, or the quantization done at load."""
    pointer = path / "gguf.json"
    if pointer.exists():
        return str(json.loads(pointer.read_text()).get("quant") or "GGUF")
    quantize = engine_kwargs.get("quantize")
    return f"{quantize} at load" if quantize else ""


def draft_bytes(engine) -> int:
    """What a local engine's draft model takes: its weights and its own KV cache (0 without a draft)."""
    draft = engine.engine.draft
    if draft is None:
        return 0
    return weights_size(Path(engine.config.draft_model)) + int(draft.kv_cache_gb * GB)


def read_generation_defaults(path: Path | None) -> dict:
    """{SamplingParams field: (value, where it comes from)}: what a request that leaves it unset gets (the
    engine's own rule, so the settings dialog shows what will be used)."""
    gen = read_generation_config(path) if path is not None and path.is_dir() else {}
    return sampling_defaults(gen)


def model_label(name: str, draft: Path | None, weights: str = "") -> str:
    """How the engine panel names an engine: 'qwen · Q4_K_M · draft qwen-0.5b'."""
    return " · ".join(part for part in (Path(name).name, weights, draft and f"draft {draft.name}") if part)


def with_draft(name: str, draft: Path | None) -> str:
    """How a notice names an engine: the model as the user named it, and its draft."""
    return name + (f" with draft {draft.name}" if draft else "")


class EngineManager:
    def __init__(self, memory_budget_gb: float, kv_cache_gb: float, engine_kwargs: dict | None = None,
                 data_dir: Path | None = None, notify: Callable[[str], None] = lambda message: None,
                 endpoints: list | None = None) -> None:
        self.memory_budget = int(memory_budget_gb * GB)
        self.kv_cache_gb = kv_cache_gb
        self.engine_kwargs = dict(engine_kwargs or {})
        self.data_dir = data_dir
        self.notify = notify
        self.loaded: OrderedDict[EngineKey, LoadedModel] = OrderedDict()   # least recently used first
        self.loading: dict[EngineKey, asyncio.Task] = {}
        self.load_progress: dict[EngineKey, LoadProgress] = {}   # per model loading (reported by its thread)
        self.remote = RemoteModels(endpoints or [])

    def key(self, name: str, draft: str | None = None) -> EngineKey:
        return engine_key(resolve_model(name, self.data_dir), resolve_draft(draft, self.data_dir) if draft else None)

    def is_loaded(self, name: str, draft: str | None = None) -> bool:
        if is_remote(name):
            return name in self.remote.models
        try:
            return self.key(name, draft) in self.loaded
        except (FileNotFoundError, ValueError, RuntimeError):
            return False

    def loading_models(self) -> list[tuple[str, LoadProgress | None]]:
        """(name, its LoadProgress, None before its load has begun) of each model being loaded."""
        return [(model_label(path, draft and Path(draft)), self.load_progress.get((path, draft)))
                for path, draft in self.loading]

    async def get(self, name: str, draft: str | None = None) -> LoadedModel:
        """The loaded model, loading it (and unloading LRU models to fit the budget) when needed; a remote
        model ("remote:ENDPOINT/ID") is its endpoint's, outside the memory budget. draft: a draft model for the
        engine to guess with (a session's): the model with it is an engine of its own."""
        if is_remote(name):
            if draft:
                raise ValueError(f"{name} runs on a remote server: it takes no draft model here (clear it in F3)")
            return self.remote.get(name)
        path = await asyncio.to_thread(resolve_model, name, self.data_dir)
        draft_path = await asyncio.to_thread(resolve_draft, draft, self.data_dir) if draft else None
        key = engine_key(path, draft_path)
        if key in self.loaded:
            model = self.loaded[key]
            self.loaded.move_to_end(key)
            model.last_used = time.monotonic()
            return model
        if key not in self.loading:
            self.loading[key] = asyncio.ensure_future(self._load(name, path, draft_path))
        try:
            return await asyncio.shield(self.loading[key])
        finally:
            if key in self.loading and self.loading[key].done():
                del self.loading[key]

    async def ensure_adapter(self, model: LoadedModel, adapter: str | None) -> None:
        """Load a LoRA adapter (library name or folder) into the model's engine the first time it is used."""
        if adapter and model.remote:
            raise ValueError(f"{model.name} runs on a remote server: its adapters are models of their own there "
                             "(pick remote:ENDPOINT/ADAPTER-ID as the model and leave the adapter empty)")
        if adapter and adapter not in model.adapters:
            await model.engine.load_adapter(adapter, adapter)
            model.adapters.add(adapter)

    async def _load(self, name: str, path: Path, draft: Path | None) -> LoadedModel:
        weight_bytes = weights_size(path)
        kv_bytes = int(self.kv_cache_gb * GB)
        # a draft's KV cache holds as many tokens as the model's: counted at the model's size until it is known
        # (a smaller model's is smaller per token)
        needed = weight_bytes + kv_bytes + (weights_size(draft) + kv_bytes if draft else 0)
        if needed > self.memory_budget:
            raise ValueError(f"{with_draft(name, draft)} needs ~{needed / GB:.1f} GB, more than the memory budget "
                             f"of {self.memory_budget / GB:.1f} GB (memory_budget_gb in settings.toml)")
        await self._make_room(needed)
        from llmchat.engine import AsyncEngine   # imported here: torch loads only when a model does
        key = engine_key(path, draft)
        options = dict(self.engine_kwargs, **({"draft_model": str(draft)} if draft else {}))
        progress = self.load_progress[key] = LoadProgress()
        try:
            engine = await asyncio.to_thread(AsyncEngine, str(path), load_progress=progress.report,
                                             kv_cache_gb=self.kv_cache_gb, **options)
        finally:
            self.load_progress.pop(key, None)
        used_draft = engine.config.draft_model   # the session's, or the engine's default (LLMCHAT_DRAFT_MODEL)
        model = LoadedModel(name=name, path=path, engine=engine, weight_bytes=weight_bytes, kv_bytes=kv_bytes,
                            generation_defaults=read_generation_defaults(path),
                            weights=weights_label(path, self.engine_kwargs),
                            draft=used_draft and Path(used_draft), draft_bytes=draft_bytes(engine))
        self.loaded[key] = model
        return model

    async def _make_room(self, needed: int) -> None:
        while self.loaded and sum(m.total_bytes for m in self.loaded.values()) + needed > self.memory_budget:
            idle = [k for k, m in self.loaded.items() if m.active_requests == 0]
            victim = idle[0] if idle else next(iter(self.loaded))
            model = self.loaded.pop(victim)
            self.notify(f"Unloaded {with_draft(model.name, model.draft)} (least recently used) to stay within the "
                        f"{self.memory_budget / GB:.1f} GB memory budget")
            await model.engine.shutdown()

    async def unload(self, name: str, draft: str | None = None) -> None:
        model = self.loaded.pop(self.key(name, draft), None)
        if model is not None:
            await model.engine.shutdown()

    async def shutdown(self) -> None:
        while self.loaded:
            _, model = self.loaded.popitem()
            await model.engine.shutdown()
        await self.remote.shutdown()

    def metrics(self) -> list[tuple[str, Any]]:
        """(model name, MetricsSnapshot) for every loaded model, remote ones with their endpoint's health."""
        local = [(model_label(m.name, m.draft, m.weights), m.engine.metrics()) for m in self.loaded.values()]
        return local + self.remote.metrics()
