"""The FastAPI application: routes of the OpenAI API, /health and /metrics, on one ServerState."""
from __future__ import annotations

import asyncio
import contextlib
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .errors import ApiError, error_response, install_error_handlers
from .generation import ClientGone, EventStream, collect, first_delta, response_body, sse_events, unless_disconnected
from .prom import ServerMetrics
from .protocol import ChatCompletionRequest, CompletionRequest
from .responses import Envelope
from .security import AccessMiddleware
from .state import ServerState


def build_app(state: ServerState, load_on_startup: bool = True) -> FastAPI:
    """The app; its lifespan loads the models in the background (503 until then) and shuts them down."""
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        loading = asyncio.ensure_future(state.load()) if load_on_startup else None
        yield
        if loading is not None and not loading.done():
            await asyncio.wait({loading})
        await state.shutdown()

    app = FastAPI(title="llmchat", version="0.1.0", lifespan=lifespan,
                  description="OpenAI-compatible API on llmchat's CPU engine: continuous batching, "
                              "prefix caching, LoRA adapters as model ids.")
    install_error_handlers(app)
    app.add_middleware(AccessMiddleware, api_key=state.settings.api_key,
                       max_body_bytes=state.settings.max_body_bytes)
    metrics = ServerMetrics(state)
    app.state.server = state

    @app.get("/health", summary="200 when the models are loaded, 503 while loading or if loading failed")
    async def health():
        if state.ready:
            return {"status": "ok", "models": list(state.models)}
        if state.load_error:
            return error_response(503, f"the model failed to load: {state.load_error}", code="model_load_failed")
        return error_response(503, "the model is still loading", code="model_loading", headers={"Retry-After": "1"})

    @app.get("/v1/models", summary="every model, and each LoRA adapter as its own model id")
    async def list_models():
        state.require_ready()
        return {"object": "list", "data": [
            {"id": m.id, "object": "model", "created": m.created, "owned_by": "llmchat",
             "root": m.id if m.parent is None else m.adapter, "parent": m.parent,
             "max_model_len": m.engine.max_model_len} for m in state.models.values()]}

    @app.get("/v1/models/{model_id:path}", summary="one model")
    async def get_model(model_id: str):
        state.require_ready()
        if model_id not in state.models:
            raise ApiError(404, f"the model {model_id!r} does not exist", param="model", code="model_not_found")
        m = state.models[model_id]
        return {"id": m.id, "object": "model", "created": m.created, "owned_by": "llmchat", "parent": m.parent}

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/chat/completions", summary="chat completion, streamed (SSE) or not")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        model = state.lookup(body.model)
        messages, params = body.to_engine()
        envelope = Envelope(f"chatcmpl-{uuid.uuid4().hex}", model.id, chat=True)
        return await run_request(request, model, messages, params, envelope, body)

    @app.post("/v1/completions", summary="text completion of a prompt (text or token ids), streamed or not")
    async def completions(body: CompletionRequest, request: Request):
        model = state.lookup(body.model)
        prompt, params = body.to_engine()
        envelope = Envelope(f"cmpl-{uuid.uuid4().hex}", model.id, chat=False)
        return await run_request(request, model, prompt, params, envelope, body)

    async def run_request(request: Request, model, prompt, params, envelope: Envelope, body):
        state.admit()
        engine = model.engine
        stream = engine.generate(prompt, params, adapter=model.adapter, request_id=envelope.id)
        result = None

        async def close() -> None:
            await stream.aclose()          # aborts the engine request if it is still running
            state.release()
            metrics.observe(model.id, getattr(result, "metrics", None), getattr(result, "finish_reason", None))

        try:
            first = await unless_disconnected(request, first_delta(stream))
            if body.stream:
                tracker = _Tracker()
                events = sse_events(envelope, tracker.watch(stream), tracker.watch_first(first), engine.tokenizer,
                                    body.include_usage, want_logprobs=params.logprobs is not None)

                async def close_stream() -> None:
                    nonlocal result
                    result = tracker
                    await close()
                return EventStream(events, close_stream)
            result = await unless_disconnected(request, collect(stream, first))
        except ClientGone:
            await close()
            return Response(status_code=499)
        except BaseException:
            await close()
            raise
        await close()
        return JSONResponse(response_body(envelope, result, engine.tokenizer))

    return app


class _Tracker:
    """Remembers a stream's last delta, so the metrics see how a streamed request ended."""
    metrics = None
    finish_reason = None

    def watch_first(self, delta):
        self._see(delta)
        return delta

    async def watch(self, stream):
        async for delta in stream:
            self._see(delta)
            yield delta

    def _see(self, delta) -> None:
        if delta.finished:
            self.metrics, self.finish_reason = delta.metrics, delta.finish_reason
