"""The replies being generated, at most one per session: start, stop, save as they stream, and what is left
when one ends (a reply, an error notice, or a send taken back). Part of the chat controller, whose sessions,
database and engines they use; what the user sees goes through its UI interface (chat_ui.ChatUI)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmchat.engine.chat_templates import NoChatTemplateError

from .chat_state import ChatMessage, ChatSession
from .generation import EXPECTED_ERRORS, stream_reply

if TYPE_CHECKING:
    from .chat_controller import ChatController


class ReplyStreams:
    def __init__(self, chat: ChatController) -> None:
        self.chat = chat                                 # the sessions, database and engines; its UI runs workers
        self.replies: dict[int, ChatMessage] = {}        # session id -> reply being generated
        self.workers: dict[int, object] = {}             # session id -> its Textual worker
        self.requests: dict[int, tuple] = {}             # session id -> (engine, request id) in flight

    def __contains__(self, session_id: int) -> bool:
        return session_id in self.replies

    def start(self, session: ChatSession, continue_from: ChatMessage | None = None,
              sent: ChatMessage | None = None) -> None:
        """sent: the user message this reply answers, when it was just typed (taken back if nothing comes)."""
        if continue_from is None:
            reply = ChatMessage("assistant", "", model=session.settings.model, adapter=session.settings.adapter)
            session.messages.append(reply)
        else:
            reply = continue_from
            reply.finish_reason = None
        self.replies[session.id] = reply
        self.workers[session.id] = self.chat.ui.run_worker(
            self._run(session, reply, continuing=continue_from is not None, sent=sent),
            group=f"session-{session.id}", exit_on_error=False)
        self.chat.ui.refresh_session_item(session.id)

    async def _run(self, session: ChatSession, reply: ChatMessage, continuing: bool,
                   sent: ChatMessage | None = None) -> None:
        chat, ui = self.chat, self.chat.ui
        try:
            await stream_reply(chat.engines, session, reply, continuing,
                               on_request=lambda engine, rid: self.requests.__setitem__(session.id, (engine, rid)))
        except NoChatTemplateError as exc:     # a base model: ask how to send (the message goes back to the input)
            reply.finish_reason, reply.error = "error", str(exc)
            if not ui.closing:
                ui.offer_chat_template(session, exc.suggested)
        except EXPECTED_ERRORS as exc:
            reply.finish_reason, reply.error = "error", str(exc)
            ui.notify(str(exc), title="Generation failed", severity="error", timeout=10)
        finally:
            self.replies.pop(session.id, None)
            self.workers.pop(session.id, None)
            self.requests.pop(session.id, None)
            if reply.finish_reason == "error" and not reply.content:
                if reply in session.messages:
                    session.messages.remove(reply)
                self.take_back(session, sent)
            elif reply in session.messages and session.id in chat.sessions:
                self.save(session.id, reply)
            if session.id in chat.sessions:
                ui.refresh_session_item(session.id)

    def take_back(self, session: ChatSession, sent: ChatMessage | None) -> None:
        """A send that got no reply leaves the chat as it was: the message leaves it and returns to the input
        (so the next prompt never holds two user turns in a row, and nothing typed is lost)."""
        if sent is None or not session.messages or session.messages[-1] is not sent:
            return
        session.messages.pop()
        if sent.id is not None:
            self.chat.db.delete_messages_from(session.id, sent.id)
        if session.id == self.chat.current_id and not self.chat.ui.closing:
            self.chat.ui.restore_prompt(sent.content)

    def save(self, session_id: int, reply: ChatMessage) -> None:
        db = self.chat.db
        db.update_message(reply) if reply.id is not None else db.add_message(session_id, reply)

    def save_streaming(self) -> None:
        """Every second: the text of each streaming reply so far, one statement each (a crash loses at most a
        second of it; at the next start it shows as interrupted)."""
        for session_id, reply in list(self.replies.items()):
            session = self.chat.sessions.get(session_id)
            if session is not None and reply.content and reply in session.messages:
                self.save(session_id, reply)

    def stop(self, session_id: int) -> None:
        """Abort in the engine (the stream then ends with "abort"); cancel if no request exists yet."""
        if session_id in self.requests:
            engine, request_id = self.requests[session_id]
            engine.abort(request_id)
        elif session_id in self.workers:
            self.workers[session_id].cancel()

    def cancel(self, session_id: int) -> None:
        """The session is going: its stream closes, which aborts the request in the engine."""
        worker = self.workers.get(session_id)
        if worker is not None:
            worker.cancel()
