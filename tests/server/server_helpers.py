"""A real llmchat server for tests: uvicorn in a thread on 127.0.0.1 (a free port), or `llmchat serve` in a
subprocess; and small waiting helpers (the machine is shared: poll, never sleep a fixed time)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

import httpx

from llmchat.engine.serve.run import bind_socket, make_server
from llmchat.engine.serve.state import ModelSpec, ServerSettings

ENGINE = dict(attention_backend="torch", kv_cache_gb=0.05, max_num_batched_tokens=64)


def wait_until(predicate, what: str, timeout: float = 60.0, interval: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"never happened within {timeout:.0f} s: {what}")


def _healthy(base_url: str, headers: dict | None = None) -> bool:
    try:
        return httpx.get(f"{base_url}/health", headers=headers, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


class ThreadServer:
    """uvicorn.Server running in a thread; `.state` is its ServerState (engines, pending count)."""

    def __init__(self, specs: list[ModelSpec], settings: ServerSettings, engine_factory=None):
        self.server, self.state = make_server(specs, settings, "127.0.0.1", 0, log_level="warning",
                                              engine_factory=engine_factory)
        self.sock = bind_socket("127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> "ThreadServer":
        self.thread.start()
        wait_until(lambda: _healthy(self.base_url) or self.state.load_error, "the server is ready")
        assert self.state.load_error is None, self.state.load_error
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

    @contextlib.contextmanager
    def started(self, wait: bool = True):
        """Run the server; with wait=False, return as soon as it listens (the models may still load)."""
        if wait:
            with self:
                yield self
            return
        self.thread.start()
        try:
            yield self
        finally:
            self.__exit__()

    def engine(self, model_id: str | None = None):
        return self.state.engines[model_id or self.state.specs[0].id]


def serve_settings(**overrides) -> ServerSettings:
    engine_kwargs = {**ENGINE, **overrides.pop("engine_kwargs", {})}
    return ServerSettings(engine_kwargs=engine_kwargs, **overrides)


@contextlib.contextmanager
def cli_server(args: list[str], env: dict | None = None, port: int | None = None):
    """`llmchat serve ARGS` in a subprocess; yields (process, base_url) once /health is 200."""
    port = port or _free_port()
    cmd = [sys.executable, "-m", "llmchat.tui.cli", "serve", *args, "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    base_url = f"http://127.0.0.1:{port}"
    try:
        yield proc, base_url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_healthy(proc, base_url: str, headers: dict | None = None, timeout: float = 120) -> None:
    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"llmchat serve exited with {proc.returncode}: {proc.stdout.read()}")
        return _healthy(base_url, headers)
    wait_until(ready, "llmchat serve is ready", timeout=timeout, interval=0.1)


def _free_port() -> int:
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    return port
