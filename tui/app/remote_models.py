"""Remote models of the app: one RemoteEngine per "remote:ENDPOINT/ID" used, and each endpoint's health.

They sit beside the local engines in EngineManager, outside the memory budget (their memory is elsewhere),
and give the same generate / abort / metrics, so sessions do not care where a model runs.
"""
from __future__ import annotations

import asyncio
from typing import Any

from llmchat.engine.remote import (REMOTE_PREFIX, Endpoint, Health, RemoteEngine, RemoteError, check_health,
                                   find_endpoint, is_remote, list_models, split_remote)

from .loaded_model import LoadedModel

__all__ = ["RemoteModels", "is_remote"]


class RemoteModels:
    def __init__(self, endpoints: list[Endpoint]):
        self.endpoints = list(endpoints)
        self.models: dict[str, Any] = {}          # "remote:NAME/ID" -> LoadedModel
        self.health: dict[str, Health] = {}       # endpoint name -> last check

    def get(self, name: str):
        model = self.models.get(name)
        if model is None:
            endpoint_name, model_id = split_remote(name)
            endpoint = find_endpoint(self.endpoints, endpoint_name)
            model = LoadedModel(name=name, path=None, engine=RemoteEngine(endpoint, model_id), weight_bytes=0,
                                kv_bytes=0, weights="remote", remote=True)
            self.models[name] = model
        return model

    async def refresh_health(self) -> None:
        """Ask every endpoint a model is used from (the engine panel shows the answer)."""
        used = {split_remote(name)[0] for name in self.models}
        endpoints = [e for e in self.endpoints if e.name in used]
        results = await asyncio.gather(*(check_health(e) for e in endpoints))
        self.health.update({e.name: h for e, h in zip(endpoints, results)})

    async def model_names(self) -> tuple[list[str], list[str]]:
        """(every remote model as "remote:NAME/ID", one message per endpoint that could not be asked)."""
        async def ask(endpoint):
            try:
                return [endpoint.model_name(i) for i in await list_models(endpoint)], ""
            except RemoteError as exc:
                return [], str(exc)
        answers = await asyncio.gather(*(ask(e) for e in self.endpoints))
        return [n for names, _ in answers for n in names], [m for _, m in answers if m]

    def metrics(self) -> list[tuple[str, Any]]:
        rows = []
        for name, model in self.models.items():
            health = self.health.get(split_remote(name)[0])
            state = health.label() if health else "remote"
            rows.append((f"{name.removeprefix(REMOTE_PREFIX)} · {state}", model.engine.metrics()))
        return rows

    async def shutdown(self) -> None:
        for model in self.models.values():
            await model.engine.shutdown()
