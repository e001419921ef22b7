"""Smoke test in a real terminal: `llmchat --model PATH` under tmux, type a message, see the reply."""
from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import tomli_w

TIMEOUT = 120.0


def tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], check=True, capture_output=True, text=True).stdout


def wait_for_screen(socket: str, predicate, what: str) -> str:
    deadline = time.monotonic() + TIMEOUT
    while True:
        screen = tmux(socket, "capture-pane", "-p", "-t", "smoke")
        if predicate(screen):
            return screen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; screen:\n{screen}")
        time.sleep(0.2)   # polling a real terminal from outside: there is no event to wait on


def test_llmchat_in_tmux_answers_a_message(tmp_path, chat_model):
    assert shutil.which("tmux"), "tmux is required (apt-get install tmux)"
    llmchat = shutil.which("llmchat")
    assert llmchat, "the llmchat entry point is not installed (pip install -e .)"
    config = tmp_path / "config"
    config.mkdir()
    (config / "settings.toml").write_text(tomli_w.dumps({"kv_cache_gb": 0.03}))
    env = {"LLMCHAT_DATA_DIR": str(tmp_path / "data"), "LLMCHAT_CONFIG_DIR": str(config),
           "HF_HUB_CACHE": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color"}
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    socket = f"llmchat-smoke-{uuid.uuid4().hex[:8]}"
    tmux(socket, "new-session", "-d", "-s", "smoke", "-x", "140", "-y", "40",
         f"env {exports} {llmchat} --model {chat_model}; sleep 30")
    try:
        wait_for_screen(socket, lambda s: "Sessions" in s and "loaded" in s, "the app with the model loaded")
        tmux(socket, "send-keys", "-t", "smoke", "-l", "hello")
        tmux(socket, "send-keys", "-t", "smoke", "Enter")
        screen = wait_for_screen(socket, lambda s: "TTFT" in s, "a reply with its stats line")
        assert "You" in screen and "hello" in screen and "tokens" in screen
        tmux(socket, "send-keys", "-t", "smoke", "C-q")
        wait_for_screen(socket, lambda s: "Sessions" not in s, "the app to quit")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    # what the smoke test typed was saved
    import sqlite3
    rows = sqlite3.connect(tmp_path / "data" / "chats.sqlite3").execute("SELECT role, content FROM messages").fetchall()
    assert rows[0] == ("user", "hello") and rows[1][0] == "assistant"
