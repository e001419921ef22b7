"""Chat flows against the real engine on tiny models: stream, regenerate, stop, continue, edit, concurrency."""
from __future__ import annotations

import threading

from helpers import last_stats_line, notices, open_with_model, press, reply_done, send, set_session, wait_until

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.widgets.chat_view import ChatView
from llmchat.tui.app.widgets.engine_panel import EnginePanel
from llmchat.tui.app.widgets.message_view import MessageView
from llmchat.tui.app.widgets.prompt_input import PromptInput
from llmchat.tui.app.widgets.sidebar import Sidebar

SIZE = (140, 40)


def hold_steps_until_requests(llm_engine, count: int) -> None:
    """The engine thread idles (steps do no work) until `count` requests were added, then runs as usual.

    The real engine runs; only its start waits, so requests sent one after another through the UI are
    certain to stream together even when a loaded machine delays the later sends past the first reply."""
    step = llm_engine.step
    arrived = threading.Event()

    def held_step():
        if not arrived.is_set():
            if len(llm_engine.requests) < count:
                arrived.wait(0.01)    # back to the engine loop, which adds the commands that came meanwhile
                return []
            arrived.set()
        return step()
    llm_engine.step = held_step


def hold_first_reply_at(llm_engine, tokens: int) -> None:
    """The first request's reply stops growing at `tokens` tokens (its steps do no work) until it is aborted;
    other requests run as usual. A stop pressed on a loaded machine then always lands at that length, far
    from the context's end, so a continuation never runs into it."""
    step = llm_engine.step
    first: list[str] = []
    idle = threading.Event()     # never set: its wait hands the engine loop back for the abort to come

    def held_step():
        if not first and llm_engine.requests:
            first.append(next(iter(llm_engine.requests)))
        seq = llm_engine.requests.get(first[0]) if first else None
        if seq is not None and seq.num_output_tokens >= tokens:
            idle.wait(0.01)
            return []
        return step()
    llm_engine.step = held_step


async def test_reply_streams_with_stats_and_regenerate_is_deterministic(dirs, chat_model):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await send(pilot, "hello", typed=True)
        await wait_until(pilot, lambda: reply_done(app), what="first reply")
        session = app.main_screen.current
        first = session.messages[-1]
        assert first.finish_reason in ("stop", "context") and first.content
        assert first.stats.num_prompt_tokens > 0 and first.stats.ttft is not None
        assert session.title == "hello"                      # titled from the first message
        await wait_until(pilot, lambda: "TTFT" in last_stats_line(app), what="stats line")
        # the engine panel saw the KV cache of the loaded model
        panel = app.query_one(EnginePanel)
        await wait_until(pilot, lambda: "/0 blocks" not in str(panel.query_one("#engine-kv-blocks").render()),
                         what="engine panel KV blocks")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: reply_done(app) and session.messages[-1] is not first, what="regenerated")
        assert [m.role for m in session.messages] == ["user", "assistant"]
        assert session.messages[-1].content == first.content          # greedy tiny model: same reply
        # the second request found the prompt in the prefix cache
        assert session.messages[-1].stats.num_cached_tokens > 0
        rows = app.db.load_messages(session.id)
        assert [(r.role, r.content) for r in rows] == [("user", "hello"), ("assistant", first.content)]


async def test_three_sessions_stream_at_once_and_switching_keeps_them_going(dirs, long_model):
    app = LlmChatApp(model=str(long_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        ids = [app.main_screen.current_id]
        for i in range(2):
            await press(pilot, "ctrl+n", until=lambda: len(app.main_screen.sessions) == i + 2 and app.main_screen.current_id == max(app.main_screen.sessions))
            ids.append(app.main_screen.current_id)
        for session_id in ids:
            app.main_screen.sessions[session_id].settings.max_tokens = 450
        engine = next(iter(app.engines.loaded.values())).engine
        hold_steps_until_requests(engine.engine, 3)   # the replies overlap however slowly the sends arrive
        for n, session_id in enumerate(ids):
            await app.main_screen.switch_to(session_id)
            await send(pilot, f"question {n}")
        await wait_until(pilot, lambda: engine.metrics().num_running + engine.metrics().num_waiting == 3, what="3 requests in the engine together")
        assert set(app.main_screen.replies) == set(ids)
        assert all(app.query_one(Sidebar).item(i).generating for i in ids)
        # switch to the first session while all stream: its reply keeps growing on screen
        await press(pilot, "ctrl+up", "ctrl+up", until=lambda: app.main_screen.current_id == ids[0])
        view = app.query_one(ChatView).message_views()[-1]
        seen = len(view.shown)
        await wait_until(pilot, lambda: len(view.shown) > seen or reply_done(app, ids[0]), what="visible stream")
        # typing stays possible while the engine streams
        await press(pilot, "o", "k", until=lambda: app.query_one(PromptInput).text == "ok", what="typing")
        for session_id in ids:
            await wait_until(pilot, lambda: reply_done(app, session_id), what=f"reply of session {session_id}")
            reply = app.main_screen.sessions[session_id].messages[-1]
            assert reply.finish_reason == "length" and reply.stats.num_generated_tokens == 450
        assert not any(app.query_one(Sidebar).item(i).generating for i in ids)


async def test_stop_aborts_in_the_engine_then_continue_extends_the_reply(dirs, long_model):
    app = LlmChatApp(model=str(long_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        engine = next(iter(app.engines.loaded.values())).engine
        hold_first_reply_at(engine.engine, 40)
        set_session(app, max_tokens=450)
        await send(pilot, "tell me everything")
        session = app.main_screen.current
        await wait_until(pilot, lambda: len(session.messages) == 2 and len(session.messages[-1].content) > 5,
                         what="streaming started")
        await press(pilot, "escape", until=lambda: reply_done(app), what="stopped")
        reply = session.messages[-1]
        # held at 40 at most (a step with accepted guesses may pass it by up to 15)
        assert reply.finish_reason == "abort" and 0 < reply.stats.num_generated_tokens < 56
        await wait_until(pilot, lambda: engine.metrics().num_running == 0, what="engine idle after abort")
        assert app.db.load_messages(session.id)[-1].finish_reason == "abort"   # the partial reply is kept
        stopped_text = reply.content
        set_session(app, max_tokens=10)
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: reply_done(app) and reply.finish_reason == "length", what="continued")
        assert reply.content.startswith(stopped_text) and len(reply.content) > len(stopped_text)
        assert len(session.messages) == 2
        assert app.db.load_messages(session.id)[-1].content == reply.content
        await pilot.press("ctrl+o")     # a complete... (length) reply can be continued again; a stopped one too
        await wait_until(pilot, lambda: reply_done(app), what="continued twice")


async def test_copy_a_reply_and_its_code_then_edit_a_user_message_and_resend(dirs, chat_model):
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        await send(pilot, "hello")
        await wait_until(pilot, lambda: reply_done(app))
        await send(pilot, "two")
        await wait_until(pilot, lambda: reply_done(app) and len(app.main_screen.current.messages) == 4)
        chat = app.query_one(ChatView)
        await wait_until(pilot, lambda: len(chat.message_views()) == 4, what="4 messages shown")
        first_user = chat.message_views()[0]
        assert isinstance(first_user, MessageView) and first_user.message.content == "hello"
        reply_view = chat.message_views()[1]
        reply_view.focus()
        await wait_until(pilot, lambda: app.focused is reply_view, what="reply focused")
        await pilot.press("c")                                  # copy a message
        assert app.clipboard == reply_view.message.content
        reply_view.message.content += "\n```python\nprint(1)\n```"
        await pilot.press("y")                                  # copy its code block
        assert app.clipboard == "print(1)"
        first_user.focus()
        await wait_until(pilot, lambda: app.focused is first_user, what="message focused")
        await pilot.press("e")
        prompt = app.query_one(PromptInput)
        assert prompt.text == "hello" and app.main_screen.editing is first_user.message
        prompt.load_text("one")
        await pilot.press("enter")
        await wait_until(pilot, lambda: reply_done(app) and app.main_screen.current.messages[0].content == "one")
        assert [m.role for m in app.main_screen.current.messages] == ["user", "assistant"]
        assert [m.content for m in app.db.load_messages(app.main_screen.current_id)][0] == "one"
        assert len(app.db.load_messages(app.main_screen.current_id)) == 2


async def test_sending_without_a_model_explains_what_to_do(dirs):
    app = LlmChatApp(show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("h", "i", "enter")
        await wait_until(pilot, lambda: any("Choose a model first" in n for n in notices(app)), what="notice")
        assert app.main_screen.current.messages == []


async def test_deleting_a_generating_session_aborts_its_request(dirs, long_model):
    app = LlmChatApp(model=str(long_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        set_session(app, max_tokens=450)
        await send(pilot, "long answer please")
        doomed = app.main_screen.current_id
        engine = next(iter(app.engines.loaded.values())).engine
        await wait_until(pilot, lambda: engine.metrics().num_running == 1, what="running")
        await press(pilot, "f8", until=lambda: type(app.screen).__name__ == "Confirm", what="confirm dialog")
        await press(pilot, "y", until=lambda: app.main_screen.current_id not in (None, doomed),
                    what="deleted, a fresh session opened")
        await wait_until(pilot, lambda: engine.metrics().num_running == 0 and not app.main_screen.replies, what="aborted")
        assert [s.id for s in app.db.load_sessions()] == [app.main_screen.current_id] and app.main_screen.current_id != doomed
        assert app.db.conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (doomed,)).fetchone()[0] == 0
