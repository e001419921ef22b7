"""Models screen on the model store: Hub search and download, the local library, import, adapters.

Every store call runs in a worker thread (network and disk); results come back with call_from_thread.
"""
from __future__ import annotations

import threading

from textual import work
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import (Button, Checkbox, DataTable, Footer, Input, Label, ProgressBar, Select, TabbedContent,
                             TabPane)

from llmchat.engine.store import ModelStore
from llmchat.engine.store.download import human_bytes
from llmchat.engine.store.pull import pull_gguf

from ..widgets.app_header import AppHeader
from ..widgets.mount_safe_select import MountSafeSelect
from ..widgets.mount_safe_tabs import MountSafeTabbedContent
from .dialogs import Confirm
from .quant_picker import QuantPicker
from .remote_pane import RemotePane


def human_size(num_bytes: int | None) -> str:
    """The same units as `llmchat models list` and the Hub (1 MB = 1000 KB)."""
    return human_bytes(num_bytes or 0)


def human_count(n) -> str:
    if not n:
        return "-"
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else str(n)


FIRST_FIELD = {"search": "#search-query", "library": "#library-table", "import": "#import-path",
               "adapters": "#adapter-table"}


class ModelsScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="models.back"),
                Binding("ctrl+f", "focus_search", "Search", id="models.search"),
                Binding("delete", "delete_model", "Delete", id="models.delete"),
                Binding("ctrl+x", "cancel_download", "Cancel download", id="models.cancel")]

    def __init__(self, initial_tab: str = "library") -> None:
        super().__init__()
        self.initial_tab = initial_tab
        self.cancel_event: threading.Event | None = None
        self.library: list = []
        self.results: dict = {}      # repo id -> the search hit (GGUF hits carry their quants)

    def compose(self):
        yield AppHeader()
        with MountSafeTabbedContent(initial=self.initial_tab, id="models-tabs"):
            with TabPane("Search the Hub", id="search"):
                with Horizontal(classes="form-row"):
                    yield Input(placeholder="search models, e.g. SmolLM2 Instruct", id="search-query")
                    yield MountSafeSelect([("downloads", "downloads"), ("likes", "likes"), ("recent", "recent")],
                                          value="downloads", allow_blank=False, id="search-sort")
                yield DataTable(id="search-results", cursor_type="row")
                yield Label("Enter on a result downloads it (GGUF repos: pick a quant first).", classes="hint")
            with TabPane("Library", id="library"):
                yield DataTable(id="library-table", cursor_type="row")
                yield Label("Enter: use in this session · Delete: remove from disk", classes="hint")
            with TabPane("Import", id="import"):
                yield Label("Import a Hugging Face model folder, a .gguf file or a LoRA adapter folder "
                            "(works offline).")
                yield Input(placeholder="/path/to/model-folder or /path/to/model.gguf", id="import-path")
                yield Input(placeholder="name in the library (default: the folder or file name)", id="import-name")
                yield Checkbox("Copy into the library (otherwise it is used in place)", id="import-copy")
                yield Button("Import", variant="primary", id="import-button")
            with TabPane("Adapters", id="adapters"):
                yield DataTable(id="adapter-table", cursor_type="row")
                yield Label("Enter: attach to this session · ctrl+x: detach · add adapters on the Import tab",
                            classes="hint")
            if getattr(getattr(self.app, "engines", None), "remote", None) and self.app.engines.remote.endpoints:
                yield RemotePane()
        with Vertical(id="transfer"):
            yield Label("", id="transfer-label")
            yield ProgressBar(id="transfer-progress", show_eta=True)
        yield Footer()

    def on_mount(self) -> None:
        if not all(self.query(part) for part in ("#search-results", "#library-table", "#adapter-table", "#transfer")):
            return      # quit right after F4: the screen is taken down while it mounts
        self.query_one("#search-results", DataTable).add_columns("model", "downloads", "likes", "updated", "format")
        self.query_one("#library-table", DataTable).add_columns("name", "architecture", "params", "dtype",
                                                                "context", "size", "status")
        self.query_one("#adapter-table", DataTable).add_columns("name", "base", "size")
        self.query_one("#transfer").display = False
        self.refresh_library()
        self.call_after_refresh(self.focus_first_field)

    def focus_first_field(self) -> None:
        """Where the first key goes: the search box, the library table, the import path..."""
        try:
            self.query_one(FIRST_FIELD.get(self.initial_tab, "#library-table")).focus()
        except NoMatches:
            pass     # closed already

    def store(self):
        return ModelStore(data_dir=self.app.data_path)

    # library and adapters
    @work(thread=True, exclusive=True, group="library")
    def refresh_library(self) -> None:
        try:
            models = self.store().list()
        except Exception as exc:   # a broken library entry must not close the screen
            self.app.call_from_thread(self.notify, f"Library: {exc}", severity="error")
            return
        self.app.call_from_thread(self.show_library, models)

    def show_library(self, models: list) -> None:
        self.library = models
        try:
            table, adapters = self.query_one("#library-table", DataTable), self.query_one("#adapter-table", DataTable)
        except NoMatches:
            return   # the screen closed while a worker read the library: nothing left to show it in
        table.clear()
        adapters.clear()
        for m in models:
            if m.kind == "adapter":
                adapters.add_row(m.name, getattr(m, "architecture", "") or "", human_size(m.size_bytes), key=m.name)
            else:
                status = "ok" if m.supported else f"unsupported: {m.reason}"
                weights = getattr(m, "quant", None) or m.dtype or "?"   # a GGUF run as it is: its quant, e.g. Q4_K_M
                table.add_row(m.name, m.architecture or "?", human_count(m.num_params), weights,
                              str(m.context_length or "?"), human_size(m.size_bytes), status, key=m.name)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        table_id, key = event.data_table.id, event.row_key.value
        if table_id == "library-table":
            self.app.chat.use_model(key)
            self.notify(f"{key} is this session's model")
            self.app.pop_screen()
        elif table_id == "adapter-table":
            self.app.chat.attach_adapter(key)
        elif table_id == "search-results":
            hit = self.results.get(key)
            if hit is not None and getattr(hit, "quants", None):
                self.app.push_screen(QuantPicker(key, hit.quants),
                                     lambda quant: self.download(key, quant) if quant else None)
            else:
                self.download(key)

    def action_delete_model(self) -> None:
        table = self.query_one("#library-table", DataTable)
        if table.row_count == 0:
            return
        name = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        self.app.push_screen(Confirm(f"Delete {name} from disk?"), lambda yes: self.delete_model(name) if yes else None)

    @work(thread=True, group="library")
    def delete_model(self, name: str) -> None:
        try:
            freed = self.store().remove(name)
        except (ValueError, FileNotFoundError, OSError) as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        self.app.call_from_thread(self.notify, f"Deleted {name}, freed {human_size(freed)}")
        self.refresh_library()

    # search and download
    def action_focus_search(self) -> None:
        self.query_one(TabbedContent).active = "search"
        self.query_one("#search-query", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "search-query" and event.value.strip():
            self.search(event.value.strip(), str(self.query_one("#search-sort", Select).value))
        elif event.input.id in ("import-path", "import-name"):
            self.start_import()

    @work(thread=True, exclusive=True, group="search")
    def search(self, query: str, sort: str) -> None:
        try:
            results = self.store().search(query, sort=sort)
        except Exception as exc:   # offline or Hub errors arrive as many exception types
            self.app.call_from_thread(self.notify, f"Search failed ({exc}). Offline? Import a local model "
                                      "folder or .gguf on the Import tab.", severity="error", timeout=10)
            return
        self.app.call_from_thread(self.show_results, results)

    def show_results(self, results: list) -> None:
        table = self.query_one("#search-results", DataTable)
        table.clear()
        self.results = {}
        for r in results:
            repo = getattr(r, "repo_id", None) or getattr(r, "id", "?")
            self.results[repo] = r
            updated = str(getattr(r, "last_modified", "") or "")[:10]
            quants = getattr(r, "quants", None)
            fmt = f"GGUF, {len(quants)} quant{'s' if len(quants) != 1 else ''}" if quants else "safetensors"
            table.add_row(repo, str(getattr(r, "downloads", "") or ""), str(getattr(r, "likes", "") or ""),
                          updated, fmt, key=repo)
        if not results:
            self.notify("No models found")

    def show_progress(self, label: str, done: int | None, total: int | None) -> None:
        self.query_one("#transfer").display = True
        self.query_one("#transfer-label", Label).update(label)
        self.query_one("#transfer-progress", ProgressBar).update(total=total or None, progress=done or 0)

    def progress_callback(self, label: str):
        def report(progress) -> None:
            done = getattr(progress, "downloaded_bytes", None) or getattr(progress, "done_bytes", None)
            total = getattr(progress, "total_bytes", None)
            self.app.call_from_thread(self.show_progress, label, done, total)
        return report

    @work(thread=True, exclusive=True, group="transfer")
    def download(self, repo_id: str, quant: str | None = None) -> None:
        self.cancel_event = threading.Event()
        what = f"{repo_id} {quant}" if quant else repo_id
        self.app.call_from_thread(self.show_progress, f"Downloading {what}… (ctrl+x cancels)", 0, None)
        progress = self.progress_callback(f"Downloading {what}… (ctrl+x cancels)")
        try:
            if quant:   # one GGUF file, registered in the library by the store's import
                model = pull_gguf(self.store(), repo_id, quant, progress=progress, cancel=self.cancel_event)
            else:
                model = self.store().pull(repo_id, progress=progress, cancel=self.cancel_event)
            message, severity = f"Downloaded {model.name} ({human_size(model.size_bytes)})", "information"
            self.app.call_from_thread(self.adopt, model)
        except Exception as exc:   # cancelled, offline, unsupported: all shown, none fatal
            message, severity = f"Download of {what} stopped: {exc}", "warning"
        self.app.call_from_thread(self.finish_transfer, message, severity)

    def action_cancel_download(self) -> None:
        if self.cancel_event is not None and not self.cancel_event.is_set():
            self.cancel_event.set()
            self.notify("Cancelling the download…")
        elif self.query_one(TabbedContent).active == "adapters":
            self.app.chat.attach_adapter(None)

    def adopt(self, model) -> None:
        """A session without a model uses the one just imported or downloaded (the first model, typically)."""
        session = self.app.chat.current
        if model.kind == "model" and model.supported and session is not None and not session.settings.model:
            self.app.chat.use_model(model.name)
            self.notify(f"{model.name} is this session's model")

    def finish_transfer(self, message: str, severity: str) -> None:
        self.query_one("#transfer").display = False
        self.cancel_event = None
        self.notify(message, severity=severity, timeout=8)
        self.refresh_library()

    # import
    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "import-button":
            self.start_import()

    def start_import(self) -> None:
        path = self.query_one("#import-path", Input).value.strip()
        if not path:
            self.notify("Type the path of a model folder or .gguf file", severity="warning")
            return
        self.import_model(path, self.query_one("#import-copy", Checkbox).value,
                          self.query_one("#import-name", Input).value.strip() or None)

    @work(thread=True, exclusive=True, group="transfer")
    def import_model(self, path: str, copy: bool, name: str | None = None) -> None:
        self.app.call_from_thread(self.show_progress, f"Importing {path}…", 0, None)
        try:
            store = self.store()
            before = {m.name for m in store.list()}
            model = store.import_path(path, copy=copy, name=name,
                                      progress=self.progress_callback(f"Importing {path}…"))
            if model.name in before:   # a new source gets a new name: the same name is the same source
                message, severity = f"{model.name} is already in the library: nothing imported", "information"
            else:
                message, severity = (f"Imported {model.name} ({model.kind}, {human_size(model.size_bytes)})",
                                     "information")
            self.app.call_from_thread(self.adopt, model)
        except Exception as exc:   # bad path, unsupported format: a message, never a traceback
            message, severity = f"Import failed: {exc}", "error"
        self.app.call_from_thread(self.finish_transfer, message, severity)
