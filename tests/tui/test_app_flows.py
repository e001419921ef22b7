"""App flows around the chat: persistence across restart, settings, malformed TOML, export, first run,
memory budget, command palette, help, chat keys over dialogs."""
from __future__ import annotations

import json

import tomli_w
from helpers import notices, open_with_model, press, reply_done, send, wait_until
from textual.widgets import DataTable, Input, TabbedContent, TextArea

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.screens.help_screen import HelpScreen
from llmchat.tui.app.screens.models_screen import ModelsScreen
from llmchat.tui.app.screens.session_settings import SessionSettingsScreen
from llmchat.tui.app.screens.welcome import WelcomeScreen
from llmchat.tui.app.widgets.sidebar import Sidebar

SIZE = (140, 40)


async def test_sessions_and_messages_survive_a_restart(dirs, chat_model):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app))
        reply = app.main_screen.current.messages[-1].content
        await pilot.press("f2")
        app.screen.query_one(Input).value = "kept"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.main_screen.current.title == "kept", what="renamed")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: len(app.main_screen.sessions) == 2)
    again = LlmChatApp(show_welcome=False)
    async with again.run_test(size=SIZE) as pilot:
        await pilot.pause()
        titles = sorted(s.title for s in again.main_screen.sessions.values())
        assert titles == ["New chat 2", "kept"]
        kept = next(s for s in again.main_screen.sessions.values() if s.title == "kept")
        assert [(m.role, m.content) for m in kept.messages] == [("user", "hello"), ("assistant", reply)]
        assert kept.messages[1].stats.num_generated_tokens > 0
        assert kept.settings.model == str(chat_model)
        assert len(again.query_one(Sidebar).list_view.children) == 2


async def test_session_settings_screen_validates_and_saves(dirs, chat_model):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await pilot.press("f3")
        screen = app.screen
        assert isinstance(screen, SessionSettingsScreen)
        # defaults come from the model's generation_config (do_sample=False -> temperature 0.0), the rest
        # from llmchat's chat defaults; the dialog says which is which
        assert screen.query_one("#temperature", Input).placeholder == \
            "0.0 (greedy: do_sample false in generation_config.json)"
        assert screen.query_one("#top_k", Input).placeholder == "40 (llmchat chat default)"
        assert screen.query_one("#seed", Input).placeholder == "random"
        screen.query_one("#top_p", Input).value = "2"
        await pilot.press("ctrl+s")
        assert "top_p must be in (0, 1]" in str(screen.query_one("#settings-error").render())
        assert app.screen is screen
        screen.query_one("#top_p", Input).value = "0.9"
        screen.query_one("#temperature", Input).value = "0.7"
        screen.query_one("#seed", Input).value = "42"
        screen.query_one("#max_tokens", Input).value = "5"
        screen.query_one("#system_prompt", TextArea).load_text("Answer briefly.")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: not isinstance(app.screen, SessionSettingsScreen), what="dialog closed")
        s = app.main_screen.current.settings
        assert (s.temperature, s.top_p, s.seed, s.max_tokens, s.system_prompt) == (0.7, 0.9, 42, 5, "Answer briefly.")
        assert app.db.load_sessions()[0].settings == s
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app))
        reply = app.main_screen.current.messages[-1]
        assert reply.stats.num_generated_tokens <= 5
        # the system prompt reached the engine: the prompt is longer than without it
        assert reply.stats.num_prompt_tokens > 20


async def test_malformed_settings_file_gives_a_notice_and_is_kept(dirs, chat_model):
    path = dirs["config"] / "settings.toml"
    path.write_text("kv_cache_gb = [broken")
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert any("not valid TOML" in n and "will not overwrite" in n for n in notices(app))
        app.main_screen.use_model(str(chat_model))          # would save default_model to settings.toml if allowed
        await wait_until(pilot, lambda: any("not saved" in n for n in notices(app)), what="refusal notice")
    assert path.read_text() == "kv_cache_gb = [broken"


async def test_export_writes_markdown_and_json(dirs, chat_model):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app))
        await pilot.press("f7")
        await wait_until(pilot, lambda: any(n.startswith("Exported to") for n in notices(app)))
        md, js = app.main_screen.last_export
        assert md.parent == dirs["data"] / "exports"
        assert "## User\n\nhello" in md.read_text()
        data = json.loads(js.read_text())
        assert [m["role"] for m in data["messages"]] == ["user", "assistant"]
        assert data["messages"][1]["content"] == app.main_screen.current.messages[1].content


async def test_first_run_guides_to_import_and_the_imported_model_is_used(dirs, chat_model):
    app = LlmChatApp()
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, WelcomeScreen), what="welcome screen")
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen), what="models screen")
        screen = app.screen
        assert screen.query_one(TabbedContent).active == "import"
        screen.query_one("#import-path", Input).value = str(chat_model)
        screen.query_one("#import-path", Input).focus()
        await pilot.press("enter")
        table = screen.query_one("#library-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == 1, what="imported model in the library")
        name = table.get_row_at(0)[0]
        screen.query_one(TabbedContent).active = "library"
        table.focus()
        await pilot.press("enter")                  # use it in this session
        await wait_until(pilot, lambda: len(app.engines.loaded) == 1, what="model loaded")
        assert app.main_screen.current.settings.model == name
        assert app.settings.default_model == name   # remembered in settings.toml for next time
        assert f'default_model = "{name}"' in (dirs["config"] / "settings.toml").read_text()
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app))
        assert app.main_screen.current.messages[-1].content


async def test_memory_budget_unloads_the_least_recently_used_model(dirs, chat_model, long_model):
    # budget for one tiny model plus its KV cache, not two
    (dirs["config"] / "settings.toml").write_text(tomli_w.dumps({"memory_budget_gb": 0.05, "kv_cache_gb": 0.03}))
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app))
        await pilot.press("ctrl+n")
        app.main_screen.current.settings.model = str(long_model)
        app.main_screen.current.settings.max_tokens = 3
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app), what="reply from the second model")
        assert [m.path.name for m in app.engines.loaded.values()] == [long_model.name]
        assert any("Unloaded" in n and "memory budget" in n for n in notices(app))


async def test_command_palette_runs_actions_and_help_lists_keys(dirs):
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+p")
        await pilot.press(*"New session")
        # the palette searches in a worker; Enter picks the highlighted hit once there is one
        await wait_until(pilot, lambda: any(o.option_count for o in app.screen.query("CommandList")), what="hits")
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.main_screen.sessions) == 2, what="new session from the palette")
        await press(pilot, "f1", until=lambda: isinstance(app.screen, HelpScreen), what="help")
        # the Markdown widget takes its text when mounted: wait for it
        await wait_until(pilot, lambda: app.screen.query("Markdown") and app.screen.query_one("Markdown").source,
                         what="help text")
        text = app.screen.query_one("Markdown").source
        assert "`ctrl+n`" in text and "`f4`" in text and str(dirs["data"]) in text


async def test_a_theme_picked_in_the_app_is_remembered(dirs):
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.theme = "nord"
        await wait_until(pilot, lambda: 'theme = "nord"' in (dirs["config"] / "settings.toml").read_text(),
                         what="theme saved")
    again = LlmChatApp(show_welcome=False)
    async with again.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert again.theme == "nord"


async def test_chat_keys_do_nothing_over_a_dialog_and_work_again_after_it(dirs):
    from llmchat.tui.app.screens.compare_screen import CompareScreen
    from llmchat.tui.app.screens.main_screen import MainScreen
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.main_screen.current is not None, what="chat open")
        await press(pilot, "f3", until=lambda: isinstance(app.screen, SessionSettingsScreen), what="settings")
        await pilot.press("f6", "f7", "ctrl+n", "f8")          # f6/f7 are priority keys on the chat screen
        await pilot.pause()
        assert isinstance(app.screen, SessionSettingsScreen) and len(app.main_screen.sessions) == 1
        assert app.main_screen.last_export is None
        # the chat's footer under the dialog lists none of the chat's keys, only what acts there (f1)

        def chat_keys() -> set[str]:
            own = {binding.key for binding in MainScreen.BINDINGS}
            return {key for key, active in app.main_screen.active_bindings.items()
                    if active.node is app.main_screen and key in own}
        assert chat_keys() == set() and "f1" in app.main_screen.active_bindings
        await press(pilot, "escape", until=lambda: app.screen is app.main_screen, what="dialog closed")
        assert {"f6", "f7", "ctrl+n", "f8"} <= chat_keys()
        await press(pilot, "f6", until=lambda: isinstance(app.screen, CompareScreen), what="compare")
        await pilot.pause()      # let the Compare screen finish mounting before the app closes
