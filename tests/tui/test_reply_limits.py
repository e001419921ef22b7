"""A reply runs until the model stops: no fixed cut by default. The stats line under a reply says why it ended
("context full", or "cut off (max tokens)" only when the user set a max), against the real engine."""
from __future__ import annotations

import pytest
from helpers import last_stats_line, open_with_model, press, reply_done, send, set_session, wait_until
from textual.widgets import Input
from tiny_models import make_model

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.generation import finish_reason
from llmchat.tui.app.screens.session_settings import SessionSettingsScreen

SIZE = (140, 40)
CONTEXT = 64


@pytest.fixture(scope="module")
def short_context_model(tmp_path_factory):
    """Never says EOS (an id the tokenizer never produces) and holds 64 tokens: an unlimited reply fills it."""
    return make_model(tmp_path_factory.mktemp("short-context"), "llama", eos_token_id=383,
                      max_position_embeddings=CONTEXT)


async def test_a_reply_runs_until_the_context_is_full_unless_the_user_sets_a_max(dirs, short_context_model):
    app = LlmChatApp(model=str(short_context_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await press(pilot, "f3", until=lambda: isinstance(app.screen, SessionSettingsScreen)
                    and app.screen.query("#max_tokens"), what="settings and its fields")   # mounted, not just pushed
        assert app.screen.query_one("#max_tokens", Input).placeholder == \
            "no limit: until the model stops or the context is full"
        await press(pilot, "escape", until=lambda: not isinstance(app.screen, SessionSettingsScreen), what="closed")
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app), what="a reply with no max")
        reply = app.main_screen.current.messages[-1]
        assert reply.finish_reason == "context" and not reply.cut_off     # ctrl+o cannot go on in a full context
        assert reply.stats.num_prompt_tokens + reply.stats.num_generated_tokens == CONTEXT
        await wait_until(pilot, lambda: "context full" in last_stats_line(app), what="'context full' shown")

        # shown, not just created: set_session changes the current session's settings
        await press(pilot, "ctrl+n", until=lambda: len(app.main_screen.sessions) == 2
                    and app.main_screen.current_id == max(app.main_screen.sessions), what="new session")
        set_session(app, model=str(short_context_model), max_tokens=5)
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app), what="a reply with max 5")
        reply = app.main_screen.current.messages[-1]
        assert reply.finish_reason == "length" and reply.stats.num_generated_tokens == 5 and reply.cut_off
        await wait_until(pilot, lambda: "cut off (max tokens)" in last_stats_line(app), what="'cut off' shown")


def test_length_is_told_apart_by_whether_the_users_max_was_reached():
    assert finish_reason("length", None, 40, remote=False) == "context"
    assert finish_reason("length", 100, 40, remote=False) == "context"      # the context came first
    assert finish_reason("length", 40, 40, remote=False) == "length"
    assert finish_reason("length", None, 40, remote=True) == "length"       # a server may have a default of its own
    assert finish_reason("stop", None, 3, remote=False) == "stop"
    assert finish_reason(None, None, 3, remote=False) == "stop"
