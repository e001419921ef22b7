"""Smoke test in a real terminal: `llmchat --model PATH` under tmux, type a message, see the reply."""
from __future__ import annotations

import sqlite3

from tmux_helpers import app_env, start_app, stop_tmux, tmux, wait_for_screen


def test_llmchat_in_tmux_answers_a_message(tmp_path, chat_model):
    env = app_env(tmp_path)
    socket = start_app(env, f"--model {chat_model}")
    try:
        wait_for_screen(socket, lambda s: "Sessions" in s and "loaded" in s, "the app with the model loaded")
        tmux(socket, "send-keys", "-t", "smoke", "-l", "hello")
        tmux(socket, "send-keys", "-t", "smoke", "Enter")
        screen = wait_for_screen(socket, lambda s: "TTFT" in s, "a reply with its stats line")
        assert "You" in screen and "hello" in screen and "tokens" in screen
        tmux(socket, "send-keys", "-t", "smoke", "C-q")
        wait_for_screen(socket, lambda s: "Sessions" not in s, "the app to quit")
    finally:
        stop_tmux(socket)
    # what the smoke test typed was saved
    rows = sqlite3.connect(tmp_path / "data" / "chats.sqlite3").execute("SELECT role, content FROM messages").fetchall()
    assert rows[0] == ("user", "hello") and rows[1][0] == "assistant"
