"""Quitting right after opening the session settings (F3) tears the dialog down while it mounts: the app exits
cleanly, with no NoMatches (or any other error) reaching the user."""
from __future__ import annotations

from helpers import open_with_model, press, quit_while_mounting

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.screens.session_settings import SessionSettingsScreen


async def open_settings(pilot, app) -> None:
    await open_with_model(pilot, app)
    await press(pilot, "f3")


async def test_quit_right_after_opening_settings(dirs, chat_model):
    await quit_while_mounting(lambda: LlmChatApp(model=str(chat_model), show_welcome=False), open_settings,
                              SessionSettingsScreen)
