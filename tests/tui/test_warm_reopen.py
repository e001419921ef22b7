"""A chat reopened after the app restarts is warm: its earlier turns' KV blocks come back from the disk tier
(engine/kv_disk.py) instead of being computed, and the reply's stats line says how many prompt tokens did."""
from __future__ import annotations

from helpers import last_stats_line, open_with_model, reply_done, send, set_session, wait_until

from llmchat.tui.app import LlmChatApp

SIZE = (140, 40)
LONG = "Summarize this list: " + ", ".join(f"entry {i}" for i in range(40))


async def test_a_reopened_chat_reads_its_prompt_from_disk(dirs, chat_model, monkeypatch, tmp_path):
    monkeypatch.setenv("LLMCHAT_KV_DISK", "1")                   # the default a user has (tests turn it off)
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(tmp_path / "cache"))
    app = LlmChatApp(model=str(chat_model), show_welcome=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_with_model(pilot, app)
        set_session(app, max_tokens=8)
        await send(pilot, LONG)
        await wait_until(pilot, lambda: reply_done(app), what="first reply")
        first = app.main_screen.current.messages[-1].stats
    assert first.num_disk_cached_tokens == 0
    again = LlmChatApp(show_welcome=False)
    async with again.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: again.main_screen.current.messages, what="the chat reopened")
        await send(pilot, "And the last one?")
        await wait_until(pilot, lambda: reply_done(again) and len(again.main_screen.current.messages) == 4,
                         what="second reply")
        stats = again.main_screen.current.messages[-1].stats
        # the view shows a finished reply's stats at its next frame: wait for them, not for any status text
        # (right after the reply ends it can still read "waiting for the first token…")
        await wait_until(pilot, lambda: stats.line() in last_stats_line(again), what="the reply's stats line")
        line = last_stats_line(again)
    # the first turn (prompt and reply) was computed by the other app: now read, not computed
    assert stats.num_disk_cached_tokens >= first.num_prompt_tokens // 16 * 16 > 0
    assert stats.num_cached_tokens == stats.num_disk_cached_tokens
    assert f"({stats.num_disk_cached_tokens} from disk)" in line
