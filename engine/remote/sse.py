"""Server-sent events as OpenAI-compatible servers stream them: `data: {json}` lines, ending with `data: [DONE]`."""
from __future__ import annotations

import json


class RemoteError(RuntimeError):
    """A remote endpoint could not be reached or answered with an error; the message says which and why."""


def error_message(body: bytes | str, status: int) -> str:
    """The `error.message` of OpenAI's error JSON (vLLM, llama-server and Ollama use it), else the body."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if isinstance(data.get("detail"), str):
            return data["detail"]
    text = " ".join(text.split())
    return text[:200] if text else f"HTTP {status}"


async def events(lines):
    """Yield each event's parsed JSON object from an async iterator of lines; stops at [DONE]."""
    async for line in lines:
        if not line.startswith("data:"):
            continue          # comments (keep-alives), event names, blank separators
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            event = json.loads(payload)
        except ValueError:
            raise RemoteError(f"the server sent an event that is not JSON: {payload[:80]!r}") from None
        if isinstance(event, dict) and "error" in event:
            raise RemoteError(f"the server failed mid-reply: {error_message(payload, 500)}")
        yield event
