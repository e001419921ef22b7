"""Shared helpers of the TUI tests: wait on a condition (never a bare sleep), build apps in tmp dirs."""
from __future__ import annotations

import asyncio
import time

from llmchat.tui.app.widgets.chat_view import ChatView

WAIT_TIMEOUT = 120.0   # generous: 2 shared cores, several engines


async def wait_until(pilot, predicate, timeout: float = WAIT_TIMEOUT, what: str = "condition") -> None:
    """Let the app run until predicate() is true; fail with `what` after `timeout` seconds."""
    # Poll with asyncio.sleep, not pilot.pause: pause waits for the screen to settle, which a streaming
    # reply delays until it ends, and these tests look at the app while replies stream.
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def press(pilot, *keys: str, until=None, what: str = "key effect") -> None:
    """Press keys without waiting for the screen to settle (see wait_until); then wait for `until`."""
    for key in keys:
        pilot.app.simulate_key(key)
        await asyncio.sleep(0)
    if until is not None:
        await wait_until(pilot, until, what=what)


def reply_done(app, session_id: int | None = None) -> bool:
    session = app.main_screen.sessions[session_id if session_id is not None else app.main_screen.current_id]
    return bool(session.messages) and session.messages[-1].role == "assistant" \
        and session.messages[-1].finish_reason is not None and session.id not in app.main_screen.replies


def notices(app) -> list[str]:
    return [n.message for n in app._notifications]


async def send(pilot, text: str, typed: bool = False) -> None:
    """Put text in the message input (typed key by key, or pasted) and press Enter."""
    from llmchat.tui.app.widgets.prompt_input import PromptInput
    prompt = pilot.app.query_one(PromptInput)
    prompt.focus()
    if typed:
        await pilot.press(*text)
    else:
        prompt.load_text(text)
    session = pilot.app.main_screen.current
    count = len(session.messages)
    await press(pilot, "enter", until=lambda: len(session.messages) > count or prompt.text == "", what="sent")


async def open_with_model(pilot, app) -> None:
    """Wait until the --model given to the app is loaded."""
    await wait_until(pilot, lambda: len(app.engines.loaded) == 1, what="model loaded")


def set_session(app, **settings) -> None:
    """Change the current session's settings as the settings screen would (saved to the database)."""
    session = app.main_screen.current
    for name, value in settings.items():
        setattr(session.settings, name, value)
    app.db.save_settings(session.id, session.settings)


async def quit_while_mounting(make_app, open_screen, screen_class) -> None:
    """A teardown race: quit 0, 1, 2... event-loop turns after open_screen(pilot, app) puts a screen_class on
    top, so some quit lands while it mounts; every app must exit cleanly (an error in it is raised here)."""
    for turns in range(8):
        app = make_app()
        async with app.run_test(size=(140, 40)) as pilot:
            await open_screen(pilot, app)
            while not isinstance(app.screen, screen_class):
                await asyncio.sleep(0)
            for _ in range(turns):
                await asyncio.sleep(0)
            await press(pilot, "ctrl+q")
        assert app.return_code in (0, None)


def last_stats_line(app) -> str:
    """The stats line under the newest message as shown ("" while its view is being rebuilt)."""
    views = app.query_one(ChatView).message_views()
    stats = views[-1].query(".message-stats") if views else []
    return str(stats.first().render()) if stats else ""
