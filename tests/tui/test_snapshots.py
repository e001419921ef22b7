"""Snapshots of the main screens (pytest-textual-snapshot). Live figures (TTFT, tok/s, the engine panel,
toasts with load times) are replaced by fixed values before the screenshot; the tiny model is greedy."""
from __future__ import annotations

import pytest
from helpers import notices, reply_done, send, wait_until

from llmchat.engine.metrics import MetricsSnapshot
from llmchat.engine.store import ModelStore
from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.chat_state import ReplyStats
from llmchat.tui.app.widgets.chat_view import ChatView
from llmchat.tui.app.widgets.engine_panel import HISTORY, EnginePanel

# Every screen at a roomy terminal and at the smallest common one (every field must show at 80x24).
SIZES = pytest.mark.parametrize("size", [(160, 48), (80, 24)], ids=["160x48", "80x24"])


def stop_blinking(widget) -> None:
    """A blinking cursor is a timing too. A TextArea keeps the lines it drew in a blink-off phase under the
    key a cursor that does not blink has: drop them (notify_style_update clears that cache)."""
    widget.cursor_blink = False
    widget.notify_style_update()


async def freeze_live_figures(pilot, app) -> None:
    """Stop the metrics timer, show fixed figures where real timings would be, and rebuild the chat from
    the saved text (a streamed Markdown body can differ in how its fragments arrived)."""
    # the snapshot's autopilot starts with the app, before the chat screen has opened its sessions
    await wait_until(pilot, lambda: app.main_screen.metrics_timer is not None and app.main_screen.current,
                     what="chat screen open")
    app.main_screen.metrics_timer.pause()
    app.clear_notifications()
    for widget in app.query("PromptInput"):
        stop_blinking(widget)
    for session in app.main_screen.sessions.values():
        for message in session.messages:
            if message.stats:
                message.stats = ReplyStats(ttft=0.05, tokens_per_s=100.0,
                                           num_generated_tokens=message.stats.num_generated_tokens,
                                           num_prompt_tokens=message.stats.num_prompt_tokens,
                                           num_cached_tokens=message.stats.num_cached_tokens)
    panel = app.query_one(EnginePanel)
    snapshot = MetricsSnapshot(generation_tokens_per_s=0.0, kv_blocks_used=2, kv_blocks_total=100)
    panel.history.extend([10.0 * (i % 5) for i in range(HISTORY - 1)])
    panel.show([("chat-model", snapshot)], [])
    chat = app.query_one(ChatView)
    await chat.show(chat.session)


async def model_ready(pilot, app) -> None:
    """Loaded, and the load notice (with its timing) posted, so nothing changes after the freeze."""
    await wait_until(pilot, lambda: any("loaded in" in n for n in notices(app)), what="model loaded notice")


@SIZES
def test_main_screen_with_a_reply(dirs, chat_model, snap_compare, size):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)

    async def run_before(pilot):
        await model_ready(pilot, app)
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app))
        await send(pilot, "Write code")
        await wait_until(pilot, lambda: reply_done(app))
        await freeze_live_figures(pilot, app)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@SIZES
def test_session_settings_screen(dirs, chat_model, snap_compare, size):
    name = ModelStore().import_path(chat_model).name    # a library name: the model field shows no tmp path
    app = LlmChatApp(model=name, show_welcome=False)

    async def run_before(pilot):
        await model_ready(pilot, app)
        await freeze_live_figures(pilot, app)
        await pilot.press("f3")
        for widget in app.screen.query("Input, TextArea"):
            stop_blinking(widget)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@SIZES
def test_first_run_welcome_screen(dirs, snap_compare, size):
    app = LlmChatApp()

    async def run_before(pilot):
        await wait_until(pilot, lambda: type(app.screen).__name__ == "WelcomeScreen")
        await freeze_live_figures(pilot, app)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@SIZES
def test_models_screen_library(dirs, chat_model, snap_compare, size):
    ModelStore().import_path(chat_model)
    app = LlmChatApp(show_welcome=False)

    async def run_before(pilot):
        await freeze_live_figures(pilot, app)
        await pilot.press("f4")
        await wait_until(pilot, lambda: app.screen.query_one("#library-table").row_count == 1)
        # the row lands before the columns are resized to it: let that layout pass run first
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.3)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@SIZES
def test_compare_screen(dirs, chat_model, snap_compare, size):
    ModelStore().import_path(chat_model)
    app = LlmChatApp(show_welcome=False)

    async def run_before(pilot):
        await freeze_live_figures(pilot, app)
        await pilot.press("f6")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "CompareScreen" and
                         app.screen.query("#compare-max-tokens") and app.focused is not None and
                         app.focused.id == "compare-prompt")
        for widget in app.screen.query("Input, TextArea"):
            stop_blinking(widget)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.2)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@SIZES
def test_help_screen(dirs, snap_compare, size, monkeypatch):
    monkeypatch.setattr("llmchat.tui.app.screens.help_screen.data_dir", lambda: "~/.local/share/llmchat")
    monkeypatch.setattr("llmchat.tui.app.screens.help_screen.config_dir", lambda: __import__("pathlib").Path("~/.config/llmchat"))
    app = LlmChatApp(show_welcome=False)

    async def run_before(pilot):
        await freeze_live_figures(pilot, app)
        await pilot.press("f1")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen" and app.screen.query("Markdown")
                         and app.screen.query_one("Markdown").source)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
