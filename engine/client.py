"""EngineClient: what every front end (the app's sessions, `serve`, `compare`) needs from an engine, local or
remote. AsyncEngine (this process) and RemoteEngine (an OpenAI-compatible server elsewhere) both implement it."""
from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from .metrics import MetricsSnapshot
from .outputs import StreamDelta
from .sampling_params import SamplingParams


@runtime_checkable
class EngineClient(Protocol):
    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer; None when the engine tokenizes elsewhere (a remote server)."""

    def generate(self, prompt, params: SamplingParams | None = None, adapter: str | None = None,
                 request_id: str | None = None) -> AsyncIterator[StreamDelta]:
        """Stream a reply: StreamDelta after StreamDelta, the last with finished=True and a finish_reason.
        `prompt` is chat messages (a list of dicts) or a plain string."""

    def abort(self, request_id: str) -> None:
        """Stop a request; its stream ends with finish_reason "abort"."""

    def metrics(self) -> MetricsSnapshot:
        """A snapshot of throughput, KV cache and prefix-cache counters."""

    async def shutdown(self) -> None:
        """Finish or abort what runs and release the engine."""


@runtime_checkable
class BatchClient(Protocol):
    """The blocking, batched form (scripts and `compare`): LLM here, RemoteLLM on a server."""

    def generate(self, prompts: list, params=None, adapter=None, on_output=None) -> list:
        """One RequestOutput per prompt, in order; on_output(index, output) as each finishes."""

    def load_adapter(self, name: str, path) -> None:
        """Make a LoRA adapter available by name (ValueError where the engine cannot)."""
