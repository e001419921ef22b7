"""Access rules: the API key when one is set (401 otherwise, /health open), 503 while the model loads or
after it failed to load."""
from __future__ import annotations

import threading

import httpx
import openai
import pytest
from server_helpers import ThreadServer, serve_settings, wait_until

from llmchat.engine import AsyncEngine
from llmchat.engine.serve import ModelSpec
from llmchat.engine.serve.security import check_bind, is_loopback, key_matches

KEY = "s3cret-key"
USER = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def keyed(served_model):
    with ThreadServer([ModelSpec("tiny", served_model[0])], serve_settings(api_key=KEY)) as s:
        yield s


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY},
                                     {"Authorization": f"Basic {KEY}"}, {"Authorization": f"Bearer {KEY}x"}])
def test_missing_or_wrong_key_is_401(keyed, headers):
    for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/metrics")):
        r = httpx.request(method, f"{keyed.base_url}{path}", headers=headers, json={"messages": USER})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["code"] == "invalid_api_key"


def test_the_right_key_works_and_health_is_open(keyed):
    client = openai.OpenAI(base_url=f"{keyed.base_url}/v1", api_key=KEY, max_retries=0)
    assert client.chat.completions.create(model="tiny", messages=USER, max_tokens=2).choices
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{keyed.base_url}/v1", api_key="nope", max_retries=0).models.list()
    assert httpx.get(f"{keyed.base_url}/health").status_code == 200


def test_bind_rules():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.com")
    with pytest.raises(ValueError, match="API key"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", KEY)
    check_bind("127.0.0.1", None)
    assert key_matches(f"Bearer {KEY}", KEY) and key_matches(f"bearer  {KEY}", KEY)
    assert not key_matches(None, KEY) and not key_matches("Bearer ", KEY)


def test_503_while_loading_then_200(served_model):
    gate = threading.Event()

    def slow_engine(path, **kwargs):
        gate.wait(30)
        return AsyncEngine(path, **kwargs)

    server = ThreadServer([ModelSpec("tiny", served_model[0])], serve_settings(), engine_factory=slow_engine)
    with server.started(wait=False):
        wait_until(lambda: _status(server, "GET", "/health") == 503, "the server answers while loading")
        for method, path in (("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/chat/completions")):
            r = httpx.request(method, f"{server.base_url}{path}", json={"messages": USER})
            assert r.status_code == 503 and r.json()["error"]["code"] == "model_loading", path
            assert r.headers["retry-after"]
        gate.set()
        wait_until(lambda: _status(server, "GET", "/health") == 200, "loaded")
        assert _status(server, "POST", "/v1/chat/completions") == 200


def test_a_model_that_fails_to_load_gives_503_with_the_reason(served_model):
    def broken(path, **kwargs):
        raise ValueError("no weights in this folder")

    server = ThreadServer([ModelSpec("tiny", served_model[0])], serve_settings(), engine_factory=broken)
    with server.started(wait=False):
        wait_until(lambda: server.state.load_error, "the load fails")
        r = httpx.post(f"{server.base_url}/v1/chat/completions", json={"messages": USER})
        assert r.status_code == 503 and "no weights in this folder" in r.json()["error"]["message"]
        assert httpx.get(f"{server.base_url}/health").status_code == 503


def _status(server, method: str, path: str) -> int:
    try:
        return httpx.request(method, f"{server.base_url}{path}", json={"messages": USER, "max_tokens": 2}).status_code
    except httpx.TransportError:
        return 0
