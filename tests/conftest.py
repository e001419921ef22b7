"""Shared test setup: tests/ on sys.path for the model builders, and a cached tiny model per arch."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from slow_first import pytest_collection_modifyitems  # noqa: E402,F401  (the driver builds lead: slow_first.py)
from tiny_models import make_model  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def isolated_cache_dir(tmp_path_factory):
    """Prepared GGUF weights (engine/quant/prepared_cache.py) go to a folder of this test session, not the
    user's cache: tests see cold loads first, and nothing outlives the run."""
    import os
    folder = tmp_path_factory.mktemp("llmchat-cache")
    previous = {name: os.environ.get(name) for name in ("LLMCHAT_CACHE_DIR", "LLMCHAT_KV_DISK")}
    os.environ["LLMCHAT_CACHE_DIR"] = str(folder)
    # The KV disk tier is off unless a test turns it on (tests/engine/test_kv_disk*.py): with it on, engines of
    # one session would find each other's blocks of the shared tiny models, and what a test counts as computed
    # or cached would depend on which tests ran before it.
    os.environ["LLMCHAT_KV_DISK"] = "0"
    yield folder
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


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
