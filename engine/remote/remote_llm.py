"""The offline LLM interface (generate a batch, get RequestOutputs) on a remote model: compare uses it like LLM.

Requests run as concurrent streams, so the server batches them as the local engine would.
"""
from __future__ import annotations

import asyncio

from ..outputs import RequestOutput
from ..sampling_params import SamplingParams
from .endpoints import Endpoint
from .remote_engine import RemoteEngine
from .request_body import request_body
from .sse import RemoteError

MAX_CONCURRENT = 16


class RemoteLLM:
    def __init__(self, endpoint: Endpoint, model_id: str):
        self.engine = RemoteEngine(endpoint, model_id)

    def load_adapter(self, name: str, path) -> None:
        raise ValueError(f"{self.engine.name} is remote: its server's adapters are models of their own "
                         f"(compare remote:{self.engine.endpoint.name}/ADAPTER-ID instead)")

    def generate(self, prompts: list, params=None, adapter=None, on_output=None) -> list[RequestOutput]:
        """One output per prompt, in order; a request the server fails has finish_reason "error" and the reason.
        ValueError before anything is sent when a prompt or its settings are invalid."""
        if adapter is not None and any(adapter if isinstance(adapter, list) else [adapter]):
            self.load_adapter(str(adapter), None)
        per_prompt = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        for prompt, p in zip(prompts, per_prompt):
            p.validate()
            request_body(self.engine.model_id, prompt, p)    # ValueError for a prompt it cannot send
        return asyncio.run(self._run_all(prompts, per_prompt, on_output))

    def shutdown(self) -> None:
        pass    # each generate() closes its connections with its event loop

    async def _run_all(self, prompts, params, on_output) -> list[RequestOutput]:
        gate = asyncio.Semaphore(MAX_CONCURRENT)

        async def one(i: int) -> RequestOutput:
            async with gate:
                out = await self._run_one(f"compare-{i}", prompts[i], params[i])
            if on_output is not None:
                on_output(i, out)
            return out
        try:
            return list(await asyncio.gather(*(one(i) for i in range(len(prompts)))))
        finally:
            await self.engine.shutdown()

    async def _run_one(self, request_id: str, prompt, params: SamplingParams) -> RequestOutput:
        text, finish, metrics, error = "", "error", None, None
        try:
            async for delta in self.engine.generate(prompt, params, request_id=request_id):
                text += delta.text
                metrics = delta.metrics or metrics
                if delta.finished:
                    finish = delta.finish_reason or "stop"
        except RemoteError as exc:
            error = str(exc)
        out = RequestOutput(request_id=request_id, prompt_token_ids=[], token_ids=[], text=text,
                            finish_reason=finish if error is None else "error", error=error)
        if metrics is not None:
            out.metrics = metrics
        return out
