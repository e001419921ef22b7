"""A reply that calls a tool shows the call (the function's name, its arguments as JSON), not the raw
<tool_call> tags, in the real app, while it streams too; text that only looks like a call stays as written."""
from __future__ import annotations

import json

from helpers import open_with_model, wait_until
from textual.widgets import Markdown

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.chat_state import ChatMessage
from llmchat.tui.app.tool_call_view import show_tool_calls
from llmchat.tui.app.widgets.chat_view import ChatView
from llmchat.tui.app.widgets.message_view import MessageView

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'


def test_calls_become_titled_json_blocks():
    shown = show_tool_calls("Let me check." + CALL)
    assert "<tool_call>" not in shown and "**Tool call** `get_weather`" in shown
    block = shown.split("```json\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(block) == {"city": "Paris", "days": 2}
    assert show_tool_calls("<tool_call>not json</tool_call>") == "<tool_call>not json</tool_call>"
    assert "being written" in show_tool_calls('<tool_call>\n{"name": "get_we')
    assert show_tool_calls("no call here") == "no call here"


async def test_the_app_shows_a_streamed_call_as_a_call(dirs, chat_model):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_with_model(pilot, app)
        session = app.main_screen.current
        reply = ChatMessage("assistant", "Let me check.<tool_call>\n{\"name\": \"get_wea", finish_reason=None)
        session.messages += [ChatMessage("user", "Weather in Paris?"), reply]
        await app.query_one(ChatView).show(session)
        view = app.query(MessageView).last()
        body = view.query_one(".message-body", Markdown)
        await wait_until(pilot, lambda: "being written" in body.source, what="a call being written")
        reply.content = "Let me check." + CALL          # the rest of the call streams in
        await wait_until(pilot, lambda: "`get_weather`" in body.source, what="the finished call shown")
        assert "<tool_call>" not in body.source and '"city": "Paris"' in body.source
