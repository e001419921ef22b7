"""kill -9 while a reply streams: the reply so far is in SQLite (saved every second), shows as interrupted
after a restart, and ctrl+o continues it."""
from __future__ import annotations

import os
import signal
import sqlite3
import time

import pytest
from helpers import press, reply_done
from tiny_models import make_model
from tmux_helpers import app_env, app_pid, start_app, stop_tmux, tmux, wait_for_screen

from llmchat.tui.app import LlmChatApp


def saved_reply(db_path) -> str | None:
    try:
        with sqlite3.connect(db_path) as conn:
            row = conn.execute("SELECT content FROM messages WHERE role = 'assistant'").fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


@pytest.fixture(scope="module")
def endless_model(tmp_path_factory):
    """Never says EOS and asks for 16k new tokens by default: a reply streams for many seconds."""
    return make_model(tmp_path_factory.mktemp("endless"), "llama", eos_token_id=383, max_position_embeddings=16384,
                      generation_config={"max_new_tokens": 16000})


async def test_sigkill_mid_reply_keeps_the_reply_and_continue_resumes_it(tmp_path, endless_model, monkeypatch):
    env = app_env(tmp_path)
    db_path = tmp_path / "data" / "chats.sqlite3"
    socket = start_app(env, f"--model {endless_model}")
    try:
        wait_for_screen(socket, lambda s: "Sessions" in s and "loaded" in s, "the app with the model loaded")
        tmux(socket, "send-keys", "-t", "smoke", "-l", "tell me everything")
        tmux(socket, "send-keys", "-t", "smoke", "Enter")
        deadline = time.monotonic() + 120
        while not saved_reply(db_path) and time.monotonic() < deadline:
            time.sleep(0.2)                                      # the first save comes within a second
        time.sleep(1.5)
        os.kill(app_pid(socket), signal.SIGKILL)
    finally:
        stop_tmux(socket)
    kept = saved_reply(db_path)
    assert kept, "nothing of the streaming reply was saved"

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=(140, 40)) as pilot:
        session = next(s for s in app.main_screen.sessions.values() if len(s.messages) == 2)
        reply = session.messages[-1]
        assert reply.content == kept and reply.finish_reason == "interrupted" and reply.cut_off
        await app.main_screen.switch_to(session.id)
        session.settings.max_tokens = 5
        await press(pilot, "ctrl+o", until=lambda: reply_done(app, session.id) and reply.finish_reason == "length",
                    what="continued")
        assert reply.content.startswith(kept) and len(reply.content) > len(kept)
    assert saved_reply(db_path) == reply.content
