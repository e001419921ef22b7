"""Quitting right after opening the session settings (F3) tears the dialog down while it mounts: the app exits
cleanly, with no NoMatches (or any other error) reaching the user."""
from __future__ import annotations

import asyncio

from helpers import open_with_model, press

from llmchat.tui.app import LlmChatApp
from llmchat.tui.screens.session_settings import SessionSettingsScreen


async def test_quit_right_after_opening_settings(dirs, chat_model):
    # a race: quit 0, 1, 2... event-loop turns after the dialog is on top, so some quit lands mid-mount
    for turns in range(8):
        app = LlmChatApp(model=str(chat_model), show_welcome=False)
        async with app.run_test(size=(140, 40)) as pilot:    # an error in the app is raised here
            await open_with_model(pilot, app)
            await press(pilot, "f3")
            while not isinstance(app.screen, SessionSettingsScreen):
                await asyncio.sleep(0)
            for _ in range(turns):
                await asyncio.sleep(0)
            await press(pilot, "ctrl+q")
        assert app.return_code in (0, None)
