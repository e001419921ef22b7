"""Run the server with uvicorn: bind check first, models load in the background (503 until ready)."""
from __future__ import annotations

import logging
import socket

from .app import build_app
from .security import check_bind
from .state import ModelSpec, ServerSettings, ServerState


def make_server(specs: list[ModelSpec], settings: ServerSettings, host: str, port: int, log_level: str = "info",
                engine_factory=None):
    """A uvicorn.Server (not started) and its ServerState."""
    import uvicorn   # the ASGI server: needed only when a server starts, not to build the API (tests, openapi)

    check_bind(host, settings.api_key)
    state = ServerState(specs, settings, engine_factory)
    config = uvicorn.Config(build_app(state), host=host, port=port, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=5, lifespan="on")
    return uvicorn.Server(config), state


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before loading, so a busy port fails at once with a clear message."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio turns Nagle off (TCP_NODELAY) only on sockets that do, and with Nagle on, each
    # small SSE event after the first waits for the client's delayed ACK (~40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise RuntimeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def serve(specs: list[ModelSpec], settings: ServerSettings, host: str = "127.0.0.1", port: int = 8000,
          log_level: str = "info") -> None:
    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO), format="%(levelname)s: %(message)s")
    server, _ = make_server(specs, settings, host, port, log_level)
    sock = bind_socket(host, port)
    shown = f"[{host}]" if ":" in host else host
    logging.getLogger("llmchat.serve").info("listening on http://%s:%d/v1 (models load in the background; "
                                            "/health says when they are ready)", shown, sock.getsockname()[1])
    server.run(sockets=[sock])
