"""Quitting right after opening Compare (F6) tears the screen down while it mounts: no error reaches the user."""
from __future__ import annotations

from helpers import press

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.screens.compare_screen import CompareScreen


async def test_quit_right_after_opening_compare(dirs, chat_model):
    for _ in range(5):      # a race: try it a few times
        app = LlmChatApp(model=str(chat_model), show_welcome=False)
        async with app.run_test(size=(140, 40)) as pilot:
            await press(pilot, "f6", until=lambda: isinstance(app.screen, CompareScreen), what="compare")
            await press(pilot, "ctrl+q")
        assert app.return_code in (0, None)
