"""SQLite chats (migrations, writes as things happen), TOML settings (malformed files), export."""
from __future__ import annotations

import json
import sqlite3

import pytest

from llmchat.tui.app.chat_state import ChatMessage, ReplyStats, SessionSettings
from llmchat.tui.app.db import MIGRATIONS, SCHEMA_VERSION, ChatDatabase
from llmchat.tui.app.export import export_session, session_to_json, session_to_markdown
from llmchat.tui.settings import Settings, SettingsStore


def test_new_database_gets_latest_schema(tmp_path):
    db = ChatDatabase(tmp_path / "chats.sqlite3")
    assert db.version == SCHEMA_VERSION == len(MIGRATIONS)
    columns = {row[1] for row in db.conn.execute("PRAGMA table_info(messages)")}
    assert {"model", "adapter", "finish_reason", "stats"} <= columns


def test_version_1_database_is_migrated_keeping_its_rows(tmp_path):
    path = tmp_path / "chats.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0] + "PRAGMA user_version = 1;")
    conn.execute("INSERT INTO sessions (title, created, updated, settings) VALUES ('old', 0, 0, '{}')")
    conn.execute("INSERT INTO messages (session_id, role, content, created) VALUES (1, 'user', 'hi', 0)")
    conn.commit()
    conn.close()
    db = ChatDatabase(path)
    assert db.version == SCHEMA_VERSION
    [session] = db.load_sessions()
    assert session.title == "old" and session.messages[0].content == "hi" and session.messages[0].model == ""


def test_database_from_a_newer_llmchat_is_refused(tmp_path):
    path = tmp_path / "chats.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="newer llmchat"):
        ChatDatabase(path)


def test_writes_are_visible_to_another_connection_at_once(tmp_path):
    """Autocommit: what the app wrote survives a kill (another reader sees it before close)."""
    db = ChatDatabase(tmp_path / "chats.sqlite3")
    session = db.create_session("t", SessionSettings(model="m", temperature=0.5))
    db.add_message(session.id, ChatMessage("user", "question"))
    reply = db.add_message(session.id, ChatMessage("assistant", "part", finish_reason="abort",
                                                   stats=ReplyStats(ttft=0.1, num_generated_tokens=3)))
    reply.content, reply.finish_reason = "part and more", "stop"
    db.update_message(reply)
    [loaded] = ChatDatabase(tmp_path / "chats.sqlite3").load_sessions()
    assert loaded.settings.temperature == 0.5
    assert [(m.role, m.content, m.finish_reason) for m in loaded.messages] == [
        ("user", "question", None), ("assistant", "part and more", "stop")]
    assert loaded.messages[1].stats.num_generated_tokens == 3


def test_delete_messages_from_drops_the_tail_and_delete_session_cascades(tmp_path):
    db = ChatDatabase(tmp_path / "chats.sqlite3")
    session = db.create_session("t", SessionSettings())
    ids = [db.add_message(session.id, ChatMessage("user", str(i))).id for i in range(4)]
    db.delete_messages_from(session.id, ids[2])
    assert [m.content for m in db.load_messages(session.id)] == ["0", "1"]
    db.delete_session(session.id)
    assert db.load_sessions() == []
    assert db.conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0


def test_settings_round_trip(tmp_path):
    store = SettingsStore(tmp_path / "settings.toml")
    assert store.load() == Settings() and store.problem is None
    store.save(Settings(default_model="tiny", memory_budget_gb=2.5))
    assert store.load().default_model == "tiny" and store.load().memory_budget_gb == 2.5


@pytest.mark.parametrize("text, reason", [
    ("memory_budget_gb = [oops", "not valid TOML"),            # not TOML
    ("memory_budget_gb = 'lots'", "wrong type"),         # wrong type
    ("colour = 'red'", "unknown setting"),               # unknown key
    ("kv_cache_gb = -1.0", "must be positive"),
])
def test_malformed_settings_give_defaults_a_notice_and_are_never_overwritten(tmp_path, text, reason):
    path = tmp_path / "settings.toml"
    path.write_text(text)
    store = SettingsStore(path)
    assert store.load() == Settings()
    assert store.problem is not None and reason in store.problem and str(path) in store.problem
    with pytest.raises(ValueError, match="not saved"):
        store.save(Settings(default_model="x"))
    assert path.read_text() == text


def test_export_markdown_and_json(tmp_path):
    db = ChatDatabase(tmp_path / "chats.sqlite3")
    session = db.create_session("My chat: code?", SessionSettings(model="/m/tiny", system_prompt="Be brief."))
    session.messages = [ChatMessage("user", "Write code"),
                        ChatMessage("assistant", "```python\nprint(1)\n```", finish_reason="stop", model="/m/tiny",
                                    stats=ReplyStats(ttft=0.25, tokens_per_s=40.0, num_generated_tokens=7,
                                                     num_prompt_tokens=12, num_cached_tokens=8))]
    md_text = session_to_markdown(session)
    assert md_text.startswith("# My chat: code?") and "**System:** Be brief." in md_text
    assert "## Assistant" in md_text and "TTFT 250 ms · 40.0 tok/s · 7 tokens · 8/12" in md_text
    data = json.loads(session_to_json(session))
    assert data["settings"]["system_prompt"] == "Be brief."
    assert data["messages"][1]["stats"]["num_cached_tokens"] == 8
    md, js = export_session(session, tmp_path)
    assert md.name == f"my-chat-code-{session.id}.md" and js.read_text() == session_to_json(session)


def test_reply_stats_keep_what_guessing_did_and_older_rows_still_load(tmp_path):
    db = ChatDatabase(tmp_path / "chats.sqlite3")
    session = db.create_session("spec", SessionSettings())
    stats = ReplyStats(ttft=0.1, tokens_per_s=30.0, num_generated_tokens=50, guessed_tokens=40, accepted_guesses=31)
    db.add_message(session.id, ChatMessage("assistant", "x" * 50, finish_reason="stop", stats=stats))
    old = ReplyStats(num_generated_tokens=3)
    db.conn.execute("INSERT INTO messages (session_id, role, content, created, stats) VALUES (?, 'assistant', 'y', 0, ?)",
                    (session.id, json.dumps({"num_generated_tokens": 3})))   # written before the fields existed
    db.conn.commit()
    [loaded] = [s for s in db.load_sessions() if s.id == session.id]
    assert loaded.messages[0].stats == stats and "31/40 guesses held" in loaded.messages[0].stats.line()
    assert loaded.messages[1].stats == old and "guesses" not in old.line()
