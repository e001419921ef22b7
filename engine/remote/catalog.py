"""What a remote endpoint offers (GET /models) and whether it is up, for the model lists and the engine panel."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from .endpoints import Endpoint
from .sse import RemoteError, error_message

CHECK_TIMEOUT = httpx.Timeout(5.0)


@dataclass(frozen=True)
class Health:
    ok: bool
    latency_ms: float | None = None
    message: str = ""          # why it is down

    def label(self) -> str:
        return f"up {self.latency_ms:.0f} ms" if self.ok else "down"


async def list_models(endpoint: Endpoint) -> list[str]:
    """The model ids the server lists; RemoteError (with the reason) when it cannot be asked."""
    key = endpoint.api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with httpx.AsyncClient(timeout=CHECK_TIMEOUT, headers=headers) as client:
            response = await client.get(endpoint.base_url + "/models")
    except httpx.HTTPError as exc:
        raise RemoteError(f"cannot reach {endpoint.name} ({endpoint.base_url}): "
                          f"{str(exc).strip() or type(exc).__name__}") from None
    if response.status_code >= 400:
        raise RemoteError(f"{endpoint.name} answered {response.status_code}: "
                          f"{error_message(response.content, response.status_code)}")
    try:
        data = response.json()["data"]
        return [str(item["id"]) for item in data]
    except (ValueError, KeyError, TypeError):
        raise RemoteError(f"{endpoint.name}: /models did not answer with an OpenAI model list") from None


async def check_health(endpoint: Endpoint) -> Health:
    """Up when it lists its models (every OpenAI-compatible server has /models; not all have /health)."""
    started = time.monotonic()
    try:
        await list_models(endpoint)
    except RemoteError as exc:
        return Health(False, message=str(exc))
    return Health(True, (time.monotonic() - started) * 1000)


def list_all(endpoints: list[Endpoint]) -> list[tuple[Endpoint, list[str], str]]:
    """(endpoint, model ids, error message or "") for every endpoint, asked concurrently (CLI use)."""
    async def ask(endpoint):
        try:
            return endpoint, await list_models(endpoint), ""
        except RemoteError as exc:
            return endpoint, [], str(exc)

    async def ask_all():
        return await asyncio.gather(*(ask(e) for e in endpoints))
    return list(asyncio.run(ask_all())) if endpoints else []
