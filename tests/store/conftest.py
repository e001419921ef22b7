"""Fixtures for the store tests: a stand-in Hub on 127.0.0.1 and a ModelStore pointed at it."""
from __future__ import annotations

import pytest

from fake_hub import FakeHubServer, FakeRepo  # noqa: F401  (pytest puts tests/store on sys.path)
from tiny_models import make_model


@pytest.fixture
def hub():
    with FakeHubServer() as fake:
        yield fake


@pytest.fixture
def hub_env(hub, tmp_path, monkeypatch):
    """Environment of a user pointed at the stand-in Hub, with a fresh HF cache and data dir."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("LLMCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for var in ("HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "LLMCHAT_FREE_SPACE_BYTES",
                "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    return hub


@pytest.fixture
def store(hub_env, tmp_path):
    from llmchat.engine.store import ModelStore
    return ModelStore()


@pytest.fixture(scope="session")
def big_llama(tmp_path_factory):
    """~9 MB of weights: several 1 MiB download chunks, so cancel and drops land midway."""
    return make_model(tmp_path_factory.mktemp("big-llama"), "llama", hidden_size=256, intermediate_size=1024)
