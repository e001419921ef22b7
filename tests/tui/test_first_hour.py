"""What a new user trips over in the first hour (issue "The first hour"), against the real engine."""
from __future__ import annotations

from helpers import notices, open_with_model, press, reply_done, send, set_session, wait_until
from textual.widgets import Input

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.screens.session_settings import SessionSettingsScreen
from llmchat.tui.app.widgets.prompt_input import PromptInput

SIZE = (140, 40)


async def test_settings_refuse_an_adapter_that_does_not_exist(dirs, chat_model):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.main_screen.current is not None, what="the session")
        await press(pilot, "f3", until=lambda: isinstance(app.screen, SessionSettingsScreen), what="settings")
        screen = app.screen
        await wait_until(pilot, lambda: screen.query("#adapter"), what="the form")
        screen.query_one("#adapter", Input).value = "no-such-adapter"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: "no adapter 'no-such-adapter'" in str(screen.query_one("#settings-error")
                                                                                 .render()), what="error")
        assert app.screen is screen and app.main_screen.current.settings.adapter is None


async def test_a_send_that_fails_leaves_the_chat_as_it_was(dirs, chat_model):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        set_session(app, adapter="gone-adapter")          # e.g. deleted since it was chosen
        session = app.main_screen.current
        prompt = app.query_one(PromptInput)
        prompt.focus()
        prompt.load_text("hello")
        # Not send(): the failure can put the text back before any poll sees the input empty.
        await press(pilot, "enter", until=lambda: session.id not in app.main_screen.replies and
                    any("Generation failed" == n.title for n in app._notifications), what="failure")
        assert session.messages == [] and app.db.load_messages(session.id) == []
        assert prompt.text == "hello"                       # back in the input, nothing typed is lost
        set_session(app, adapter=None)
        await press(pilot, "enter", until=lambda: reply_done(app), what="reply")
        assert [m.role for m in session.messages] == ["user", "assistant"]    # one user turn, not two
        assert [m.role for m in app.db.load_messages(session.id)] == ["user", "assistant"]
        assert not any("Traceback" in n for n in notices(app))


async def test_welcome_import_focuses_the_path_and_the_first_model_is_used(dirs, chat_model):
    from llmchat.tui.app.screens.models_screen import ModelsScreen
    app = LlmChatApp()
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: type(app.screen).__name__ == "WelcomeScreen", what="welcome")
        await press(pilot, "i", until=lambda: isinstance(app.screen, ModelsScreen) and app.focused is not None
                    and app.focused.id == "import-path", what="import tab with the path field focused")
        await pilot.press(*str(chat_model), "enter")        # the first keys land in the path field
        await wait_until(pilot, lambda: app.main_screen.current.settings.model == chat_model.name, what="model adopted")
        assert any(f"{chat_model.name} is this session's model" in n for n in notices(app))
        await press(pilot, "escape", until=lambda: not isinstance(app.screen, ModelsScreen), what="back")
        await send(pilot, "hello")                          # no "Choose a model first"
        await wait_until(pilot, lambda: reply_done(app), what="reply")


async def test_f4_and_f3_focus_their_first_field(dirs, chat_model):
    from llmchat.engine.store import ModelStore
    from llmchat.tui.app.screens.models_screen import ModelsScreen
    name = ModelStore().import_path(chat_model).name
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.main_screen.current is not None, what="session")
        await press(pilot, "f4", until=lambda: isinstance(app.screen, ModelsScreen) and
                    app.screen.query("#library-table"), what="models")
        table = app.screen.query_one("#library-table")
        await wait_until(pilot, lambda: app.focused is table and table.row_count == 1, what="library focused")
        await press(pilot, "enter", until=lambda: app.main_screen.current.settings.model == name, what="Enter uses the model")
        await press(pilot, "f3", until=lambda: isinstance(app.screen, SessionSettingsScreen), what="settings")
        await wait_until(pilot, lambda: app.focused is not None and app.focused.id == "model", what="model field")


async def test_a_streaming_reply_shows_its_own_rate(dirs, long_model):
    app = LlmChatApp(model=str(long_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        set_session(app, max_tokens=450)
        await send(pilot, "go")
        reply = app.main_screen.current.messages[-1]
        # measured while it streams, from its own tokens (450 tokens take well over the 20 ms poll)
        await wait_until(pilot, lambda: reply.finish_reason is None and reply.stats is not None and
                         reply.stats.num_generated_tokens >= 5 and bool(reply.stats.tokens_per_s), what="live rate")
        await wait_until(pilot, lambda: reply_done(app), what="done")
        assert reply.stats.tokens_per_s > 0


async def test_import_takes_a_name_and_a_second_import_says_it_is_there(dirs, chat_model):
    from llmchat.engine.store import ModelStore
    from llmchat.tui.app.screens.models_screen import ModelsScreen
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.main_screen.current is not None, what="session")
        app.main_screen.action_models("import")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen) and app.focused is not None
                         and app.focused.id == "import-path", what="import tab")
        screen = app.screen
        screen.query_one("#import-path", Input).value = str(chat_model)
        screen.query_one("#import-name", Input).value = "my-tiny"
        screen.start_import()
        await wait_until(pilot, lambda: any("Imported my-tiny" in n for n in notices(app)), what="imported")
        screen.start_import()
        await wait_until(pilot, lambda: any("my-tiny is already in the library" in n for n in notices(app)),
                         what="second import")
        assert [m.name for m in ModelStore().list()] == ["my-tiny"]


def test_cli_second_import_says_it_is_there(dirs, chat_model, capsys):
    from llmchat.tui.cli import main
    assert main(["models", "import", str(chat_model)]) == 0
    assert capsys.readouterr().out.startswith(f"imported {chat_model.name} ")
    assert main(["models", "import", str(chat_model)]) == 0
    assert f"{chat_model.name} is already in the library" in capsys.readouterr().out
