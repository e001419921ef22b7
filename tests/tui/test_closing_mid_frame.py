"""The app closes while a frame is rebuilding the chat: the shutdown stops the frame timer with a cancel, which
must not reach the message views being removed (their cancelled tasks came out of the shutdown as a
CancelledError, at random, when a test or a user closed the app a frame after a reply)."""
from __future__ import annotations

import asyncio

from helpers import open_with_model, wait_until

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.chat_state import ChatMessage
from llmchat.tui.app.widgets.chat_view import ChatView
from llmchat.tui.app.widgets.message_view import MessageView

SIZE = (120, 36)


async def test_closing_while_a_frame_rebuilds_the_chat(dirs, chat_model):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        screen, chat = app.main_screen, app.query_one(ChatView)
        session = screen.current
        session.messages.append(ChatMessage("user", "the first question"))
        await wait_until(pilot, lambda: len(chat.message_views()) == 1, what="the message shown")
        old = chat.message_views()[0]
        session.messages[:] = [ChatMessage("user", "another question")]     # replaced: the next frame rebuilds
        frame = asyncio.create_task(screen.frame_tick())                     # as the frame timer runs it
        while old.is_running or not old.children:    # until the old view, stopped, waits for its children to go
            await asyncio.sleep(0)
        frame.cancel()                                                       # what stopping the timer does
        await asyncio.gather(frame, return_exceptions=True)
        await wait_until(pilot, lambda: [v.message.content for v in chat.message_views()] == ["another question"],
                         what="the rebuild finished anyway")
        assert old.parent is None and not old.is_running
    # leaving the block shut the app down: a cancelled view task would have raised here
    assert isinstance(old, MessageView)
