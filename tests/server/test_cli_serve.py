"""`llmchat serve` as a user runs it, in a subprocess: a model folder, a .gguf file and a library name in one
server, an adapter as its own model id, the key from LLMCHAT_API_KEY on a non-loopback bind; without a key
such a bind is refused before anything loads."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import openai
import pytest
from gguf_models import write_gguf
from server_helpers import cli_server, wait_healthy

from llmchat.tui.cli.serve import model_id, parse_adapters

KEY = "cli-test-key"
ENGINE_ARGS = ["--attention", "torch", "--kv-cache-gb", "0.02", "--log-level", "warning"]


@pytest.fixture
def user_env(tmp_path, monkeypatch):
    env = {"LLMCHAT_DATA_DIR": str(tmp_path / "data"), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LLMCHAT_API_KEY", raising=False)
    return env


def test_folder_gguf_and_library_name_with_an_adapter(served_model, user_env, tmp_path):
    from llmchat.engine.store import ModelStore
    folder, a_dir, _ = served_model
    gguf = write_gguf(folder, tmp_path / "tiny-file.gguf")
    ModelStore().import_path(folder, name="tiny-lib")
    args = [str(folder), str(gguf), "tiny-lib", "--adapter", f"tiny-a={a_dir}", "--host", "0.0.0.0", *ENGINE_ARGS]
    with cli_server(args, env={**user_env, "LLMCHAT_API_KEY": KEY}) as (proc, base_url):
        wait_healthy(proc, base_url)
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=KEY, max_retries=0)
        ids = {m.id for m in client.models.list().data}
        assert ids == {model_id(str(folder)), "tiny-file", "tiny-lib", "tiny-a"}
        replies = {}
        for name in sorted(ids):
            reply = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hello"}],
                                                   max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
            assert reply.usage.completion_tokens == 6
            replies[name] = reply.choices[0].message.content
        assert replies["tiny-lib"] == replies[model_id(str(folder))]   # the same weights
        assert replies["tiny-a"] != replies["tiny-lib"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{base_url}/v1", api_key="wrong", max_retries=0).models.list()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0


def test_non_loopback_bind_without_a_key_is_refused(served_model, user_env):
    proc = subprocess.run([sys.executable, "-m", "llmchat.tui.cli", "serve", str(served_model[0]),
                           "--host", "0.0.0.0"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **user_env})
    assert proc.returncode == 2
    assert "without an API key" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_arguments_are_refused_with_a_message(served_model, user_env, tmp_path):
    for args in (["--adapter", "no-equals-sign"], ["--max-pending", "0"]):
        proc = subprocess.run([sys.executable, "-m", "llmchat.tui.cli", "serve", str(served_model[0]), *args],
                              capture_output=True, text=True, timeout=120, env={**os.environ, **user_env})
        assert proc.returncode == 2 and "llmchat: error:" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "llmchat.tui.cli", "serve", str(tmp_path / "nowhere")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **user_env})
    assert proc.returncode == 2 and "llmchat: error:" in proc.stderr and "Traceback" not in proc.stderr


def test_adapter_arguments():
    assert parse_adapters(["a=/x/y", "b=lib-name"]) == [("a", "/x/y"), ("b", "lib-name")]
    with pytest.raises(ValueError):
        parse_adapters(["=x"])
