"""A chat template with an enable_thinking switch (SmolLM3): F3 offers "Thinking", the switch reaches the prompt
the engine renders, and reasoning between <think> and </think> shows collapsed above the answer, streaming too.
The same for a GGUF file, whose template comes from its metadata (tokenizer.chat_template)."""
from __future__ import annotations

import pytest
from helpers import open_with_model, press, reply_done, wait_until
from textual.widgets import Collapsible, Input, Markdown, Select
from gguf_models import write_gguf
from tiny_models import make_model, make_tokenizer

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.main import prepare_model
from llmchat.tui.app.chat_state import ChatMessage
from llmchat.tui.app.reasoning import split_reasoning
from llmchat.tui.app.screens.session_settings import SessionSettingsScreen
from llmchat.tui.app.widgets.chat_view import ChatView
from llmchat.tui.app.widgets.message_view import MessageView
from llmchat.tui.app.widgets.prompt_input import PromptInput

SIZE = (140, 40)
# As SmolLM3's: thinking off puts an empty reasoning block in the prompt, so the model answers at once.
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n{% endif %}{% endif %}")


@pytest.fixture(scope="module")
def thinking_model(tmp_path_factory):
    folder = make_model(tmp_path_factory.mktemp("thinking"), "llama")
    tok = make_tokenizer()
    tok.chat_template = THINKING_TEMPLATE
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def thinking_gguf(thinking_model, tmp_path_factory):
    """A GGUF file whose metadata's chat template has the switch."""
    return write_gguf(thinking_model, tmp_path_factory.mktemp("thinking-gguf") / "thinking.gguf")


@pytest.fixture(scope="module")
def plain_gguf(chat_model, tmp_path_factory):
    """A GGUF file whose chat template has no switch."""
    return write_gguf(chat_model, tmp_path_factory.mktemp("plain-gguf") / "plain.gguf")


async def open_settings(pilot, app) -> None:
    await press(pilot, "f3", until=lambda: isinstance(app.screen, SessionSettingsScreen)
                and app.screen.query("#chat_template"), what="settings")
    await pilot.pause()     # the Selects' own widgets are mounted: values set now stick


@pytest.fixture
def prompts_seen(monkeypatch):
    """The prompt text of every request the engine tokenizes."""
    import llmchat.engine.llm_engine as llm_engine
    seen, real = [], llm_engine.prompt_to_token_ids

    def recording(tokenizer, prompt, vocab_size):
        ids = real(tokenizer, prompt, vocab_size)
        seen.append(tokenizer.decode(ids))
        return ids
    monkeypatch.setattr(llm_engine, "prompt_to_token_ids", recording)
    return seen


def test_split_reasoning():
    assert split_reasoning("<think>a b</think>\nThe answer") == ("a b", "The answer")
    assert split_reasoning("<think>still thinking") == ("still thinking", "")
    assert split_reasoning("<thi") == ("", "")
    assert split_reasoning("opened in the prompt</think>answer") == ("opened in the prompt", "answer")
    assert split_reasoning("plain") == (None, "plain")


async def test_thinking_off_reaches_the_prompt(dirs, thinking_model, prompts_seen):
    app = LlmChatApp(model=str(thinking_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await press(pilot, "f3", until=lambda: isinstance(app.screen, SessionSettingsScreen)
                    and app.screen.query("#thinking") and app.screen.query_one("#thinking", Select).value
                    != Select.NULL, what="settings with the Thinking switch")
        await pilot.pause()     # the Select's own widgets are mounted: setting its value now sticks
        assert app.screen.query_one("#thinking", Select).value == "default"
        app.screen.query_one("#thinking", Select).value = "off"
        app.screen.query_one("#max_tokens", Input).value = "8"   # the prompts are the point, not the replies
        await press(pilot, "ctrl+s", until=lambda: not isinstance(app.screen, SessionSettingsScreen), what="saved")
        assert app.main_screen.current.settings.thinking is False
        assert app.db.load_sessions()[-1].settings.thinking is False
        app.query_one(PromptInput).load_text("hello")
        await press(pilot, "enter", until=lambda: reply_done(app), what="reply")
        assert prompts_seen[-1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n")


async def test_no_thinking_switch_for_a_template_without_one(dirs, chat_model):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await press(pilot, "f3", until=lambda: isinstance(app.screen, SessionSettingsScreen)
                    and app.screen.query("#chat_template"), what="settings")
        await pilot.pause()     # the Selects finish mounting before the app closes
        assert not app.screen.query("#thinking")


async def test_reasoning_shows_collapsed_above_the_answer_while_it_streams(dirs, thinking_model):
    app = LlmChatApp(model=str(thinking_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        session = app.main_screen.current
        reply = ChatMessage("assistant", "<think>first step", finish_reason=None)
        session.messages += [ChatMessage("user", "hi"), reply]
        await app.query_one(ChatView).show(session)
        view = app.query(MessageView).last()
        box = view.query_one(Collapsible)
        await wait_until(pilot, lambda: view.shown_reasoning == "first step", what="reasoning shown")
        assert box.display and box.collapsed and box.title == "Reasoning"
        reply.content += " and a second</think>\nThe answer"      # streamed on: the next frames take it
        await wait_until(pilot, lambda: view.shown == "The answer", what="answer streamed")
        assert view.shown_reasoning == "first step and a second" and box.collapsed
        assert "think" not in view.query_one(".message-body", Markdown).source
        user_view = app.query(MessageView).first()
        assert not user_view.query(Collapsible)


@pytest.mark.parametrize("given", ["library name", "gguf path"])
async def test_gguf_template_with_the_switch_offers_thinking(dirs, thinking_gguf, prompts_seen, given):
    # `llmchat --model x.gguf` registers the file in place and names it; a session may also hold the path
    model = prepare_model(str(thinking_gguf)) if given == "library name" else str(thinking_gguf)
    app = LlmChatApp(model=model, show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await open_settings(pilot, app)
        assert app.screen.query_one("#thinking", Select).value == "default"
        app.screen.query_one("#thinking", Select).value = "off"
        app.screen.query_one("#max_tokens", Input).value = "8"   # the prompts are the point, not the replies
        await press(pilot, "ctrl+s", until=lambda: not isinstance(app.screen, SessionSettingsScreen), what="saved")
        assert app.main_screen.current.settings.thinking is False
        app.query_one(PromptInput).load_text("hello")
        await press(pilot, "enter", until=lambda: reply_done(app), what="reply")
        assert prompts_seen[-1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n")
        await open_settings(pilot, app)            # "on": the template's other branch, no empty reasoning
        app.screen.query_one("#thinking", Select).value = "on"
        await press(pilot, "ctrl+s", until=lambda: not isinstance(app.screen, SessionSettingsScreen), what="saved")
        app.query_one(PromptInput).load_text("again")
        await press(pilot, "enter", until=lambda: reply_done(app) and len(prompts_seen) >= 2, what="reply")
        assert prompts_seen[-1].endswith("again<|im_end|>\n<|im_start|>assistant\n")


async def test_gguf_template_without_the_switch_offers_none(dirs, plain_gguf):
    app = LlmChatApp(model=str(plain_gguf), show_welcome=False)   # a .gguf path as the session's model
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await open_settings(pilot, app)
        assert not app.screen.query("#thinking")
