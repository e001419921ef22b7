"""F3's Guessing switch (speculative decoding per session): saved with the session, and a reply follows it (the
engine's own switch is "auto" here); the reply's tokens are the same either way."""
from __future__ import annotations

from helpers import open_with_model, press, reply_done
from textual.widgets import Input, Select

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.screens.session_settings import SessionSettingsScreen
from llmchat.tui.app.widgets.prompt_input import PromptInput

SIZE = (140, 40)
REPEATING = "one two three four one two three four one two three four one two three four"


def choice_before(app) -> str:
    return app.main_screen.current.settings.speculative or "default"


async def reply_with_guessing(app, pilot, choice: str):
    await press(pilot, "f3", until=lambda: isinstance(app.screen, SessionSettingsScreen)
                and app.screen.query("#speculative"), what="settings")
    await pilot.pause()     # the Select's own widgets are mounted: a value set now sticks
    assert app.screen.query_one("#speculative", Select).value == choice_before(app)   # what the session has
    app.screen.query_one("#speculative", Select).value = choice
    app.screen.query_one("#max_tokens", Input).value = "48"
    await press(pilot, "ctrl+s", until=lambda: not isinstance(app.screen, SessionSettingsScreen), what="saved")
    app.query_one(PromptInput).load_text(REPEATING)
    await press(pilot, "enter", until=lambda: reply_done(app), what="reply")
    return app.main_screen.current.messages[-1]


async def test_guessing_off_and_always_per_session(dirs, long_model):
    app = LlmChatApp(model=str(long_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        always = await reply_with_guessing(app, pilot, "ngram")
        assert app.main_screen.current.settings.speculative == "ngram"
        await press(pilot, "ctrl+n", until=lambda: not app.main_screen.current.messages, what="a new session")
        off = await reply_with_guessing(app, pilot, "off")
        assert app.main_screen.current.settings.speculative == "off"
        assert [s.settings.speculative for s in app.db.load_sessions()][-2:] == ["ngram", "off"]
    assert always.stats.guessed_tokens > 0 and off.stats.guessed_tokens == 0
    assert always.content == off.content
