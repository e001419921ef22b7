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
from .reply import ReplyReader
from .responses import (SSE_DONE, Envelope, chat_logprobs, completion_logprobs, finish_reason, reply_deltas,
                        reply_message, sse)

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


async def first_delta(stream, constraint=None):
    """The stream's first delta; a ValueError (bad prompt, prompt too long, a constraint the grammar library
    refuses: its message starts with the parameter's name) becomes a 400."""
    try:
        return await stream.__anext__()
    except ValueError as exc:
        message = str(exc)
        too_long = "context holds" in message or "KV cache holds" in message
        param = None
        if constraint is not None and message.startswith(f"{constraint.parameter}:"):
            param = constraint.parameter
        raise ApiError(400, message, param=param,
                       code="context_length_exceeded" if too_long else "invalid_value") from None


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


def response_body(envelope: Envelope, out: Generated, tokenizer, reader: ReplyReader | None = None) -> dict:
    logprobs = None
    if out.logprobs:
        logprobs = (chat_logprobs(out.logprobs, tokenizer) if envelope.chat
                    else completion_logprobs(out.logprobs, tokenizer, 0))
    if reader is None:
        return envelope.response(out.text, finish_reason(out.finish_reason), logprobs, out.metrics)
    piece = reader.feed(out.text) + reader.finish()
    reason = finish_reason(out.finish_reason, called_tools=bool(reader.calls))
    message = reply_message(piece.content, piece.reasoning, reader.calls, with_reasoning=reader.reasoning is not None)
    return envelope.response(piece.content, reason, logprobs, out.metrics, message=message)


async def sse_events(envelope: Envelope, stream, first, tokenizer, include_usage: bool, want_logprobs: bool,
                     reader: ReplyReader | None = None):
    """The event stream of one request: role chunk (chat), content chunks (with a reader: reasoning, content
    and tool-call deltas), the final chunk, usage, [DONE]."""
    if envelope.chat:
        yield envelope.chunk("", role=True, with_usage_field=include_usage)
    delta, offset = first, 0
    while True:
        logprobs = None
        if want_logprobs and delta.logprobs:
            logprobs = (chat_logprobs(delta.logprobs, tokenizer) if envelope.chat
                        else completion_logprobs(delta.logprobs, tokenizer, offset))
        offset += len(delta.text)
        if delta.finish_reason == "error":
            yield sse({"error": {"message": "the engine failed while generating (see the server log)",
                                 "type": "server_error", "param": None, "code": "engine_error"}})
            break
        text = delta.text
        if reader is not None:   # the reply's pieces go out as they are read; the final chunk holds no text
            for chunk in _read_chunks(envelope, reader, delta, logprobs, include_usage):
                yield chunk
            text, logprobs = "", None
        if delta.finished:
            reason = finish_reason(delta.finish_reason, called_tools=bool(reader and reader.calls))
            yield envelope.chunk(text, reason, logprobs, with_usage_field=include_usage, metrics=delta.metrics,
                                 delta={} if reader is not None else None)
            if include_usage:
                yield envelope.usage_chunk(delta.metrics)
            break
        if logprobs:
            yield envelope.chunk(text, None, logprobs, with_usage_field=include_usage)
        elif text:
            yield envelope.text_chunk(text, include_usage)
        delta = await stream.__anext__()
    yield SSE_DONE


def _read_chunks(envelope: Envelope, reader: ReplyReader, delta, logprobs, include_usage: bool):
    """One engine delta through the reader: a chunk per reasoning, content or tool-call delta (the logprobs ride
    on the first, or on an empty delta when the text is held back)."""
    piece = reader.feed(delta.text)
    if delta.finished:
        piece = piece + reader.finish()
    parts = reply_deltas(piece)
    if logprobs and not parts:
        parts = [{}]
    for i, part in enumerate(parts):
        yield envelope.chunk("", None, logprobs if i == 0 else None, with_usage_field=include_usage, delta=part)


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
