"""What the chat keys do to the chat screen's current session: send, stop, regenerate, continue, edit and
resend, copy, export. Functions of the screen (MainScreen), whose state they use."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .chat_state import ChatMessage, ChatSession
from .export import export_session
from .paths import exports_dir
from .widgets.message_view import code_blocks

if TYPE_CHECKING:
    from .screens.main_screen import MainScreen


async def send(screen: MainScreen, text: str) -> None:
    session = screen.current or await screen.create_session(screen.settings.default_model)
    if session.id in screen.streams:
        screen.notify("This session is still generating: Esc stops it", severity="warning")
        return
    if not session.settings.model:
        screen.notify("Choose a model first: F3 (session settings) or F4 (models)", severity="warning")
        return
    editing = screen.editing
    if editing is not None and editing in session.messages:
        # Edit and resend: the edited message and everything after it are replaced.
        index = session.messages.index(editing)
        screen.db.delete_messages_from(session.id, editing.id)
        del session.messages[index:]
    screen.editing = None
    prompt = screen.prompt
    prompt.remember(text)
    prompt.clear()
    sent = screen.db.add_message(session.id, ChatMessage("user", text))
    session.messages.append(sent)
    if session.title.startswith("New chat"):
        session.title = text.splitlines()[0][:40]
        screen.db.rename_session(session.id, session.title)
        screen.app.sub_title = session.title
    screen.streams.start(session, sent=sent)


def stop(screen: MainScreen) -> None:
    """Esc: cancels an edit in progress, else stops the current session's reply."""
    if screen.editing is not None:
        screen.editing = None
        screen.prompt.clear()
        screen.notify("Edit cancelled")
        return
    session = screen.current
    if session is not None:
        screen.streams.stop(session.id)


def idle_session(screen: MainScreen) -> ChatSession | None:
    """The current session when it is not generating (with a notice when it is)."""
    session = screen.current
    if session is None:
        return None
    if session.id in screen.streams:
        screen.notify("Still generating: Esc stops it first", severity="warning")
        return None
    return session


def regenerate(screen: MainScreen) -> None:
    session = idle_session(screen)
    if session is None or not session.messages:
        return
    last = session.messages[-1]
    if last.role == "assistant":
        if last.id is not None:
            screen.db.delete_messages_from(session.id, last.id)
        session.messages.pop()
    screen.streams.start(session)


def continue_reply(screen: MainScreen) -> None:
    session = idle_session(screen)
    if session is None:
        return
    last = session.messages[-1] if session.messages else None
    if last is None or not last.cut_off:
        screen.notify("The last reply is complete: nothing to continue", severity="warning")
        return
    screen.streams.start(session, continue_from=last)


def begin_edit(screen: MainScreen, message: ChatMessage) -> None:
    if idle_session(screen) is None:
        return
    screen.editing = message
    prompt = screen.prompt
    prompt.load_text(message.content)
    prompt.focus()
    screen.notify("Editing: Enter resends (later messages are replaced), Esc cancels")


def edit_last(screen: MainScreen) -> None:
    session = screen.current
    users = [m for m in session.messages if m.role == "user"] if session else []
    if users:
        begin_edit(screen, users[-1])


def last_reply(screen: MainScreen) -> ChatMessage | None:
    session = screen.current
    replies = [m for m in session.messages if m.role == "assistant"] if session else []
    return replies[-1] if replies else None


def copy_last_reply(screen: MainScreen) -> None:
    reply = last_reply(screen)
    if reply is not None:
        screen.app.copy_to_clipboard(reply.content)
        screen.notify("Reply copied to the clipboard")


def copy_last_code(screen: MainScreen) -> None:
    reply = last_reply(screen)
    blocks = code_blocks(reply.content) if reply else []
    if not blocks:
        screen.notify("No code block in the last reply", severity="warning")
        return
    screen.app.copy_to_clipboard(blocks[-1])
    screen.notify("Code block copied to the clipboard")


def export_current(screen: MainScreen) -> None:
    if screen.current is None:
        return
    try:
        md, js = export_session(screen.current, exports_dir())
    except OSError as exc:
        screen.notify(f"Export failed: {exc}", severity="error")
        return
    screen.last_export = (md, js)
    screen.notify(f"Exported to {md} and {js.name}", title="Export", timeout=10)
