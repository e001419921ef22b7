"""The chat controller on its own: no Textual app, a recording stand-in for the screen (chat_ui.ChatUI). What
the chat keys do is tested through the app in test_chat_flows.py; this checks the controller needs nothing
of a screen but that interface."""
from __future__ import annotations

from import_graph import import_graph

from llmchat.tui.app.chat_controller import ChatController
from llmchat.tui.app.chat_state import ChatMessage
from llmchat.tui.app.db import ChatDatabase
from llmchat.tui.app.engines import EngineManager
from llmchat.tui.settings import Settings, SettingsStore


class Worker:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class RecordingUI:
    """Every ChatUI call, in order; workers are recorded and never run (no engine here)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.notices: list[str] = []
        self.workers: list[Worker] = []
        self.shown = None
        self.closing = False

    def notify(self, message, *, title="", severity="information", timeout=None) -> None:
        self.notices.append(message)

    def run_worker(self, work, *, group, exit_on_error):
        work.close()     # a coroutine never started: closed, so nothing warns it was never awaited
        self.calls.append(("run_worker", group))
        self.workers.append(Worker())
        return self.workers[-1]

    async def add_session(self, session) -> None:
        self.calls.append(("add_session", session.id))

    async def remove_session(self, session_id) -> None:
        self.calls.append(("remove_session", session_id))

    def shows(self, session) -> bool:
        return self.shown is session

    async def show_session(self, session) -> None:
        self.shown = session
        self.calls.append(("show_session", session.id))

    def __getattr__(self, name):
        """The other calls (titles, rows, the input, the clipboard, loading) are only recorded."""
        return lambda *args: self.calls.append((name, *args))


def controller(tmp_path, **settings) -> tuple[ChatController, RecordingUI]:
    ui = RecordingUI()
    engines = EngineManager(memory_budget_gb=1.0, kv_cache_gb=0.01, data_dir=tmp_path)
    chat = ChatController(ChatDatabase(tmp_path / "chats.sqlite3"), engines, Settings(**settings),
                          SettingsStore(tmp_path / "settings.toml"), ui=ui)
    return chat, ui


async def test_a_send_stores_the_message_and_starts_a_reply_through_the_ui(tmp_path):
    chat, ui = controller(tmp_path, default_model="some-model")
    await chat.send("hello there\nsecond line")         # no session yet: one is created and shown
    session = chat.current
    assert ui.calls[:2] == [("add_session", session.id), ("show_session", session.id)]
    assert ("prompt_sent", "hello there\nsecond line") in ui.calls and ("show_title", "hello there") in ui.calls
    assert ("run_worker", f"session-{session.id}") in ui.calls and session.id in chat.replies
    assert [m.role for m in chat.db.load_messages(session.id)] == ["user"]

    await chat.send("again")                           # still generating: refused with a notice
    assert ui.notices[-1] == "This session is still generating: Esc stops it"
    chat.stop()                                        # no request in an engine yet: the worker is cancelled
    assert ui.workers[-1].cancelled


async def test_edit_needs_an_idle_session_and_esc_cancels_it(tmp_path):
    chat, ui = controller(tmp_path)
    session = await chat.create_session("some-model")
    session.messages.append(chat.db.add_message(session.id, ChatMessage("user", "first")))
    chat.edit_last()
    assert chat.editing is session.messages[0] and ("edit_in_prompt", "first") in ui.calls
    chat.stop()
    assert chat.editing is None and ("clear_prompt",) in ui.calls and ui.notices[-1] == "Edit cancelled"


async def test_sessions_switch_step_and_delete_through_the_ui(tmp_path):
    chat, ui = controller(tmp_path)
    first = await chat.create_session("m")
    second = await chat.create_session("m")
    await chat.step_session(1)
    assert chat.current_id == first.id and ui.shown is first
    await chat.delete_session(first)
    assert ("remove_session", first.id) in ui.calls and chat.current is second and ui.shown is second
    assert [s.id for s in chat.db.load_sessions()] == [second.id]


async def test_a_closing_ui_shows_no_session(tmp_path):
    chat, ui = controller(tmp_path)
    first = await chat.create_session("m")
    second = await chat.create_session("m")
    ui.closing = True
    await chat.switch_to(first.id)
    assert chat.current is second


def test_the_controller_and_its_streams_import_no_screen():
    graph = import_graph()
    for module in ("llmchat.tui.app.chat_controller", "llmchat.tui.app.reply_streams", "llmchat.tui.app.chat_ui"):
        assert not [t for t in graph[module] if t.startswith("llmchat.tui.app.screens")], module
