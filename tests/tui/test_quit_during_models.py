"""Quitting right after opening the models screen (F4) tears it down while its sort Select mounts: the app
exits cleanly, with no NoMatches (or any other error) reaching the user."""
from __future__ import annotations

import asyncio

from helpers import press

from llmchat.tui.app import LlmChatApp
from llmchat.tui.screens.models_screen import ModelsScreen


async def test_quit_right_after_opening_models(dirs):
    # a race: quit 0, 1, 2... event-loop turns after the screen is on top, so some quit lands mid-mount
    for turns in range(8):
        app = LlmChatApp(show_welcome=False)
        async with app.run_test(size=(140, 40)) as pilot:    # an error in the app is raised here
            await press(pilot, "f4")
            while not isinstance(app.screen, ModelsScreen):
                await asyncio.sleep(0)
            for _ in range(turns):
                await asyncio.sleep(0)
            await press(pilot, "ctrl+q")
        assert app.return_code in (0, None)
