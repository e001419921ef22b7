"""One request's run on the engine: collected whole, or streamed as server-sent events.

A client that goes away aborts its request at once (the engine frees its blocks): the non-streaming
path races the generation against the client's disconnect; the streaming path is cancelled by
Starlette when the client disconnects, and closing the engine's stream aborts the request.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from starlette.responses import StreamingResponse

from .errors import ApiError
from .responses import SSE_DONE, Envelope, chat_logprobs, completion_logprobs, finish_reason, sse

STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


@dataclass
class Generated:
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    finish_reason: str | None = None
    metrics: object = None


async def _wait_disconnect(request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request, awaitable):
    """Await `awaitable`; if the client disconnects first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise ClientGone


async def first_delta(stream):
    """The stream's first delta; a ValueError (bad prompt, prompt too long) becomes a 400."""
    try:
        return await stream.__anext__()
    except ValueError as exc:
        message = str(exc)
        too_long = "context holds" in message or "KV cache holds" in message
        raise ApiError(400, message, code="context_length_exceeded" if too_long else "invalid_value") from None


async def collect(stream, first) -> Generated:
    out = Generated()
    delta = first
    while True:
        out.text += delta.text
        out.token_ids += delta.token_ids
        out.logprobs += delta.logprobs or []
        if delta.finished:
            out.finish_reason, out.metrics = delta.finish_reason, delta.metrics
            return out
        delta = await stream.__anext__()


def response_body(envelope: Envelope, out: Generated, tokenizer) -> dict:
    logprobs = None
    if out.logprobs:
        logprobs = (chat_logprobs(out.logprobs, tokenizer) if envelope.chat
                    else completion_logprobs(out.logprobs, tokenizer, 0))
    return envelope.response(out.text, finish_reason(out.finish_reason), logprobs, out.metrics)


async def sse_events(envelope: Envelope, stream, first, tokenizer, include_usage: bool, want_logprobs: bool):
    """The event stream of one request: role chunk (chat), content chunks, the final chunk, usage, [DONE]."""
    if envelope.chat:
        yield envelope.chunk("", role=True, with_usage_field=include_usage)
    delta, offset = first, 0
    while True:
        logprobs = None
        if want_logprobs and delta.logprobs:
            logprobs = (chat_logprobs(delta.logprobs, tokenizer) if envelope.chat
                        else completion_logprobs(delta.logprobs, tokenizer, offset))
        offset += len(delta.text)
        if delta.finished:
            if delta.finish_reason == "error":
                yield sse({"error": {"message": "the engine failed while generating (see the server log)",
                                     "type": "server_error", "param": None, "code": "engine_error"}})
                break
            yield envelope.chunk(delta.text, finish_reason(delta.finish_reason), logprobs,
                                 with_usage_field=include_usage, metrics=delta.metrics)
            if include_usage:
                yield envelope.usage_chunk(delta.metrics)
            break
        if logprobs:
            yield envelope.chunk(delta.text, None, logprobs, with_usage_field=include_usage)
        elif delta.text:
            yield envelope.text_chunk(delta.text, include_usage)
        delta = await stream.__anext__()
    yield SSE_DONE


class EventStream(StreamingResponse):
    """An SSE response that always runs `on_close` (abort the engine request, release the admission), even
    when the client leaves before the body starts."""

    def __init__(self, events, on_close):
        super().__init__(events, media_type="text/event-stream", headers=STREAM_HEADERS)
        self._on_close = on_close

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()
