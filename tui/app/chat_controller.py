"""The chat's state and what the chat keys do to it. The controller owns the sessions, the one shown, the
database, the engines, the replies streaming and an edit in progress; screens call it, and it tells the
screen what changed through a small interface (chat_ui.ChatUI), never by reading the screen."""
from __future__ import annotations

from pathlib import Path

from ..paths import exports_dir
from ..settings import Settings, SettingsStore
from .chat_prompt import RAW
from .chat_state import ChatMessage, ChatSession, SessionSettings
from .chat_ui import ChatUI
from .code_blocks import code_blocks
from .db import ChatDatabase
from .engines import EngineManager
from .export import export_session
from .reply_streams import ReplyStreams


class ChatController:
    def __init__(self, db: ChatDatabase, engines: EngineManager, settings: Settings, settings_store: SettingsStore,
                 ui: ChatUI) -> None:
        self.db = db
        self.engines = engines
        self.settings = settings
        self.settings_store = settings_store
        self.ui = ui
        self.sessions: dict[int, ChatSession] = {}      # every session, by id (all loaded at start)
        self.current_id: int | None = None              # the session shown
        self.editing: ChatMessage | None = None          # the message being edited for a resend, if any
        self.streams = ReplyStreams(self)                # replies being generated, one per session at most
        self.last_export: tuple[Path, Path] | None = None   # (markdown, json) of the last export

    @property
    def current(self) -> ChatSession | None:
        return self.sessions.get(self.current_id) if self.current_id is not None else None

    @property
    def replies(self) -> dict[int, ChatMessage]:
        """Session id -> the reply being generated for it."""
        return self.streams.replies

    # ---- sessions ---------------------------------------------------------------------------------
    async def load_sessions(self) -> None:
        for session in self.db.load_sessions():
            self.sessions[session.id] = session
            await self.ui.add_session(session)

    async def create_session(self, model: str = "", title: str | None = None) -> ChatSession:
        settings = SessionSettings(model=model, system_prompt=self.settings.system_prompt)
        session = self.db.create_session(title or f"New chat {len(self.sessions) + 1}", settings)
        self.sessions[session.id] = session
        await self.ui.add_session(session)
        await self.switch_to(session.id)
        return session

    async def switch_to(self, session_id: int) -> None:
        if self.ui.closing or session_id not in self.sessions:
            return      # shutting down, or a late event for a deleted session
        if session_id == self.current_id and self.ui.shows(self.sessions[session_id]):
            return
        self.current_id = session_id
        self.editing = None
        await self.ui.show_session(self.sessions[session_id])

    async def step_session(self, step: int) -> None:
        ids = sorted(self.sessions)
        if ids and self.current_id in ids:
            await self.switch_to(ids[(ids.index(self.current_id) + step) % len(ids)])

    def rename(self, session: ChatSession, title: str) -> None:
        session.title = title
        self.db.rename_session(session.id, title)
        self.ui.show_title(title)
        self.ui.refresh_session_item(session.id)

    async def delete_session(self, session: ChatSession) -> None:
        del self.sessions[session.id]
        self.current_id = None
        self.streams.cancel(session.id)      # the stream closes, which aborts the request in the engine
        self.db.delete_session(session.id)
        await self.ui.remove_session(session.id)
        if self.sessions:
            await self.switch_to(max(self.sessions))
        else:
            await self.create_session(session.settings.model)

    async def open_with_model(self, model: str) -> None:
        """`llmchat --model PATH`: a fresh session on that model (reusing an empty last one), loaded now."""
        latest = self.sessions.get(max(self.sessions)) if self.sessions else None
        if latest is not None and not latest.messages:
            latest.settings.model = model
            self.db.save_settings(latest.id, latest.settings)
            await self.switch_to(latest.id)
        else:
            await self.create_session(model)
        self.ui.load_model(model, self.current.settings.draft_model)

    # ---- a session's settings: its model, adapter, chat template -----------------------------------
    def apply_settings(self, session: ChatSession, result: SessionSettings | None) -> None:
        """What the session settings dialog returned (None: cancelled)."""
        if result is None:
            return
        engine_changed = (result.model, result.draft_model) != (session.settings.model, session.settings.draft_model)
        session.settings = result
        self.db.save_settings(session.id, result)
        self.ui.refresh_session_item(session.id)
        if engine_changed and result.model and not self.engines.is_loaded(result.model, result.draft_model):
            self.ui.load_model(result.model, result.draft_model)   # a draft the engine refuses: said now
        self.ui.notify("Session settings saved", timeout=3)

    def use_chat_template(self, session: ChatSession, choice: str) -> None:
        session.settings.chat_template = choice
        self.db.save_settings(session.id, session.settings)
        how = "raw mode" if choice == RAW else f"the {choice} chat template"
        self.ui.notify(f"This session uses {how} (F3 changes it): Enter sends your message", timeout=6)

    def use_model(self, model: str) -> None:
        """The current session uses this model (loaded now); it becomes the default when there is none."""
        session = self.current
        draft = None
        if session is not None and session.id not in self.replies:
            session.settings.model = model
            self.db.save_settings(session.id, session.settings)
            self.ui.refresh_session_item(session.id)
            draft = session.settings.draft_model    # the session's draft guesses for its new model too
        if not self.settings.default_model:
            self.settings.default_model = model
            try:
                self.settings_store.save(self.settings)
            except (ValueError, OSError) as exc:
                self.ui.notify(str(exc), severity="warning")
        self.ui.load_model(model, draft)

    def attach_adapter(self, adapter: str | None) -> None:
        session = self.current
        if session is not None:
            session.settings.adapter = adapter
            self.db.save_settings(session.id, session.settings)
            self.ui.refresh_session_item(session.id)
            self.ui.notify(f"Adapter {adapter} attached to this session" if adapter else "Adapter detached")

    # ---- the conversation: send, stop, regenerate, continue, edit and resend -----------------------
    async def send(self, text: str) -> None:
        session = self.current or await self.create_session(self.settings.default_model)
        if session.id in self.streams:
            self.ui.notify("This session is still generating: Esc stops it", severity="warning")
            return
        if not session.settings.model:
            self.ui.notify("Choose a model first: F3 (session settings) or F4 (models)", severity="warning")
            return
        editing = self.editing
        if editing is not None and editing in session.messages:
            # Edit and resend: the edited message and everything after it are replaced.
            index = session.messages.index(editing)
            self.db.delete_messages_from(session.id, editing.id)
            del session.messages[index:]
        self.editing = None
        self.ui.prompt_sent(text)
        sent = self.db.add_message(session.id, ChatMessage("user", text))
        session.messages.append(sent)
        if session.title.startswith("New chat"):
            session.title = text.splitlines()[0][:40]
            self.db.rename_session(session.id, session.title)
            self.ui.show_title(session.title)
        self.streams.start(session, sent=sent)

    def stop(self) -> None:
        """Esc: cancels an edit in progress, else stops the current session's reply."""
        if self.editing is not None:
            self.editing = None
            self.ui.clear_prompt()
            self.ui.notify("Edit cancelled")
            return
        session = self.current
        if session is not None:
            self.streams.stop(session.id)

    def idle_session(self) -> ChatSession | None:
        """The current session when it is not generating (with a notice when it is)."""
        session = self.current
        if session is None:
            return None
        if session.id in self.streams:
            self.ui.notify("Still generating: Esc stops it first", severity="warning")
            return None
        return session

    def regenerate(self) -> None:
        session = self.idle_session()
        if session is None or not session.messages:
            return
        last = session.messages[-1]
        if last.role == "assistant":
            if last.id is not None:
                self.db.delete_messages_from(session.id, last.id)
            session.messages.pop()
        self.streams.start(session)

    def continue_reply(self) -> None:
        session = self.idle_session()
        if session is None:
            return
        last = session.messages[-1] if session.messages else None
        if last is None or not last.cut_off:
            self.ui.notify("The last reply is complete: nothing to continue", severity="warning")
            return
        self.streams.start(session, continue_from=last)

    def begin_edit(self, message: ChatMessage) -> None:
        if self.idle_session() is None:
            return
        self.editing = message
        self.ui.edit_in_prompt(message.content)
        self.ui.notify("Editing: Enter resends (later messages are replaced), Esc cancels")

    def edit_last(self) -> None:
        session = self.current
        users = [m for m in session.messages if m.role == "user"] if session else []
        if users:
            self.begin_edit(users[-1])

    # ---- copy and export --------------------------------------------------------------------------
    def last_reply(self) -> ChatMessage | None:
        session = self.current
        replies = [m for m in session.messages if m.role == "assistant"] if session else []
        return replies[-1] if replies else None

    def copy_last_reply(self) -> None:
        reply = self.last_reply()
        if reply is not None:
            self.ui.copy_to_clipboard(reply.content)
            self.ui.notify("Reply copied to the clipboard")

    def copy_last_code(self) -> None:
        reply = self.last_reply()
        blocks = code_blocks(reply.content) if reply else []
        if not blocks:
            self.ui.notify("No code block in the last reply", severity="warning")
            return
        self.ui.copy_to_clipboard(blocks[-1])
        self.ui.notify("Code block copied to the clipboard")

    def export_current(self) -> None:
        if self.current is None:
            return
        try:
            md, js = export_session(self.current, exports_dir())
        except OSError as exc:
            self.ui.notify(f"Export failed: {exc}", severity="error")
            return
        self.last_export = (md, js)
        self.ui.notify(f"Exported to {md} and {js.name}", title="Export", timeout=10)
