"""Every field of every screen is on screen (not clipped, not covered) in an 80x24 terminal."""
from __future__ import annotations

import pytest
from helpers import wait_until
from textual.widgets import TabbedContent

from llmchat.engine.store import ModelStore
from llmchat.tui.app import LlmChatApp

FIELDS = "Input, TextArea, Button, DataTable, SelectionList, Checkbox, Select"


def hidden_fields(screen, root=None) -> list[str]:
    """Fields under `root` whose middle is not the field itself when hit-tested on the screen."""
    missing = []
    for field in (root or screen).query(FIELDS):
        region = field.region
        name = field.id or type(field).__name__
        if not region.width or not region.height:
            missing.append(f"{name}: not laid out")
            continue
        x, y = region.x + region.width // 2, region.y + region.height // 2
        try:
            hit, _ = screen.get_widget_at(x, y)
        except Exception:  # noqa: BLE001 - outside the screen
            missing.append(f"{name}: off screen at {region}")
            continue
        if hit is not field and field not in hit.ancestors:
            missing.append(f"{name}: covered at {region} by {hit}")
    return missing


async def open_screen(pilot, app, key: str, name: str):
    await pilot.press(key)
    await wait_until(pilot, lambda: type(app.screen).__name__ == name, what=name)
    await pilot.pause()
    await pilot.pause(0.2)
    return app.screen


@pytest.mark.parametrize("key, name", [("f3", "SessionSettingsScreen"), ("f6", "CompareScreen"),
                                       ("f1", "HelpScreen")])
async def test_dialogs_fit(dirs, chat_model, key, name):
    ModelStore().import_path(chat_model)
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.main_screen.current is not None, what="session")
        screen = await open_screen(pilot, app, key, name)
        assert hidden_fields(screen) == []


async def test_models_screen_tabs_fit(dirs, chat_model):
    ModelStore().import_path(chat_model)
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_screen(pilot, app, "f4", "ModelsScreen")
        tabs = screen.query_one(TabbedContent)
        for pane in ("search", "library", "import", "adapters"):
            tabs.active = pane
            await pilot.pause()
            await pilot.pause(0.1)
            assert hidden_fields(screen, screen.query_one(f"#{pane}")) == [], pane


async def test_welcome_fits(dirs):
    app = LlmChatApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: type(app.screen).__name__ == "WelcomeScreen", what="welcome")
        await pilot.pause(0.2)
        assert hidden_fields(app.screen) == []
