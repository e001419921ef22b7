"""Access rules: API key (constant-time compare), request body size limit, loopback-only without a key."""
from __future__ import annotations

import hmac
import ipaddress
import json

from .errors import error_body

OPEN_PATHS = ("/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False   # a hostname may resolve anywhere: treat it as public


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to listen beyond this machine without a key."""
    if not is_loopback(host) and not api_key:
        raise ValueError(f"refusing to listen on {host} without an API key: anyone on the network could use "
                         f"the models. Pass --api-key KEY or set LLMCHAT_API_KEY (or bind 127.0.0.1)")


def key_matches(authorization: str | None, api_key: str) -> bool:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        token = ""
    return hmac.compare_digest(token.strip().encode(), api_key.encode())


async def _send_json(send, status: int, body: dict, headers: list | None = None) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": payload})


class AccessMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware: it would hide client disconnects from the endpoints)."""

    def __init__(self, app, api_key: str | None, max_body_bytes: int):
        self.app, self.api_key, self.max_body_bytes = app, api_key, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.api_key and scope["path"] not in OPEN_PATHS and not key_matches(headers.get("authorization"),
                                                                                  self.api_key):
            return await _send_json(send, 401, error_body(
                401, "missing or incorrect API key (send Authorization: Bearer KEY)", code="invalid_api_key"),
                [(b"www-authenticate", b"Bearer")])
        too_big = error_body(413, f"the request body is larger than {self.max_body_bytes} bytes",
                             code="request_too_large")
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return await _send_json(send, 413 if length.isdigit() else 400, too_big if length.isdigit() else
                                    error_body(400, "bad Content-Length header"))
        if length is None and scope["method"] in ("POST", "PUT", "PATCH"):
            # no length given (chunked): read up to the limit here, then replay it to the app
            messages, size = [], 0
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request":
                    break
                size += len(message.get("body", b""))
                if size > self.max_body_bytes:
                    return await _send_json(send, 413, too_big)
                if not message.get("more_body"):
                    break
            replay = iter(messages)

            async def replayed():
                return next(replay, None) or await receive()
            return await self.app(scope, replayed, send)
        return await self.app(scope, receive, send)
