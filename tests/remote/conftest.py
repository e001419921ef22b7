"""A real `llmchat serve` as the remote endpoint: uvicorn in a thread (one per module) or, where a test kills
the server, `llmchat serve` in a subprocess. Both serve the same tiny greedy Llama the local engine runs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "server"))

from server_helpers import ThreadServer, serve_settings  # noqa: E402

from llmchat.engine.remote import make_endpoint  # noqa: E402
from llmchat.engine.serve.state import ModelSpec  # noqa: E402


@pytest.fixture(scope="module")
def remote_model(tmp_path_factory) -> Path:
    from tiny_models import make_model
    return make_model(tmp_path_factory.mktemp("remote-model"), "llama")


@pytest.fixture(scope="module")
def server(remote_model):
    """The model served as id "tiny" on 127.0.0.1."""
    with ThreadServer([ModelSpec("tiny", remote_model, [])], serve_settings()) as running:
        yield running


@pytest.fixture(scope="module")
def endpoint(server):
    return make_endpoint("lab", server.base_url)
