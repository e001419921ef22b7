"""The chat screen: sessions on the left, the conversation and the input, the engine panel on the right.

It owns the chat keys: they are bindings of this screen, so they are inactive whenever another screen or a
dialog is on top (no key reaches a session from under a dialog). The keys call its chat controller
(chat_controller.py: the sessions, the replies being generated, an edit in progress), and the screen shows
what the controller tells it (the ChatUI methods below); the app keeps what every screen shares (database,
engines, settings).
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header

from ...settings import Settings, SettingsStore
from ..chat_controller import ChatController
from ..chat_state import ChatMessage, ChatSession
from ..db import ChatDatabase
from ..engines import EngineManager
from ..generation import EXPECTED_ERRORS
from ..model_choices import known_models, library_names, model_defaults, supports_thinking
from ..widgets.chat_view import ChatView
from ..widgets.engine_panel import EnginePanel
from ..widgets.message_view import MessageView
from ..widgets.prompt_input import PromptInput
from ..widgets.sidebar import Sidebar
from .chat_template_choice import ChatTemplateChoice, no_template_text
from .compare_screen import CompareScreen
from .dialogs import Confirm, TextPrompt
from .models_screen import ModelsScreen
from .session_settings import SessionSettingsScreen
from .welcome import WelcomeScreen

FRAME_INTERVAL = 1 / 30      # streamed text reaches the widgets at most this often (batched per frame)
METRICS_INTERVAL = 0.5       # engine.metrics() polling
SAVE_INTERVAL = 1.0          # streaming replies are written to SQLite this often
HEALTH_INTERVAL = 5.0        # remote endpoints in use are asked whether they are up


class MainScreen(Screen):
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
    ]

    def __init__(self, db: ChatDatabase, engines: EngineManager, settings: Settings, settings_store: SettingsStore,
                 data_path: Path, startup_model: str | None = None, show_welcome: bool = True) -> None:
        """startup_model: `llmchat --model` (opened in a session and loaded); show_welcome: the first-run
        dialog when no model is known at all."""
        super().__init__()
        # The chat's state and operations; this screen shows what it tells it (the ChatUI methods below).
        self.chat = ChatController(db, engines, settings, settings_store, ui=self)
        self.data_path = data_path
        self.startup_model = startup_model
        self.show_welcome = show_welcome
        self.remote_names: list[str] = []               # "remote:NAME/ID" of every endpoint, asked at start
        self.metrics_timer = None                        # the engine panel's poll (tests pause it)

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
        """Under a dialog this screen's footer stays visible: it lists its keys only while they act."""
        return self.is_active

    # ---- the chat's state, read from the controller ----------------------------------------------
    @property
    def db(self) -> ChatDatabase:
        return self.chat.db

    @property
    def engines(self) -> EngineManager:
        return self.chat.engines

    @property
    def settings(self) -> Settings:
        return self.chat.settings

    @property
    def sessions(self) -> dict[int, ChatSession]:
        return self.chat.sessions

    @property
    def current_id(self) -> int | None:
        return self.chat.current_id

    @property
    def current(self) -> ChatSession | None:
        return self.chat.current

    @property
    def replies(self) -> dict[int, ChatMessage]:
        """Session id -> the reply being generated for it."""
        return self.chat.replies

    @property
    def editing(self) -> ChatMessage | None:
        return self.chat.editing

    @property
    def last_export(self) -> tuple[Path, Path] | None:
        return self.chat.last_export

    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)

    async def on_mount(self) -> None:
        await self.chat.load_sessions()
        if self.startup_model:
            await self.chat.open_with_model(self.startup_model)
        elif not self.sessions:
            await self.create_session(self.settings.default_model)
        else:
            await self.switch_to(max(self.sessions))
        self.set_interval(FRAME_INTERVAL, self.frame_tick)
        self.set_interval(SAVE_INTERVAL, self.chat.streams.save_streaming)
        self.metrics_timer = self.set_interval(METRICS_INTERVAL, self.poll_metrics)
        if self.engines.remote.endpoints:
            self.run_worker(self.ask_remote_models(), group="remote", exit_on_error=False)
            self.set_interval(HEALTH_INTERVAL, self.check_remote_health)
        self.prompt.focus()
        if self.show_welcome and not self.has_any_model():
            self.call_after_refresh(self.action_welcome)

    @property
    def closing(self) -> bool:
        """The app is shutting down: late timers and events find no widgets to update."""
        return not self.app.screen_stack

    # ---- sessions ---------------------------------------------------------------------------------
    def has_any_model(self) -> bool:
        return bool(self.startup_model or self.settings.default_model or self.library_names("model")
                    or any(s.settings.model for s in self.sessions.values()))

    async def create_session(self, model: str = "", title: str | None = None) -> ChatSession:
        return await self.chat.create_session(model, title)

    async def switch_to(self, session_id: int) -> None:
        await self.chat.switch_to(session_id)

    async def on_sidebar_selected(self, event: Sidebar.Selected) -> None:
        await self.chat.switch_to(event.session_id)

    async def action_new_session(self) -> None:
        model = self.current.settings.model if self.current else self.settings.default_model
        await self.create_session(model)
        self.prompt.focus()

    def action_rename_session(self) -> None:
        session = self.current
        if session is not None:
            self.app.push_screen(TextPrompt("Rename session", session.title),
                                 lambda title: self.chat.rename(session, title) if title else None)

    def action_delete_session(self) -> None:
        session = self.current
        if session is not None:
            self.app.push_screen(Confirm(f"Delete “{session.title}”?"),
                                 lambda yes: self.chat.delete_session(session) if yes else None)

    async def action_next_session(self) -> None:
        await self.chat.step_session(1)

    async def action_previous_session(self) -> None:
        await self.chat.step_session(-1)

    # ---- the conversation (the controller's) -------------------------------------------------------
    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        await self.chat.send(event.text)

    async def action_stop(self) -> None:
        self.chat.stop()

    async def action_regenerate(self) -> None:
        self.chat.regenerate()

    async def action_continue_reply(self) -> None:
        self.chat.continue_reply()

    def on_message_view_edit_requested(self, event: MessageView.EditRequested) -> None:
        self.chat.begin_edit(event.message)

    def action_edit_last(self) -> None:
        self.chat.edit_last()

    def action_focus_input(self) -> None:
        self.prompt.focus()

    def action_copy_last_reply(self) -> None:
        self.chat.copy_last_reply()

    def action_copy_last_code(self) -> None:
        self.chat.copy_last_code()

    def action_export_session(self) -> None:
        self.chat.export_current()

    # ---- what the controller tells the screen (chat_ui.ChatUI) -------------------------------------
    async def add_session(self, session: ChatSession) -> None:
        await self.query_one(Sidebar).add(session)

    async def remove_session(self, session_id: int) -> None:
        await self.query_one(Sidebar).remove_session(session_id)

    def shows(self, session: ChatSession) -> bool:
        return self.query_one(ChatView).session is session

    async def show_session(self, session: ChatSession) -> None:
        self.query_one(Sidebar).select(session.id)
        await self.query_one(ChatView).show(session)
        self.app.sub_title = session.title

    def show_title(self, title: str) -> None:
        self.app.sub_title = title

    def refresh_session_item(self, session_id: int) -> None:
        item = self.query_one(Sidebar).item(session_id)
        if item is not None:
            item.refresh_labels(session_id in self.replies)

    def prompt_sent(self, text: str) -> None:
        self.prompt.remember(text)
        self.prompt.clear()

    def clear_prompt(self) -> None:
        self.prompt.clear()

    def edit_in_prompt(self, text: str) -> None:
        self.prompt.load_text(text)
        self.prompt.focus()

    def restore_prompt(self, text: str) -> None:
        if not self.prompt.text.strip():
            self.prompt.load_text(text)

    def copy_to_clipboard(self, text: str) -> None:
        self.app.copy_to_clipboard(text)

    # ---- models and the screens on top --------------------------------------------------------------
    def library_names(self, kind: str) -> list[str]:
        return library_names(self.data_path, kind)

    def known_models(self) -> list[str]:
        return known_models((s.settings.model for s in self.sessions.values()), self.library_names("model"),
                            self.remote_names, self.settings.default_model)

    def action_session_settings(self) -> None:
        session = self.current
        if session is None:
            return
        model = session.settings.model
        screen = SessionSettingsScreen(session.settings, self.known_models(), self.library_names("adapter"),
                                       model_defaults(model, self.data_path),
                                       thinking_switch=supports_thinking(model, self.data_path),
                                       data_path=self.data_path)
        self.app.push_screen(screen, lambda result: self.chat.apply_settings(session, result))

    def offer_chat_template(self, session: ChatSession, suggested: str | None) -> None:
        """The session's model has no chat template: the notice in the chat, and the choice of how to send."""
        self.notify(no_template_text(suggested), title="No chat template", severity="warning", timeout=15)

        def chosen(choice: str | None) -> None:
            if choice is None or session.id not in self.sessions:
                return      # cancelled, or the session was deleted meanwhile
            self.chat.use_chat_template(session, choice)
            self.prompt.focus()
        self.app.push_screen(ChatTemplateChoice(suggested), chosen)

    def use_model(self, model: str) -> None:
        """The current session uses this model (loaded now); the Models screen asks the controller directly."""
        self.chat.use_model(model)

    def load_model(self, model: str, draft: str | None = None) -> None:
        """Load in the background (with a session's draft model); the engine panel shows it loading, a notice
        when done or failed (a draft the engine refuses says why)."""
        async def load() -> None:
            started = time.monotonic()
            self.notify(f"Loading {Path(model).name}…", timeout=3)
            self.call_later(self.poll_metrics)     # show the loading bar now, not at the next poll
            try:
                await self.engines.get(model, draft)
            except EXPECTED_ERRORS as exc:
                self.notify(str(exc), title="Model not loaded", severity="error", timeout=15)
                return
            self.notify(f"{Path(model).name} loaded in {time.monotonic() - started:.1f} s", timeout=4)
            self.poll_metrics()
        self.run_worker(load(), group="load-model", exit_on_error=False)

    def action_models(self, tab: str = "library") -> None:
        self.app.push_screen(ModelsScreen(initial_tab=tab))

    def action_compare(self) -> None:
        self.app.push_screen(CompareScreen(self.known_models(), self.library_names("adapter")))

    def action_welcome(self) -> None:
        def chosen(choice: str | None) -> None:
            if choice == "models":
                self.action_models("search")
            elif choice == "import":
                self.action_models("import")
        self.app.push_screen(WelcomeScreen(), chosen)

    # ---- timers -----------------------------------------------------------------------------------
    @property
    def updating(self) -> bool:
        """Widgets take new text and figures. Not once the app is exiting: this screen's timers tick until it
        is taken down, and a Markdown block mounted then would be cancelled half-way."""
        return self.app.is_running and not self.closing

    async def frame_tick(self) -> None:
        if self.updating:
            await asyncio.shield(self.sync_chats())

    async def sync_chats(self) -> None:
        """One frame of every chat view. Shielded from its timer (frame_tick): the app's shutdown stops the
        timer with a cancel, which would reach a rebuild's removal half-way and cancel the removed message
        views' own tasks (a CancelledError out of the app's shutdown)."""
        for view in self.query(ChatView):
            await view.sync()

    def poll_metrics(self) -> None:
        if self.updating:
            for panel in self.query(EnginePanel):
                panel.show(self.engines.metrics(), self.engines.loading_models())

    async def ask_remote_models(self) -> None:
        self.remote_names, problems = await self.engines.remote.model_names()
        for problem in problems:
            self.notify(problem, title="Remote endpoint", severity="warning", timeout=10)

    def check_remote_health(self) -> None:
        if self.engines.remote.models:
            self.run_worker(self.engines.remote.refresh_health(), group="health", exclusive=True, exit_on_error=False)
