"""The FastAPI application: routes of the OpenAI API, /health and /metrics, on one ServerState."""
from __future__ import annotations

import asyncio
import contextlib
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .errors import ApiError, error_response, error_responses, install_error_handlers
from .generation import ClientGone, EventStream, collect, first_delta, response_body, sse_events, unless_disconnected
from .openapi import truthful_openapi
from .prom import ServerMetrics
from .protocol import ChatCompletionRequest, CompletionRequest
from .reading import reply_reader, template_takes_kwargs
from .responses import Envelope
from .security import AccessMiddleware
from .state import ServerState

GENERATION_ERRORS = error_responses(400, 401, 404, 413, 429, 500, 503)
# each server-sent event: a `data:` line holding a chunk's JSON, the last one "[DONE]"
SSE_EVENT = {"type": "object", "properties": {"data": {"type": "string"}}, "required": ["data"]}
STREAM_OR_JSON = {200: {"description": "the completion (JSON), or with stream: true its server-sent events",
                        "content": {"text/event-stream": {"schema": SSE_EVENT}}}}


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

    app.openapi = lambda: truthful_openapi(app, state)

    @app.get("/health", summary="200 when the models are loaded, 503 while loading or if loading failed",
             responses=error_responses(503))
    async def health():
        if state.ready:
            return {"status": "ok", "models": list(state.models)}
        if state.load_error:
            return error_response(503, f"the model failed to load: {state.load_error}", code="model_load_failed")
        return error_response(503, "the model is still loading", code="model_loading", headers={"Retry-After": "1"})

    @app.get("/v1/models", summary="every model, and each LoRA adapter as its own model id",
             responses=error_responses(401, 503))
    async def list_models():
        state.require_ready()
        return {"object": "list", "data": [
            {"id": m.id, "object": "model", "created": m.created, "owned_by": "llmchat",
             "root": m.id if m.parent is None else m.adapter, "parent": m.parent,
             "max_model_len": m.engine.max_model_len} for m in state.models.values()]}

    @app.get("/v1/models/{model_id:path}", summary="one model", responses=error_responses(401, 404, 503))
    async def get_model(model_id: str):
        state.require_ready()
        if model_id not in state.models:
            raise ApiError(404, f"the model {model_id!r} does not exist", param="model", code="model_not_found")
        m = state.models[model_id]
        return {"id": m.id, "object": "model", "created": m.created, "owned_by": "llmchat", "parent": m.parent}

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response, responses={
        200: {"description": "Prometheus' text format", "content": {"text/plain": {"schema": {"type": "string"}}}},
        **error_responses(401)})
    async def prometheus():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/chat/completions", summary="chat completion, streamed (SSE) or not",
              responses={**STREAM_OR_JSON, **GENERATION_ERRORS})
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        model = state.lookup(body.model)
        tokenizer = model.engine.tokenizer
        plan = body.to_engine(getattr(tokenizer, "chat_template", None))
        if body.chat_template_kwargs:
            template_takes_kwargs(tokenizer, plan.prompt)
        reader = reply_reader(tokenizer, plan)
        envelope = Envelope(f"chatcmpl-{uuid.uuid4().hex}", model.id, chat=True)
        return await run_request(request, model, plan.prompt, plan.params, envelope, body, reader)

    @app.post("/v1/completions", summary="text completion of a prompt (text or token ids), streamed or not",
              responses={**STREAM_OR_JSON, **GENERATION_ERRORS})
    async def completions(body: CompletionRequest, request: Request):
        model = state.lookup(body.model)
        prompt, params = body.to_engine(model.engine.tokenizer)
        envelope = Envelope(f"cmpl-{uuid.uuid4().hex}", model.id, chat=False)
        return await run_request(request, model, prompt, params, envelope, body)

    async def run_request(request: Request, model, prompt, params, envelope: Envelope, body, reader=None):
        state.admit()
        engine = model.engine
        stream = engine.generate(prompt, params, adapter=model.adapter, request_id=envelope.id)
        result = None

        async def close() -> None:
            await stream.aclose()          # aborts the engine request if it is still running
            state.release()
            metrics.observe(model.id, getattr(result, "metrics", None), getattr(result, "finish_reason", None))

        try:
            first = await unless_disconnected(request, first_delta(stream, params.structured_outputs))
            if body.stream:
                tracker = _Tracker()
                events = sse_events(envelope, tracker.watch(stream), tracker.watch_first(first), engine.tokenizer,
                                    body.include_usage, want_logprobs=params.logprobs is not None, reader=reader)

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
        return JSONResponse(response_body(envelope, result, engine.tokenizer, reader))

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
