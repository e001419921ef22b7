"""A model on a remote OpenAI-compatible server, behind the EngineClient interface (engine/client.py) that the
local AsyncEngine implements too: sessions and compare use either alike.

Tokens/s and TTFT are measured here (what the user sees); usage, cached tokens and llama-server's timings
are what the server reports. Deltas carry no token ids: the remote tokenizer is not ours.
"""
from __future__ import annotations

import asyncio
import time

import httpx

from ..metrics import EngineMetrics, MetricsSnapshot
from ..outputs import RequestMetrics, StreamDelta
from ..sampling_params import SamplingParams
from .endpoints import Endpoint
from .request_body import request_body
from .sse import RemoteError, error_message, events

TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=30.0)


class RemoteEngine:
    def __init__(self, endpoint: Endpoint, model_id: str, timeout: httpx.Timeout = TIMEOUT):
        self.endpoint, self.model_id, self.timeout = endpoint, model_id, timeout
        self.counters = EngineMetrics(kv_blocks_total=0, kv_cache_gb=0.0)
        self._streams: dict[str, httpx.Response] = {}
        self._aborted: set[str] = set()
        self._clients: dict[int, httpx.AsyncClient] = {}   # one per event loop (compare runs its own)

    @property
    def name(self) -> str:
        return self.endpoint.model_name(self.model_id)

    @property
    def tokenizer(self) -> None:
        return None   # the server tokenizes: prompts go as chat messages or text

    def metrics(self) -> MetricsSnapshot:
        return self.counters.snapshot()

    def client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(id(loop))
        if client is None or client.is_closed:
            key = self.endpoint.api_key()
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            client = httpx.AsyncClient(base_url=self.endpoint.base_url, headers=headers, timeout=self.timeout)
            self._clients[id(loop)] = client
        return client

    async def generate(self, prompt, params: SamplingParams | None = None, adapter: str | None = None,
                       request_id: str | None = None):
        """Async iterator of StreamDelta; the last one has finished=True. RemoteError when the server cannot be
        reached, refuses the request or breaks off mid-reply (the text so far has been delivered)."""
        if adapter:
            raise ValueError(f"{self.name} is a remote model: a remote server's adapters are models of their own "
                             f"(pick remote:{self.endpoint.name}/ADAPTER-ID as the model)")
        params = params if params is not None else SamplingParams()
        params.validate()
        path, body = request_body(self.model_id, prompt, params)
        request_id = request_id or f"remote-{id(body):x}"
        metrics = RequestMetrics(arrival_time=time.monotonic())
        self._update_gauges(+1)
        try:
            async with self._open(path, body) as response:
                self._streams[request_id] = response
                finish = None
                async for event in events(self._lines(response, request_id)):
                    text, finish = self._read_event(event, metrics, finish)
                    if text:
                        yield StreamDelta(request_id, text, [], metrics=metrics)
                if request_id in self._aborted:
                    finish = "abort"
                if finish is None:
                    raise RemoteError(f"{self.endpoint.name} ended the reply without saying why (stream cut off)")
                metrics.finish_time = time.monotonic()
                yield StreamDelta(request_id, "", [], True, finish, metrics=metrics)
        finally:
            self._streams.pop(request_id, None)
            self._aborted.discard(request_id)
            self._update_gauges(-1)

    def abort(self, request_id: str) -> None:
        """Close the request's connection; servers abort a request whose client went away."""
        response = self._streams.pop(request_id, None)
        if response is not None:
            self._aborted.add(request_id)
            asyncio.get_running_loop().create_task(response.aclose())

    async def shutdown(self) -> None:
        for client in list(self._clients.values()):
            try:
                await client.aclose()
            except RuntimeError:
                pass      # its event loop is gone
        self._clients.clear()

    # ---- helpers --------------------------------------------------------------------------------
    def _open(self, path: str, body: dict):
        return _Opened(self, path, body)

    async def _lines(self, response: httpx.Response, request_id: str):
        try:
            async for line in response.aiter_lines():
                yield line
        except (httpx.StreamClosed, httpx.HTTPError) as exc:
            if request_id in self._aborted:
                return    # abort() closed the connection under the reader
            raise RemoteError(f"the connection to {self.endpoint.name} broke mid-reply ({_reason(exc)})") from None

    def _read_event(self, event: dict, metrics: RequestMetrics, finish):
        text = ""
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            text += delta.get("content") or choice.get("text") or ""
            finish = choice.get("finish_reason") or finish
        now = time.monotonic()
        if text:
            if metrics.first_token_time is None:
                metrics.first_token_time = now
            metrics.num_generated_tokens += 1      # one event ~ one token until usage gives the count
            self.counters.record_step(0, 1)
        usage = event.get("usage")
        if isinstance(usage, dict):
            metrics.num_prompt_tokens = int(usage.get("prompt_tokens") or 0)
            metrics.num_generated_tokens = int(usage.get("completion_tokens") or metrics.num_generated_tokens)
            details = usage.get("prompt_tokens_details") or {}
            metrics.num_cached_tokens = int(details.get("cached_tokens") or 0)
        timings = event.get("timings")
        if isinstance(timings, dict):     # llama-server (and llmchat serve)
            metrics.server_timings = timings
            if not metrics.num_cached_tokens and timings.get("cache_n"):
                metrics.num_cached_tokens = int(timings["cache_n"])
            if timings.get("draft_n"):     # the server guessed (speculative decoding): the stats line says so
                metrics.num_guessed_tokens = int(timings["draft_n"])
                metrics.num_accepted_guesses = int(timings.get("draft_n_accepted") or 0)
        return text, finish

    def _update_gauges(self, change: int) -> None:
        running = self.counters.snapshot().num_running + change
        self.counters.update_state(num_running=max(running, 0))


class _Opened:
    """`async with`: POST the request and check its status; errors become RemoteError with the server's words."""

    def __init__(self, engine: RemoteEngine, path: str, body: dict):
        self.engine, self.path, self.body = engine, path, body
        self.response: httpx.Response | None = None

    async def __aenter__(self) -> httpx.Response:
        engine = self.engine
        where = f"{engine.endpoint.name} ({engine.endpoint.base_url})"
        try:
            request = engine.client().build_request("POST", self.path, json=self.body)
            self.response = await engine.client().send(request, stream=True)
        except httpx.HTTPError as exc:
            raise RemoteError(f"cannot reach {where}: {_reason(exc)}") from None
        status = self.response.status_code
        if status >= 400:
            body = await self.response.aread()
            await self.response.aclose()
            message = error_message(body, status)
            if status in (401, 403):
                hint = (f"set {engine.endpoint.api_key_env}" if engine.endpoint.api_key_env and
                        not engine.endpoint.api_key() else "check the key")
                raise RemoteError(f"{where} refused the API key ({status}: {message}); {hint}")
            raise RemoteError(f"{where} answered {status} for {engine.model_id}: {message}")
        return self.response

    async def __aexit__(self, *exc_info) -> None:
        if self.response is not None:
            await self.response.aclose()


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    if isinstance(exc, httpx.ConnectError):
        return f"connection failed ({text or 'refused'})"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return text or type(exc).__name__
