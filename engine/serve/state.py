"""What the server serves: one AsyncEngine per model, each adapter as its own model id, loading state
and the admission limit (pending requests at most; more get a 429)."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ApiError

log = logging.getLogger(__name__)


@dataclass
class ModelSpec:
    id: str                                        # the model id clients send
    path: Path                                     # the folder the engine loads
    adapters: list[tuple[str, str]] = field(default_factory=list)   # (model id, adapter folder or store name)


@dataclass
class ServerSettings:
    api_key: str | None = None
    max_pending: int = 256                         # requests admitted at once (running + waiting)
    max_body_bytes: int = 4 * 2**20
    engine_kwargs: dict = field(default_factory=dict)


@dataclass
class ServedModel:
    id: str
    engine: object                                 # llmchat.engine.AsyncEngine
    adapter: str | None = None                     # LoRA name inside the engine; None for the base model
    parent: str | None = None                      # the base model's id, for an adapter
    created: int = field(default_factory=lambda: int(time.time()))


class ServerState:
    def __init__(self, specs: list[ModelSpec], settings: ServerSettings, engine_factory=None):
        ids = [s.id for s in specs] + [name for s in specs for name, _ in s.adapters]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"model ids must be unique; repeated: {', '.join(duplicates)}")
        if not specs:
            raise ValueError("give at least one model to serve")
        self.specs = specs
        self.settings = settings
        self.models: dict[str, ServedModel] = {}
        self.engines: dict[str, object] = {}       # base model id -> its engine
        self.load_error: str | None = None
        self.loaded = asyncio.Event()
        self.pending = 0
        self._engine_factory = engine_factory

    @property
    def ready(self) -> bool:
        return self.loaded.is_set() and self.load_error is None

    async def load(self) -> None:
        """Load every model (in worker threads: /health answers meanwhile) and its adapters."""
        try:
            factory = self._engine_factory
            if factory is None:
                from ..async_engine import AsyncEngine   # torch and the model code: tests give their own factory
                factory = AsyncEngine
            for spec in self.specs:
                engine = await asyncio.to_thread(factory, spec.path, **self.settings.engine_kwargs)
                self.engines[spec.id] = engine
                self.models[spec.id] = ServedModel(spec.id, engine)
                for name, adapter_path in spec.adapters:
                    await engine.load_adapter(name, adapter_path)
                    self.models[name] = ServedModel(name, engine, adapter=name, parent=spec.id)
                adapters = f" with adapters {', '.join(name for name, _ in spec.adapters)}" if spec.adapters else ""
                log.info("ready: %s%s", spec.id, adapters)
        except Exception as exc:   # a model that cannot load: every request says why, with a 503
            log.exception("loading failed")
            self.load_error = f"{type(exc).__name__}: {exc}"
        finally:
            self.loaded.set()

    def lookup(self, model_id: str | None) -> ServedModel:
        self.require_ready()
        if model_id is None or model_id == "":
            return self.models[self.specs[0].id]
        model = self.models.get(model_id)
        if model is None:
            # 404, as OpenAI answers an unknown model
            raise ApiError(404, f"the model {model_id!r} does not exist; served: {', '.join(self.models)}",
                           param="model", code="model_not_found")
        return model

    def require_ready(self) -> None:
        if self.load_error is not None:
            raise ApiError(503, f"the model failed to load: {self.load_error}", code="model_load_failed")
        if not self.loaded.is_set():
            raise ApiError(503, "the model is still loading; retry shortly", code="model_loading",
                           headers={"Retry-After": "1"})

    def admit(self) -> None:
        """Count a request in, or refuse it with a 429 when max_pending are already in."""
        if self.pending >= self.settings.max_pending:
            raise ApiError(429, f"the server is at its limit of {self.settings.max_pending} pending requests; "
                                f"retry later", code="queue_full", headers={"Retry-After": "1"})
        self.pending += 1

    def release(self) -> None:
        self.pending -= 1

    async def shutdown(self) -> None:
        for engine in self.engines.values():
            await engine.shutdown()
        self.engines.clear()
