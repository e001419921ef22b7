"""Models screen against a stand-in Hub on 127.0.0.1: search, download with progress, cancel, delete."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import notices, wait_until
from textual.widgets import DataTable, Input, ProgressBar, TabbedContent

from llmchat.tui.app import LlmChatApp
from llmchat.tui.screens.dialogs import Confirm
from llmchat.tui.screens.models_screen import ModelsScreen

sys.path.insert(0, str(Path(__file__).parent.parent / "store"))
from fake_hub import FakeHubServer, FakeRepo  # noqa: E402
from tiny_models import make_model  # noqa: E402

SIZE = (140, 40)


@pytest.fixture
def hub(dirs, chat_model, tmp_path, monkeypatch):
    big = make_model(tmp_path / "big", "llama", hidden_size=256, intermediate_size=1024)   # ~9 MB
    with FakeHubServer() as fake:
        fake.add(FakeRepo.from_folder("test/tiny-chat", chat_model, downloads=50))
        fake.add(FakeRepo.from_folder("test/tiny-big", big, downloads=10))
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        yield fake


async def open_search(pilot, app) -> ModelsScreen:
    await pilot.press("f4")
    screen = app.screen
    assert isinstance(screen, ModelsScreen)
    await pilot.press("ctrl+f")
    assert screen.query_one(TabbedContent).active == "search"
    screen.query_one("#search-query", Input).value = "tiny"
    await pilot.press("enter")
    results = screen.query_one("#search-results", DataTable)
    await wait_until(pilot, lambda: results.row_count == 2, what="search results")
    return screen


async def test_search_download_then_delete(hub):
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_search(pilot, app)
        results = screen.query_one("#search-results", DataTable)
        assert results.get_row_at(0)[0] == "test/tiny-chat"      # sorted by downloads
        results.focus()
        await pilot.press("enter")
        library = screen.query_one("#library-table", DataTable)
        await wait_until(pilot, lambda: library.row_count == 1, what="downloaded model in the library")
        assert any(n.startswith("Downloaded") for n in notices(app))
        assert "KB" in library.get_row_at(0)[5] or "MB" in library.get_row_at(0)[5]     # size column
        screen.query_one(TabbedContent).active = "library"
        library.focus()
        await pilot.press("delete")
        assert isinstance(app.screen, Confirm)
        await pilot.press("y")
        await wait_until(pilot, lambda: library.row_count == 0, what="model deleted")
        assert any(n.startswith("Deleted") for n in notices(app))


async def test_download_shows_progress_and_can_be_cancelled(hub):
    hub.slow = 0.05      # seconds per 64 KiB: the ~9 MB model takes several seconds
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_search(pilot, app)
        results = screen.query_one("#search-results", DataTable)
        results.move_cursor(row=1)
        results.focus()
        await pilot.press("enter")
        bar = screen.query_one("#transfer-progress", ProgressBar)
        await wait_until(pilot, lambda: (bar.progress or 0) > 0 and bar.total, what="download progress")
        await pilot.press("ctrl+x")
        await wait_until(pilot, lambda: any("stopped" in n for n in notices(app)), what="cancel notice")
        assert not screen.query_one("#transfer").display
        library = screen.query_one("#library-table", DataTable)
        rows = [library.get_row_at(i) for i in range(library.row_count)]
        # the partial download stays (the next pull resumes) but is not offered as a usable model
        assert [(row[0], "incomplete" in row[6]) for row in rows] == [("test/tiny-big", True)]
