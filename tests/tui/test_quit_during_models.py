"""Quitting right after opening the models screen (F4) tears it down while its sort Select mounts: the app
exits cleanly, with no NoMatches (or any other error) reaching the user."""
from __future__ import annotations

from helpers import press, quit_while_mounting

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.screens.models_screen import ModelsScreen


async def test_quit_right_after_opening_models(dirs):
    await quit_while_mounting(lambda: LlmChatApp(show_welcome=False), lambda pilot, _app: press(pilot, "f4"),
                              ModelsScreen)
