"""Chat actions of the app: send, stop, regenerate, continue, edit and resend, sessions, copy, export."""
from __future__ import annotations

import time
from pathlib import Path

from .chat_state import ChatMessage, ChatSession
from .export import export_session
from .generation import stream_reply
from .paths import exports_dir
from .screens.dialogs import Confirm, TextPrompt
from .widgets.message_view import MessageView, code_blocks
from .widgets.prompt_input import PromptInput
from .widgets.sidebar import Sidebar

EXPECTED_ERRORS = (ValueError, FileNotFoundError, RuntimeError, OSError)


class ChatActions:
    # sending and streaming
    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        session = self.current or await self.create_session(self.settings.default_model)
        if session.id in self.replies:
            self.notify("This session is still generating: Esc stops it", severity="warning")
            return
        if not session.settings.model:
            self.notify("Choose a model first: F3 (session settings) or F4 (models)", severity="warning")
            return
        if self.editing is not None and self.editing in session.messages:
            # Edit and resend: the edited message and everything after it are replaced.
            index = session.messages.index(self.editing)
            self.db.delete_messages_from(session.id, self.editing.id)
            del session.messages[index:]
        self.editing = None
        prompt = self.main.query_one(PromptInput)
        prompt.remember(event.text)
        prompt.clear()
        sent = self.db.add_message(session.id, ChatMessage("user", event.text))
        session.messages.append(sent)
        if session.title.startswith("New chat"):
            session.title = event.text.splitlines()[0][:40]
            self.db.rename_session(session.id, session.title)
            self.sub_title = session.title
        self.start_reply(session, sent=sent)

    def start_reply(self, session: ChatSession, continue_from: ChatMessage | None = None,
                    sent: ChatMessage | None = None) -> None:
        """sent: the user message this reply answers, when it was just typed (taken back if nothing comes)."""
        if continue_from is None:
            reply = ChatMessage("assistant", "", model=session.settings.model, adapter=session.settings.adapter)
            session.messages.append(reply)
        else:
            reply = continue_from
            reply.finish_reason = None
        self.replies[session.id] = reply
        self.reply_workers[session.id] = self.run_worker(
            self._run_reply(session, reply, continuing=continue_from is not None, sent=sent),
            group=f"session-{session.id}", exit_on_error=False)
        self.refresh_session_item(session.id)

    async def _run_reply(self, session: ChatSession, reply: ChatMessage, continuing: bool,
                         sent: ChatMessage | None = None) -> None:
        try:
            await stream_reply(self.engines, session, reply, continuing,
                               on_request=lambda engine, rid: self.requests.__setitem__(session.id, (engine, rid)))
        except EXPECTED_ERRORS as exc:
            reply.finish_reason, reply.error = "error", str(exc)
            self.notify(str(exc), title="Generation failed", severity="error", timeout=10)
        finally:
            self.replies.pop(session.id, None)
            self.reply_workers.pop(session.id, None)
            self.requests.pop(session.id, None)
            if reply.finish_reason == "error" and not reply.content:
                if reply in session.messages:
                    session.messages.remove(reply)
                self.take_back(session, sent)
            elif reply in session.messages and session.id in self.sessions:
                self.save_reply(session.id, reply)
            if session.id in self.sessions:
                self.refresh_session_item(session.id)

    def take_back(self, session: ChatSession, sent: ChatMessage | None) -> None:
        """A send that got no reply leaves the chat as it was: the message leaves it and returns to the input
        (so the next prompt never holds two user turns in a row, and nothing typed is lost)."""
        if sent is None or not session.messages or session.messages[-1] is not sent:
            return
        session.messages.pop()
        if sent.id is not None:
            self.db.delete_messages_from(session.id, sent.id)
        if session.id == self.current_id and self.screen_stack:
            prompt = self.main.query_one(PromptInput)
            if not prompt.text.strip():
                prompt.load_text(sent.content)

    def save_reply(self, session_id: int, reply: ChatMessage) -> None:
        self.db.update_message(reply) if reply.id is not None else self.db.add_message(session_id, reply)

    def save_streaming_replies(self) -> None:
        """Every second: the text of each streaming reply so far, one statement each (a crash loses at most a
        second of it; at the next start it shows as interrupted)."""
        for session_id, reply in list(self.replies.items()):
            session = self.sessions.get(session_id)
            if session is not None and reply.content and reply in session.messages:
                self.save_reply(session_id, reply)

    async def action_stop(self) -> None:
        if self.editing is not None:
            self.editing = None
            self.main.query_one(PromptInput).clear()
            self.notify("Edit cancelled")
            return
        session = self.current
        if session is not None:
            self.stop_reply(session.id)

    def stop_reply(self, session_id: int) -> None:
        """Abort in the engine (the stream then ends with "abort"); cancel if no request exists yet."""
        if session_id in self.requests:
            engine, request_id = self.requests[session_id]
            engine.abort(request_id)
        elif session_id in self.reply_workers:
            self.reply_workers[session_id].cancel()

    def _idle_session(self) -> ChatSession | None:
        session = self.current
        if session is None:
            return None
        if session.id in self.replies:
            self.notify("Still generating: Esc stops it first", severity="warning")
            return None
        return session

    async def action_regenerate(self) -> None:
        session = self._idle_session()
        if session is None or not session.messages:
            return
        last = session.messages[-1]
        if last.role == "assistant":
            if last.id is not None:
                self.db.delete_messages_from(session.id, last.id)
            session.messages.pop()
        self.start_reply(session)

    async def action_continue_reply(self) -> None:
        session = self._idle_session()
        if session is None:
            return
        last = session.messages[-1] if session.messages else None
        if last is None or not last.cut_off:
            self.notify("The last reply is complete: nothing to continue", severity="warning")
            return
        self.start_reply(session, continue_from=last)

    def on_message_view_edit_requested(self, event: MessageView.EditRequested) -> None:
        self.begin_edit(event.message)

    def begin_edit(self, message: ChatMessage) -> None:
        if self._idle_session() is None:
            return
        self.editing = message
        prompt = self.main.query_one(PromptInput)
        prompt.load_text(message.content)
        prompt.focus()
        self.notify("Editing: Enter resends (later messages are replaced), Esc cancels")

    def action_edit_last(self) -> None:
        session = self.current
        users = [m for m in session.messages if m.role == "user"] if session else []
        if users:
            self.begin_edit(users[-1])

    def action_focus_input(self) -> None:
        self.main.query_one(PromptInput).focus()

    # copying and export
    def _last_reply(self) -> ChatMessage | None:
        session = self.current
        replies = [m for m in session.messages if m.role == "assistant"] if session else []
        return replies[-1] if replies else None

    def action_copy_last_reply(self) -> None:
        reply = self._last_reply()
        if reply is not None:
            self.copy_to_clipboard(reply.content)
            self.notify("Reply copied to the clipboard")

    def action_copy_last_code(self) -> None:
        reply = self._last_reply()
        blocks = code_blocks(reply.content) if reply else []
        if not blocks:
            self.notify("No code block in the last reply", severity="warning")
            return
        self.copy_to_clipboard(blocks[-1])
        self.notify("Code block copied to the clipboard")

    def action_export_session(self) -> None:
        if self.current is None:
            return
        try:
            md, js = export_session(self.current, exports_dir())
        except OSError as exc:
            self.notify(f"Export failed: {exc}", severity="error")
            return
        self.last_export = (md, js)
        self.notify(f"Exported to {md} and {js.name}", title="Export", timeout=10)

    # sessions
    async def action_new_session(self) -> None:
        model = self.current.settings.model if self.current else self.settings.default_model
        await self.create_session(model)
        self.main.query_one(PromptInput).focus()

    def action_rename_session(self) -> None:
        session = self.current
        if session is None:
            return

        def renamed(title: str | None) -> None:
            if title:
                session.title = title
                self.db.rename_session(session.id, title)
                self.sub_title = title
                self.refresh_session_item(session.id)
        self.push_screen(TextPrompt("Rename session", session.title), renamed)

    def action_delete_session(self) -> None:
        session = self.current
        if session is not None:
            self.push_screen(Confirm(f"Delete “{session.title}”?"),
                             lambda yes: self.delete_session(session) if yes else None)

    async def delete_session(self, session: ChatSession) -> None:
        worker = self.reply_workers.get(session.id)
        del self.sessions[session.id]
        self.current_id = None
        if worker is not None:
            worker.cancel()      # the stream closes, which aborts the request in the engine
        self.db.delete_session(session.id)
        await self.main.query_one(Sidebar).remove_session(session.id)
        if self.sessions:
            await self.switch_to(max(self.sessions))
        else:
            await self.create_session(session.settings.model)

    async def _step_session(self, step: int) -> None:
        ids = sorted(self.sessions)
        if ids and self.current_id in ids:
            await self.switch_to(ids[(ids.index(self.current_id) + step) % len(ids)])

    async def action_next_session(self) -> None:
        await self._step_session(1)

    async def action_previous_session(self) -> None:
        await self._step_session(-1)

    # models
    def load_model(self, model: str) -> None:
        """Load in the background; the engine panel shows it loading, a notice when done or failed."""
        async def load() -> None:
            started = time.monotonic()
            self.notify(f"Loading {Path(model).name}…", timeout=3)
            self.call_later(self.poll_metrics)     # show the loading bar now, not at the next poll
            try:
                await self.engines.get(model)
            except EXPECTED_ERRORS as exc:
                self.notify(str(exc), title="Model not loaded", severity="error", timeout=15)
                return
            self.notify(f"{Path(model).name} loaded in {time.monotonic() - started:.1f} s", timeout=4)
            self.poll_metrics()
        self.run_worker(load(), group="load-model", exit_on_error=False)
