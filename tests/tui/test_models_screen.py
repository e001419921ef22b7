"""Models screen against a stand-in Hub on 127.0.0.1: search, download with progress, cancel, delete; GGUF
repos: pick a quant, download that one file."""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from helpers import notices, wait_until
from textual.widgets import DataTable, Input, OptionList, ProgressBar, TabbedContent

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.screens.dialogs import Confirm
from llmchat.tui.app.screens.models_screen import ModelsScreen
from llmchat.tui.app.screens.quant_picker import QuantPicker

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


async def cancel_midway(pilot, app, screen, hub, gate) -> None:
    """Cancel while the hub holds the weights half sent, then let the body go on: the cancel lands midway
    whatever the machine's load (a timed slow body let a starved app cancel only after the weights arrived)."""
    bar = screen.query_one("#transfer-progress", ProgressBar)
    await wait_until(pilot, hub.held.is_set, what="the weights half sent")
    await wait_until(pilot, lambda: (bar.progress or 0) > 0 and bar.total, what="download progress")
    await pilot.press("ctrl+x")
    await wait_until(pilot, lambda: any("Cancelling" in n for n in notices(app)), what="cancelling notice")
    gate.set()


async def test_download_shows_progress_and_can_be_cancelled(hub):
    gate = hub.hold["model.safetensors"] = threading.Event()
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_search(pilot, app)
        results = screen.query_one("#search-results", DataTable)
        results.move_cursor(row=1)
        results.focus()
        await pilot.press("enter")
        await cancel_midway(pilot, app, screen, hub, gate)
        await wait_until(pilot, lambda: any("stopped" in n for n in notices(app)), what="cancel notice")
        assert not screen.query_one("#transfer").display
        library = screen.query_one("#library-table", DataTable)
        rows = lambda: [library.get_row_at(i) for i in range(library.row_count)]  # noqa: E731
        # the library refreshes in a worker after the notice: the partial download stays (the next pull
        # resumes) but is not offered as a usable model
        await wait_until(pilot, lambda: [(r[0], "incomplete" in r[6]) for r in rows()] == [("test/tiny-big", True)],
                         what="the library after the cancel")


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    from gguf_repo import tiny_gguf
    return tiny_gguf(tmp_path_factory.mktemp("gguf"))


@pytest.fixture
def gguf_hub(hub, gguf_file):
    from gguf_repo import gguf_repo
    hub.add(gguf_repo("test/SmolChat-GGUF", gguf_file, downloads=5))
    return hub


async def open_gguf_picker(pilot, app):
    await pilot.press("f4")
    screen = app.screen
    await pilot.press("ctrl+f")
    screen.query_one("#search-query", Input).value = "GGUF"
    await pilot.press("enter")
    results = screen.query_one("#search-results", DataTable)
    await wait_until(pilot, lambda: results.row_count == 1, what="the GGUF search hit")
    assert results.get_row_at(0)[0] == "test/SmolChat-GGUF" and results.get_row_at(0)[4] == "GGUF, 4 quants"
    results.focus()
    await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(app.screen, QuantPicker), what="the quant picker")
    return screen, app.screen.query_one(OptionList)


async def test_gguf_hit_asks_which_quant_then_downloads_only_that_file(gguf_hub):
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        screen, options = await open_gguf_picker(pilot, app)
        lines = {options.get_option_at_index(i).id: str(options.get_option_at_index(i).prompt)
                 for i in range(options.option_count)}
        assert set(lines) == {"Q4_K_M", "Q8_0", "IQ4_XS", "Q6_K"}
        assert "KB" in lines["Q8_0"] and "not supported yet" in lines["Q6_K"] and "does not run" in lines["IQ4_XS"]
        assert options.get_option("IQ4_XS").disabled and options.get_option("Q6_K").disabled
        assert options.get_option_at_index(options.highlighted).id == "Q4_K_M"   # the usual pick comes first
        options.highlighted = [options.get_option_at_index(i).id for i in range(options.option_count)].index("Q8_0")
        await pilot.press("enter")
        library = screen.query_one("#library-table", DataTable)
        await wait_until(pilot, lambda: any(n.startswith(("Downloaded", "Download of")) for n in notices(app)),
                         what="the download to finish")
        assert any(n.startswith("Downloaded Tiny-Chat-Q8_0") for n in notices(app)), notices(app)
        rows = lambda: {library.get_row_at(i)[0]: library.get_row_at(i) for i in range(library.row_count)}  # noqa: E731
        await wait_until(pilot, lambda: "Tiny-Chat-Q8_0" in rows(), what="the GGUF model in the library")
        assert rows()["Tiny-Chat-Q8_0"][1] == "LlamaForCausalLM" and rows()["Tiny-Chat-Q8_0"][6] == "ok"
        fetched = {p.rsplit("/", 1)[-1] for m, p, _r in gguf_hub.requests if m == "GET" and "/resolve/" in p}
        assert fetched == {"Tiny-Chat-Q8_0.gguf"}


async def test_quant_picker_escape_downloads_nothing_and_library_shows_quant(gguf_hub, tmp_path):
    from llmchat.engine.store import LocalModel
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        screen, _options = await open_gguf_picker(pilot, app)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen, what="back on the models screen")
        assert not [p for m, p, _r in gguf_hub.requests if "/resolve/" in p]
        # a GGUF kept quantized shows its quant where other models show their dtype
        model = LocalModel("smol-q4", tmp_path / "smol.gguf", None, None, "model", "LlamaForCausalLM", 135_000_000,
                           None, 8192, 105_000_000, True, source="gguf", quant="Q4_K_M")
        screen.show_library([model])
        assert screen.query_one("#library-table", DataTable).get_row_at(0)[3] == "Q4_K_M"


async def test_gguf_download_shows_progress_and_can_be_cancelled(gguf_hub):
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        screen, options = await open_gguf_picker(pilot, app)
        options.highlighted = [options.get_option_at_index(i).id for i in range(options.option_count)].index("Q8_0")
        gate = gguf_hub.hold["Tiny-Chat-Q8_0.gguf"] = threading.Event()
        await pilot.press("enter")
        await cancel_midway(pilot, app, screen, gguf_hub, gate)
        assert "Q8_0" in str(screen.query_one("#transfer-label").render())
        await wait_until(pilot, lambda: any("stopped" in n for n in notices(app)), what="cancel notice")
        assert not screen.query_one("#transfer").display
        library = screen.query_one("#library-table", DataTable)
        rows = lambda: [library.get_row_at(i) for i in range(library.row_count)]  # noqa: E731
        # the library refreshed after the cancel: the partial file is kept (the next pull resumes), nothing registered
        await wait_until(pilot, lambda: [(r[0], "incomplete" in r[6]) for r in rows()]
                         == [("test/SmolChat-GGUF", True)], what="the library after the cancel")


async def test_a_library_refresh_landing_after_the_screen_closed_is_harmless(dirs):
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        screen = app.screen
        assert isinstance(screen, ModelsScreen)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ModelsScreen), what="the screen closed")
        await pilot.pause()
        screen.show_library([])   # what a refresh worker still reading the disk does when it finishes
