"""Shared test setup: tests/ on sys.path for the model builders, and a cached tiny model per arch."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import make_model  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def isolated_cache_dir(tmp_path_factory):
    """Prepared GGUF weights (engine/quant/prepared_cache.py) go to a folder of this test session, not the
    user's cache: tests see cold loads first, and nothing outlives the run."""
    import os
    folder = tmp_path_factory.mktemp("llmchat-cache")
    previous = os.environ.get("LLMCHAT_CACHE_DIR")
    os.environ["LLMCHAT_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("LLMCHAT_CACHE_DIR", None)
    else:
        os.environ["LLMCHAT_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A function arch -> folder of a tiny random model, built once per session."""
    made: dict[str, Path] = {}

    def get(arch: str = "llama") -> Path:
        if arch not in made:
            made[arch] = make_model(tmp_path_factory.mktemp(f"tiny-{arch}"), arch)
        return made[arch]

    return get


@pytest.fixture
def closed_port_url() -> str:
    """A URL on 127.0.0.1 nothing listens on (a remote endpoint that is down)."""
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"
