"""A remote endpoint that wants a key, and one killed mid-reply: `llmchat serve` in a subprocess."""
from __future__ import annotations

import signal

import pytest
from server_helpers import cli_server, wait_healthy

from llmchat.engine import SamplingParams
from llmchat.engine.remote import RemoteEngine, RemoteError, make_endpoint

CHAT = [{"role": "user", "content": "Tell me a long story."}]


async def test_key_from_the_environment_then_a_server_killed_mid_reply(remote_model, monkeypatch):
    args = [str(remote_model), "--api-key", "s3cret-key", "--kv-cache-gb", "0.05", "--attention", "torch"]
    with cli_server(args) as (proc, base_url):
        wait_healthy(proc, base_url, headers={"Authorization": "Bearer s3cret-key"})
        endpoint = make_endpoint("box", base_url, api_key_env="LLMCHAT_TEST_BOX_KEY")
        params = SamplingParams(max_tokens=4, temperature=0.0)

        monkeypatch.delenv("LLMCHAT_TEST_BOX_KEY", raising=False)
        with pytest.raises(RemoteError, match=r"refused the API key \(401.*set LLMCHAT_TEST_BOX_KEY"):
            [d async for d in RemoteEngine(endpoint, remote_model.name).generate(CHAT, params)]
        monkeypatch.setenv("LLMCHAT_TEST_BOX_KEY", "wrong")
        with pytest.raises(RemoteError, match=r"refused the API key \(401.*check the key"):
            [d async for d in RemoteEngine(endpoint, remote_model.name).generate(CHAT, params)]

        monkeypatch.setenv("LLMCHAT_TEST_BOX_KEY", "s3cret-key")
        engine = RemoteEngine(endpoint, remote_model.name)
        long = SamplingParams(max_tokens=2000, temperature=0.0, ignore_eos=True)
        received = ""
        with pytest.raises(RemoteError, match="connection to box broke mid-reply|ended the reply without"):
            async for delta in engine.generate(CHAT, long):
                received += delta.text
                if len(received) > 3 and proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
        assert len(received) > 3            # what came before the failure was delivered
        assert engine.metrics().num_running == 0
        await engine.shutdown()
