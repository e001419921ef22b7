"""The llmchat Textual app: what every screen shares (database, engines, settings, theme) and the app-wide
keys. The chat's keys are the main screen's (screens/main_screen.py); its sessions, replies and the operations on
them are the chat controller's that the screen talks to (chat_controller.py)."""
from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.binding import Binding

from llmchat.engine.remote import merge_endpoints

from ..paths import config_dir, data_dir
from ..settings import SettingsStore
from .chat_controller import ChatController
from .commands import ActionsProvider
from .db import ChatDatabase
from .engines import EngineManager
from .screens.compare_report import CompareReportScreen, load_report
from .screens.dialogs import TextPrompt
from .screens.help_screen import HelpScreen
from .screens.main_screen import MainScreen


class LlmChatApp(App):
    TITLE = "llmchat"
    CSS_PATH = "app.tcss"
    COMMANDS = App.COMMANDS | {ActionsProvider}
    BINDINGS = [Binding("f1", "help", "Help", id="app.help")]   # on every screen; the chat's keys: MainScreen

    def __init__(self, model: str | None = None, data_path: Path | None = None, config_path: Path | None = None,
                 show_welcome: bool = True, endpoints: list | None = None) -> None:
        """endpoints: remote endpoints from the command line (they win over settings.toml ones of the same name)."""
        super().__init__()
        self.data_path = data_path or data_dir()
        self.settings_store = SettingsStore((config_path or config_dir()) / "settings.toml")
        self.settings = self.settings_store.load()
        self.db = ChatDatabase(self.data_path / "chats.sqlite3")
        engine_kwargs = dict(self.settings.engine_kwargs)
        if self.settings.quantize:
            engine_kwargs.setdefault("quantize", self.settings.quantize)
        self.engines = EngineManager(self.settings.memory_budget_gb, self.settings.kv_cache_gb,
                                     engine_kwargs, data_dir=self.data_path,
                                     notify=lambda text: self.notify(text, title="Memory budget", timeout=8),
                                     endpoints=merge_endpoints(self.settings.remote_endpoints(), endpoints or []))
        self.startup_model = model
        self.show_welcome = show_welcome

    def get_default_screen(self) -> MainScreen:
        return MainScreen(self.db, self.engines, self.settings, self.settings_store, self.data_path,
                          startup_model=self.startup_model, show_welcome=self.show_welcome)

    @property
    def main_screen(self) -> MainScreen:
        """The chat screen, whichever screen is on top (dialogs and Models call back into it)."""
        return self.screen_stack[0]

    @property
    def chat(self) -> ChatController:
        """The chat's sessions and what can be done to them: other screens (Models) talk to it, not to the chat
        screen."""
        return self.main_screen.chat

    def on_mount(self) -> None:
        if self.settings_store.problem:
            self.notify(self.settings_store.problem, title="Settings", severity="error", timeout=20)
        self.theme = self.settings.theme if self.settings.theme in self.available_themes else "textual-dark"
        self.theme_changed_signal.subscribe(self, self.remember_theme)

    def remember_theme(self, theme) -> None:
        """A theme picked in the palette is kept in settings.toml (unless that file is malformed)."""
        if theme.name != self.settings.theme and self.settings_store.problem is None:
            self.settings.theme = theme.name
            try:
                self.settings_store.save(self.settings)
            except OSError as exc:
                self.notify(f"Settings not saved: {exc}", severity="warning")

    async def on_unmount(self) -> None:
        await self.engines.shutdown()
        self.db.close()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.screen))

    def action_open_compare_report(self) -> None:

        def opened(path: str | None) -> None:
            if path:
                try:
                    self.push_screen(CompareReportScreen(load_report(path)))
                except (OSError, ValueError) as exc:
                    self.notify(f"Cannot open {path}: {exc}", severity="error")
        self.push_screen(TextPrompt("Open compare report (JSON file)", placeholder="path/to/report.json"), opened)
