"""A session whose model has no chat template (a base model): the app says so, offers the family's known
template or raw mode, keeps the typed message, and the choice is a saved session setting (F3)."""
from __future__ import annotations

import shutil

import pytest
from helpers import notices, open_with_model, press, reply_done, wait_until
from tiny_models import make_model, make_tokenizer

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.screens.chat_template_choice import ChatTemplateChoice
from llmchat.tui.app.widgets.prompt_input import PromptInput

SIZE = (140, 40)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """A tiny model saved without a chat template (ChatML tokens in its vocabulary, as Qwen bases)."""
    folder = tmp_path_factory.mktemp("base")
    shutil.copytree(make_model(tmp_path_factory.mktemp("chat"), "qwen2"), folder, dirs_exist_ok=True)
    tok = make_tokenizer()
    tok.chat_template = None
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    tok.save_pretrained(folder)
    return folder


async def refused_send(pilot, app) -> None:
    """Send "hello": the choice dialog comes up, the message is back in the input, the chat is as before."""
    app.query_one(PromptInput).load_text("hello")   # the send is taken back at once: helpers.send cannot see it
    await press(pilot, "enter", until=lambda: isinstance(app.screen, ChatTemplateChoice), what="template choice")
    await wait_until(pilot, lambda: any("no chat template" in n and "'chatml'" in n and "raw mode" in n
                                        for n in notices(app)), what="the notice naming both ways")
    await wait_until(pilot, lambda: app.query_one(PromptInput).text == "hello", what="message back in the input")
    assert app.main_screen.current.messages == []


@pytest.mark.parametrize("key, choice", [("r", "raw"), ("t", "chatml")])
async def test_no_chat_template_offers_known_template_or_raw(dirs, base_model, key, choice):
    app = LlmChatApp(model=str(base_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await refused_send(pilot, app)
        await press(pilot, key, until=lambda: not isinstance(app.screen, ChatTemplateChoice), what="chosen")
        session = app.main_screen.current
        assert session.settings.chat_template == choice
        assert app.db.load_sessions()[-1].settings.chat_template == choice     # saved with the session
        await press(pilot, "enter", until=lambda: reply_done(app), what="reply")
        user, reply = session.messages
        assert user.content == "hello" and reply.finish_reason in ("stop", "context") and reply.error is None
        assert reply.stats.num_prompt_tokens > 0


async def test_cancel_keeps_the_message_and_asks_again(dirs, base_model):
    app = LlmChatApp(model=str(base_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await refused_send(pilot, app)
        await press(pilot, "escape", until=lambda: not isinstance(app.screen, ChatTemplateChoice), what="closed")
        assert app.main_screen.current.settings.chat_template == ""
        await press(pilot, "enter", until=lambda: isinstance(app.screen, ChatTemplateChoice), what="asked again")
        await wait_until(pilot, lambda: app.query_one(PromptInput).text == "hello", what="message kept")


async def test_the_chat_template_is_a_session_setting_in_f3(dirs, base_model):
    from textual.widgets import Select

    from llmchat.tui.app.screens.session_settings import SessionSettingsScreen
    app = LlmChatApp(model=str(base_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await press(pilot, "f3", until=lambda: isinstance(app.screen, SessionSettingsScreen)
                    and app.screen.query("#chat_template")
                    and app.screen.query_one("#chat_template", Select).value != Select.NULL, what="settings")
        await pilot.pause()     # the Select's own widgets are mounted: setting its value now sticks
        select = app.screen.query_one("#chat_template", Select)
        assert select.value == "model"     # the model's own
        select.value = "gemma"
        await press(pilot, "ctrl+s", until=lambda: not isinstance(app.screen, SessionSettingsScreen), what="saved")
        assert app.main_screen.current.settings.chat_template == "gemma"
        assert app.db.load_sessions()[-1].settings.chat_template == "gemma"
        app.query_one(PromptInput).load_text("hello")
        await press(pilot, "enter", until=lambda: reply_done(app), what="reply with the gemma template")
        assert not isinstance(app.screen, ChatTemplateChoice)
