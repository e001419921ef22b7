"""Sessions on a remote model: a real `llmchat serve` on 127.0.0.1 as the endpoint (settings.toml
[[endpoints]]), driven through the app like a local model; an endpoint that is down at start and one
killed mid-reply leave a clear message and the chat intact."""
from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
from pathlib import Path

import pytest
import tomli_w
from conftest import TEST_SETTINGS
from helpers import notices, press, reply_done, send, set_session, wait_until
from textual.widgets import DataTable, Label, TabbedContent

from llmchat.engine import LLM, SamplingParams
from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.screens.models_screen import ModelsScreen
from llmchat.tui.app.screens.session_settings import SessionSettingsScreen
from llmchat.tui.app.widgets.engine_panel import EnginePanel
from llmchat.tui.app.widgets.prompt_input import PromptInput

sys.path.insert(0, str(Path(__file__).parent.parent / "server"))
from server_helpers import ThreadServer, cli_server, serve_settings, wait_healthy  # noqa: E402

from llmchat.engine.serve.state import ModelSpec  # noqa: E402

SIZE = (140, 40)


@pytest.fixture(scope="module")
def lab(chat_model, long_model):
    """"tiny" stops on its own; "long" never produces EOS (runs to max_tokens: stop and continue)."""
    specs = [ModelSpec("tiny", chat_model, []), ModelSpec("long", long_model, [])]
    with ThreadServer(specs, serve_settings()) as server:
        yield server


class StreamHoldingProxy:
    """A TCP proxy to `target` that passes everything except the tail of an event stream: after an SSE
    response's first HOLD_AFTER bytes it holds what the server sends, and when the server goes away it drops the
    client's connection without it. A reply killed "mid-reply" then is one on any machine, however fast the
    server ran to the end of a tiny model's context while the app was still showing the first tokens."""
    HOLD_AFTER = 4096

    def __init__(self, target: str):
        host, port = target.split("//", 1)[1].split("/", 1)[0].split(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self.listener.close()
        for sock in self.sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return   # closed
            try:
                server = socket.create_connection(self.target)
            except OSError:   # the server is gone: so is this connection
                client.close()
                continue
            self.sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, holds: bool) -> None:
        passed = None   # bytes of the event stream passed so far; None before one starts
        try:
            while chunk := source.recv(65536):
                if holds and passed is None and b"text/event-stream" in chunk:
                    passed = 0
                if passed is not None:
                    chunk = chunk[:max(0, self.HOLD_AFTER - passed)]
                    passed += len(chunk)
                sink.sendall(chunk)
        except OSError:
            pass
        if holds:   # the server is gone: so is the client's connection (shutdown also wakes the other pipe)
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_RDWR)


def with_endpoints(dirs, **endpoints) -> None:
    entries = [{"name": name, "base_url": url} for name, url in endpoints.items()]
    (dirs["config"] / "settings.toml").write_text(tomli_w.dumps({**TEST_SETTINGS, "endpoints": entries}))


def panel_text(app) -> str:
    return str(app.query_one(EnginePanel).query_one("#engine-models").render())


async def test_remote_session_streams_regenerates_stops_and_continues(dirs, chat_model, lab):
    with_endpoints(dirs, lab=lab.base_url)
    local = LLM(chat_model, attention_backend="torch", kv_cache_gb=0.03).generate(
        [[{"role": "user", "content": "hello"}]], SamplingParams())[0].text   # no max, as the session
    app = LlmChatApp(model="remote:lab/tiny", show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app), what="remote reply")
        session = app.main_screen.current
        first = session.messages[-1]
        assert first.finish_reason in ("stop", "length") and first.content == local   # the same model, greedy
        assert first.stats.num_prompt_tokens > 0 and first.stats.ttft is not None
        assert first.stats.server_tokens_per_s and "server" in first.stats.line()
        assert first.model == "remote:lab/tiny" and not app.engines.loaded       # nothing loaded locally
        await app.engines.remote.refresh_health()
        app.main_screen.poll_metrics()
        assert "lab/tiny · up" in panel_text(app)

        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: reply_done(app) and session.messages[-1] is not first, what="regenerated")
        assert session.messages[-1].content == first.content
        assert session.messages[-1].stats.num_cached_tokens > 0                  # the server's prefix cache

        set_session(app, model="remote:lab/long", max_tokens=3000)
        await send(pilot, "go on and on")
        reply = session.messages[-1]
        await wait_until(pilot, lambda: reply.role == "assistant" and len(reply.content) > 5, what="streaming")
        await press(pilot, "escape", until=lambda: reply_done(app), what="stopped")
        assert reply.finish_reason == "abort"
        stopped = reply.content
        set_session(app, max_tokens=6)
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: reply_done(app) and reply.finish_reason == "length", what="continued")
        assert reply.content.startswith(stopped) and len(reply.content) > len(stopped)
        rows = app.db.load_messages(session.id)
        assert [r.role for r in rows] == ["user", "assistant"] * 2 and rows[-1].content == reply.content
        await wait_until(pilot, lambda: lab.engine("long").metrics().num_running == 0, what="server side aborted")


async def test_models_screen_and_settings_list_remote_models(dirs, chat_model, lab):
    with_endpoints(dirs, lab=lab.base_url)
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.main_screen.remote_names == ["remote:lab/tiny", "remote:lab/long"],
                         what="remote models asked")
        await pilot.press("f4")
        screen = app.screen
        assert isinstance(screen, ModelsScreen)
        screen.query_one(TabbedContent).active = "remote"
        table = screen.query_one("#remote-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == 2, what="remote table")
        assert [str(c) for c in table.get_row_at(0)] == ["tiny", "lab", lab.base_url + "/v1", "remote"]
        table.focus()
        table.move_cursor(row=0)
        await press(pilot, "enter", until=lambda: not isinstance(app.screen, ModelsScreen), what="model chosen")
        assert app.main_screen.current.settings.model == "remote:lab/tiny"
        await pilot.press("f3")
        await wait_until(pilot, lambda: isinstance(app.screen, SessionSettingsScreen), what="settings")
        assert "remote:lab/tiny" in str(app.screen.query_one("#remote-models", Label).render())


async def test_endpoint_down_at_start_fails_only_its_session(dirs, chat_model, closed_port_url):
    with_endpoints(dirs, gone=closed_port_url)
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: any("cannot reach gone" in n for n in notices(app)), what="start notice")
        local_id = app.main_screen.current_id
        await press(pilot, "ctrl+n", until=lambda: app.main_screen.current_id != local_id, what="new session")
        set_session(app, model="remote:gone/tiny")
        await send(pilot, "are you there?")
        await wait_until(pilot, lambda: app.main_screen.current.id not in app.main_screen.replies and
                         any("Generation failed" == n.title for n in app._notifications), what="failure")
        remote = app.main_screen.current
        assert remote.messages == [] and app.db.load_messages(remote.id) == []  # the chat is as it was
        assert app.query_one(PromptInput).text == "are you there?"              # and the message back in the input
        app.query_one(PromptInput).clear()
        await app.engines.remote.refresh_health()
        app.main_screen.poll_metrics()
        assert "gone/tiny · down" in panel_text(app)
        await app.main_screen.switch_to(local_id)                                           # the local session works
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app, local_id), what="local reply")
        assert app.main_screen.sessions[local_id].messages[-1].content


async def test_server_killed_mid_reply_keeps_the_partial_reply(dirs, long_model):
    with cli_server([str(long_model), "--kv-cache-gb", "0.05", "--attention", "torch"]) as (proc, url), \
            StreamHoldingProxy(url) as proxy:
        wait_healthy(proc, url)
        with_endpoints(dirs, box=proxy.url)
        app = LlmChatApp(model=f"remote:box/{long_model.name}", show_welcome=False)
        async with app.run_test(size=SIZE) as pilot:
            set_session(app, max_tokens=3000)
            await send(pilot, "tell me everything")
            session = app.main_screen.current
            await wait_until(pilot, lambda: len(session.messages) == 2 and len(session.messages[-1].content) > 5,
                             what="streaming")
            proc.send_signal(signal.SIGKILL)   # the reply's end is still held in the proxy: it never arrives
            await wait_until(pilot, lambda: session.id not in app.main_screen.replies, what="reply ended")
            reply = session.messages[-1]
            assert reply.role == "assistant" and reply.finish_reason == "error" and len(reply.content) > 5
            assert "broke mid-reply" in reply.error or "ended the reply" in reply.error    # shown under the reply
            assert app.db.load_messages(session.id)[-1].content == reply.content   # saved, not lost