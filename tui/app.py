"""The llmchat Textual app: layout, sessions, timers. Chat actions and screen actions live in mixins."""
from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header

from .chat_actions import ChatActions
from .chat_state import ChatMessage, ChatSession, SessionSettings
from .commands import ActionsProvider
from .db import ChatDatabase
from .engines import EngineManager
from llmchat.engine.remote.endpoints import merge_endpoints
from .paths import config_dir, data_dir
from .screen_actions import ScreenActions
from .settings import SettingsStore
from .widgets.chat_view import ChatView
from .widgets.engine_panel import EnginePanel
from .widgets.prompt_input import PromptInput
from .widgets.sidebar import Sidebar

FRAME_INTERVAL = 1 / 30      # streamed text reaches the widgets at most this often (batched per frame)
METRICS_INTERVAL = 0.5       # engine.metrics() polling
SAVE_INTERVAL = 1.0          # streaming replies are written to SQLite this often
HEALTH_INTERVAL = 5.0        # remote endpoints in use are asked whether they are up
MAIN_SCREEN_ACTIONS = {"new_session", "rename_session", "delete_session", "stop", "regenerate", "continue_reply",
                       "session_settings", "models", "compare", "export_session", "next_session", "previous_session"}


class LlmChatApp(ChatActions, ScreenActions, App):
    TITLE = "llmchat"
    CSS_PATH = "app.tcss"
    COMMANDS = App.COMMANDS | {ActionsProvider}
    BINDINGS = [
        Binding("ctrl+n", "new_session", "New", id="session.new"),
        Binding("f2", "rename_session", "Rename", id="session.rename"),
        Binding("f8", "delete_session", "Delete", id="session.delete"),
        Binding("escape", "stop", "Stop", id="chat.stop"),
        Binding("ctrl+r", "regenerate", "Regenerate", id="chat.regenerate"),
        Binding("ctrl+o", "continue_reply", "Continue", id="chat.continue"),
        Binding("f3", "session_settings", "Settings", id="session.settings"),
        Binding("f4", "models", "Models", id="app.models"),
        # f6/f7 are TextArea keys too: priority makes them work while typing.
        Binding("f6", "compare", "Compare", id="app.compare", priority=True),
        Binding("f7", "export_session", "Export", id="session.export", priority=True),
        Binding("ctrl+down", "next_session", "Next session", id="session.next", show=False),
        Binding("ctrl+up", "previous_session", "Previous session", id="session.previous", show=False),
        Binding("f1", "help", "Help", id="app.help"),
    ]

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
        self.remote_names: list[str] = []               # "remote:NAME/ID" of every endpoint, asked at start
        self.sessions: dict[int, ChatSession] = {}
        self.current_id: int | None = None
        self.replies: dict[int, ChatMessage] = {}      # session id -> reply being generated
        self.reply_workers: dict[int, object] = {}
        self.requests: dict[int, tuple] = {}            # session id -> (engine, request id) in flight
        self.editing: ChatMessage | None = None
        self.startup_model = model
        self.show_welcome = show_welcome

    def compose(self):
        yield Header()
        with Horizontal(id="main"):
            yield Sidebar(id="sidebar")
            with Vertical(id="chat-area"):
                yield ChatView(id="chat")
                yield PromptInput(id="prompt")
            yield EnginePanel(id="engine-panel")
        yield Footer()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Chat actions only on the chat screen (priority keys must not fire over dialogs)."""
        if action in MAIN_SCREEN_ACTIONS and len(self.screen_stack) > 1:
            return False
        return True

    @property
    def main(self):
        """The chat screen, whichever screen is on top (dialogs and Models call back into it)."""
        return self.screen_stack[0]

    @property
    def current(self) -> ChatSession | None:
        return self.sessions.get(self.current_id) if self.current_id is not None else None

    async def on_mount(self) -> None:
        if self.settings_store.problem:
            self.notify(self.settings_store.problem, title="Settings", severity="error", timeout=20)
        self.theme = self.settings.theme if self.settings.theme in self.available_themes else "textual-dark"
        self.theme_changed_signal.subscribe(self, self.remember_theme)
        sidebar = self.main.query_one(Sidebar)
        for session in self.db.load_sessions():
            self.sessions[session.id] = session
            await sidebar.add(session)
        if self.startup_model:
            await self.open_with_model(self.startup_model)
        elif not self.sessions:
            await self.create_session(self.settings.default_model)
        else:
            await self.switch_to(max(self.sessions))
        self.set_interval(FRAME_INTERVAL, self.frame_tick)
        self.set_interval(SAVE_INTERVAL, self.save_streaming_replies)
        self.metrics_timer = self.set_interval(METRICS_INTERVAL, self.poll_metrics)
        if self.engines.remote.endpoints:
            self.run_worker(self.ask_remote_models(), group="remote", exit_on_error=False)
            self.set_interval(HEALTH_INTERVAL, self.check_remote_health)
        self.main.query_one(PromptInput).focus()
        if self.show_welcome and not self.has_any_model():
            self.call_after_refresh(self.action_welcome)

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

    def has_any_model(self) -> bool:
        return bool(self.startup_model or self.settings.default_model or self.library_names("model")
                    or any(s.settings.model for s in self.sessions.values()))

    async def open_with_model(self, model: str) -> None:
        """`llmchat --model PATH`: a fresh session on that model (reusing an empty last one), loaded now."""
        latest = self.sessions.get(max(self.sessions)) if self.sessions else None
        if latest is not None and not latest.messages:
            latest.settings.model = model
            self.db.save_settings(latest.id, latest.settings)
            await self.switch_to(latest.id)
        else:
            await self.create_session(model)
        self.load_model(model)

    def new_session_settings(self, model: str) -> SessionSettings:
        return SessionSettings(model=model, system_prompt=self.settings.system_prompt)

    async def create_session(self, model: str = "", title: str | None = None) -> ChatSession:
        session = self.db.create_session(title or f"New chat {len(self.sessions) + 1}", self.new_session_settings(model))
        self.sessions[session.id] = session
        await self.main.query_one(Sidebar).add(session)
        await self.switch_to(session.id)
        return session

    async def switch_to(self, session_id: int) -> None:
        if not self.screen_stack or session_id not in self.sessions:
            return      # shutting down, or a late event for a deleted session
        if session_id == self.current_id and self.main.query_one(ChatView).session is self.sessions[session_id]:
            return
        self.current_id = session_id
        self.editing = None
        self.main.query_one(Sidebar).select(session_id)
        await self.main.query_one(ChatView).show(self.sessions[session_id])
        self.sub_title = self.sessions[session_id].title

    async def on_sidebar_selected(self, event: Sidebar.Selected) -> None:
        await self.switch_to(event.session_id)

    def refresh_session_item(self, session_id: int) -> None:
        item = self.main.query_one(Sidebar).item(session_id)
        if item is not None:
            item.refresh_labels(session_id in self.replies)

    async def frame_tick(self) -> None:
        if self.screen_stack:
            for view in self.main.query(ChatView):     # absent while the app shuts down
                await view.sync()

    def poll_metrics(self) -> None:
        loading = [(Path(k).name, self.engines.load_fraction.get(k)) for k in self.engines.loading]
        if self.screen_stack:
            for panel in self.main.query(EnginePanel):
                panel.show(self.engines.metrics(), loading)

    async def ask_remote_models(self) -> None:
        self.remote_names, problems = await self.engines.remote.model_names()
        for problem in problems:
            self.notify(problem, title="Remote endpoint", severity="warning", timeout=10)

    def check_remote_health(self) -> None:
        if self.engines.remote.models:
            self.run_worker(self.engines.remote.refresh_health(), group="health", exclusive=True, exit_on_error=False)

    def library_names(self, kind: str) -> list[str]:
        """Names in the model store's library ([] while the store is unavailable)."""
        try:
            from llmchat.engine.store import ModelStore
            return [m.name for m in ModelStore(data_dir=self.data_path).list() if m.kind == kind]
        except Exception:   # the store is optional here: never let it break the chat
            return []
