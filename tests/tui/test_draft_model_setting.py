"""F3's Draft model (speculative decoding with a smaller model of the same tokenizer): saved with the session and
there after a restart; a session with a draft has an engine of its own beside the model's, gives the same tokens
and reports its guesses; bad input is an error in the dialog that keeps what was typed; a draft the engine refuses
is said, and the session goes on without it."""
from __future__ import annotations

import json

from helpers import notices, open_with_model, press, reply_done, send, set_session, wait_until
from textual.widgets import Input, Select, Static, TextArea

from llmchat.engine.store import ModelStore
from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.chat_state import SessionSettings
from llmchat.tui.app.db import ChatDatabase
from llmchat.tui.app.engines import weights_size
from llmchat.tui.app.screens.session_settings import SessionSettingsScreen
from llmchat.tui.app.widgets.prompt_input import PromptInput

SIZE = (140, 40)
# no phrase repeats: the n-gram guesser finds little, the draft guesses
PROMPT = "Once upon a time there was a little engine that could batch many sessions at once."


async def open_settings(pilot, app) -> SessionSettingsScreen:
    await press(pilot, "f3", until=lambda: isinstance(app.screen, SessionSettingsScreen)
                and app.screen.query("#draft_model"), what="settings")
    await pilot.pause()     # the Selects' own widgets are mounted: a value set now sticks
    return app.screen


async def save(pilot, app) -> None:
    await press(pilot, "ctrl+s", until=lambda: not isinstance(app.screen, SessionSettingsScreen), what="saved")


def error_text(screen) -> str:
    return str(screen.query_one("#settings-error").render())


async def test_a_draft_set_in_f3_is_saved_shown_and_there_after_a_restart(dirs, long_model, draft_model):
    name = ModelStore().import_path(draft_model).name     # a library name, as `llmchat run --draft` takes it
    app = LlmChatApp(model=str(long_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        screen = await open_settings(pilot, app)
        assert screen.query_one("#draft_model", Input).value == ""
        screen.query_one("#draft_model", Input).value = name
        await save(pilot, app)
        assert app.main_screen.current.settings.draft_model == name
        assert app.db.load_sessions()[0].settings.draft_model == name
        # saving loads the model with its draft now, beside the model's own engine; the engine panel names it
        await wait_until(pilot, lambda: len(app.engines.loaded) == 2, what="the model loaded with its draft")

        def shown() -> str:   # the panel as the next poll draws it (the load's own line goes once its task ends)
            app.main_screen.poll_metrics()
            return str(app.main_screen.query_one("#engine-models", Static).render())
        want = f"{long_model.name}, {long_model.name} · draft {draft_model.name}"
        await wait_until(pilot, lambda: shown() == want, what="the panel naming the draft")

    again = LlmChatApp(show_welcome=False)
    async with again.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: again.main_screen.current is not None, what="sessions loaded")
        assert again.main_screen.current.settings.draft_model == name
        screen = await open_settings(pilot, again)
        assert screen.query_one("#draft_model", Input).value == name


def test_settings_saved_before_the_draft_field_existed_load_without_a_draft(tmp_path):
    db = ChatDatabase(tmp_path / "chats.sqlite3")
    old = {k: v for k, v in SessionSettings(model="m", speculative="ngram").to_dict().items() if k != "draft_model"}
    db.conn.execute("INSERT INTO sessions (title, created, updated, settings) VALUES ('old', 0, 0, ?)",
                    (json.dumps(old),))
    [session] = db.load_sessions()
    assert session.settings == SessionSettings(model="m", speculative="ngram", draft_model=None)
    session.settings.draft_model = "tiny-draft"
    db.save_settings(session.id, session.settings)
    assert db.load_sessions()[0].settings.draft_model == "tiny-draft"


async def test_a_reply_with_a_draft_has_the_same_tokens_and_reports_guesses(dirs, long_model, draft_model):
    app = LlmChatApp(model=str(long_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        plain_engine = next(iter(app.engines.loaded.values()))
        set_session(app, max_tokens=32)
        await send(pilot, PROMPT)
        await wait_until(pilot, lambda: reply_done(app), what="reply without a draft")
        without = app.main_screen.current.messages[-1]

        await press(pilot, "ctrl+n", until=lambda: not app.main_screen.current.messages, what="a new session")
        set_session(app, max_tokens=32, draft_model=str(draft_model))
        await send(pilot, PROMPT)
        await wait_until(pilot, lambda: reply_done(app), what="reply with a draft")
        drafted = app.main_screen.current.messages[-1]

        assert drafted.finish_reason == without.finish_reason == "length"
        assert drafted.content == without.content
        assert drafted.stats.guessed_tokens > 0
        with_draft = app.engines.loaded[(str(long_model.resolve()), str(draft_model.resolve()))]
        assert any(b.hash is not None for b in with_draft.engine.engine.draft.blocks.blocks)   # the draft ran
        # the session without a draft kept its engine; the draft's weights and KV cache count in the budget
        assert app.engines.loaded[(str(long_model.resolve()), None)] is plain_engine
        assert with_draft.draft_bytes > weights_size(draft_model)
        assert with_draft.total_bytes == with_draft.weight_bytes + with_draft.kv_bytes + with_draft.draft_bytes


async def test_bad_draft_input_is_an_error_that_keeps_what_was_typed(dirs, chat_model, draft_model):
    app = LlmChatApp(show_welcome=False)    # nothing loads: the dialog checks the draft itself
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.main_screen.current is not None, what="a session")
        before = SessionSettings(**app.main_screen.current.settings.to_dict())
        screen = await open_settings(pilot, app)
        typed = {"#model": str(chat_model), "#draft_model": "no-such-draft", "#max_tokens": "7"}
        for field, value in typed.items():
            screen.query_one(field, Input).value = value
        screen.query_one("#system_prompt", TextArea).load_text("Answer briefly.")

        await press(pilot, "ctrl+s", until=lambda: error_text(screen), what="error")
        assert "draft model: no model named 'no-such-draft'" in error_text(screen)

        screen.query_one("#draft_model", Input).value = typed["#draft_model"] = str(draft_model)
        screen.query_one("#speculative", Select).value = "off"
        await press(pilot, "ctrl+s", until=lambda: "guessing off" in error_text(screen), what="error")

        screen.query_one("#speculative", Select).value = "auto"
        screen.query_one("#model", Input).value = typed["#model"] = "remote:lab/tiny"
        await press(pilot, "ctrl+s", until=lambda: "remote model takes no draft" in error_text(screen), what="error")

        assert app.screen is screen      # still open, with everything as typed
        assert {field: screen.query_one(field, Input).value for field in typed} == typed
        assert screen.query_one("#system_prompt", TextArea).text == "Answer briefly."
        assert screen.query_one("#speculative", Select).value == "auto"
        await press(pilot, "escape", until=lambda: not isinstance(app.screen, SessionSettingsScreen), what="closed")
        assert app.main_screen.current.settings == before == app.db.load_sessions()[-1].settings


async def test_a_draft_the_engine_refuses_is_said_and_the_session_goes_on(dirs, chat_model, draft_model):
    refusal = "is larger than the model it drafts for"
    app = LlmChatApp(model=str(draft_model), show_welcome=False)   # the one-layer model, drafted by a larger one
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        set_session(app, max_tokens=4)
        screen = await open_settings(pilot, app)
        screen.query_one("#draft_model", Input).value = str(chat_model)
        await save(pilot, app)
        await wait_until(pilot, lambda: any(refusal in n for n in notices(app)), what="the refusal on saving")

        # asked again when a reply needs it: said, and the message is kept. Not send(): the failure can take the
        # message back before any poll sees it sent
        prompt = app.query_one(PromptInput)
        prompt.focus()
        prompt.load_text("hello")
        await press(pilot, "enter", until=lambda: sum(refusal in n for n in notices(app)) == 2
                    and prompt.text == "hello", what="the refusal again, the message back in the input")
        assert not app.main_screen.current.messages and not app.db.load_sessions()[-1].messages
        assert list(app.engines.loaded) == [(str(draft_model.resolve()), None)]   # nothing half-loaded kept

        set_session(app, draft_model=None)
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app), what="a reply without the draft")
        assert app.main_screen.current.messages[-1].finish_reason in ("stop", "length")
