"""Sessions and messages in SQLite (stdlib sqlite3), schema versioned with PRAGMA user_version.

Every change is committed at once (autocommit + WAL), so a crash loses at most the reply being generated.
A session's settings are one JSON document (SessionSettings): a field added there needs no migration, as
rows written before it load with its default.
"""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import asdict
from pathlib import Path

from .chat_state import ChatMessage, ChatSession, ReplyStats, SessionSettings

# Each entry moves the schema from version i to i + 1. Append only; never edit a shipped migration.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE sessions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        settings TEXT NOT NULL DEFAULT '{}'
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created REAL NOT NULL,
        finish_reason TEXT,
        stats TEXT
    );
    CREATE INDEX messages_by_session ON messages(session_id, id);
    """,
    """
    ALTER TABLE messages ADD COLUMN model TEXT NOT NULL DEFAULT '';
    ALTER TABLE messages ADD COLUMN adapter TEXT;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


class ChatDatabase:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.migrate()

    @property
    def version(self) -> int:
        return self.conn.execute("PRAGMA user_version").fetchone()[0]

    def migrate(self) -> None:
        current = self.version
        if current > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path} was written by a newer llmchat (schema {current}); upgrade llmchat")
        for version in range(current, SCHEMA_VERSION):
            self.conn.executescript(f"BEGIN; {MIGRATIONS[version]} PRAGMA user_version = {version + 1}; COMMIT;")

    def close(self) -> None:
        self.conn.close()

    # sessions
    def create_session(self, title: str, settings: SessionSettings) -> ChatSession:
        now = time.time()
        cur = self.conn.execute("INSERT INTO sessions (title, created, updated, settings) VALUES (?, ?, ?, ?)",
                                (title, now, now, json.dumps(settings.to_dict())))
        return ChatSession(id=cur.lastrowid, title=title, settings=settings)

    def rename_session(self, session_id: int, title: str) -> None:
        self.conn.execute("UPDATE sessions SET title = ?, updated = ? WHERE id = ?", (title, time.time(), session_id))

    def save_settings(self, session_id: int, settings: SessionSettings) -> None:
        self.conn.execute("UPDATE sessions SET settings = ?, updated = ? WHERE id = ?",
                          (json.dumps(settings.to_dict()), time.time(), session_id))

    def delete_session(self, session_id: int) -> None:
        self.conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    def load_sessions(self) -> list[ChatSession]:
        sessions = []
        for row in self.conn.execute("SELECT * FROM sessions ORDER BY id").fetchall():
            session = ChatSession(id=row["id"], title=row["title"],
                                  settings=SessionSettings.from_dict(json.loads(row["settings"])))
            session.messages = self.load_messages(session.id)
            sessions.append(session)
        return sessions

    # messages
    def add_message(self, session_id: int, message: ChatMessage) -> ChatMessage:
        stats = json.dumps(asdict(message.stats)) if message.stats else None
        cur = self.conn.execute(
            "INSERT INTO messages (session_id, role, content, created, finish_reason, stats, model, adapter)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, message.role, message.content, time.time(), message.finish_reason, stats,
             message.model, message.adapter))
        message.id = cur.lastrowid
        self.conn.execute("UPDATE sessions SET updated = ? WHERE id = ?", (time.time(), session_id))
        return message

    def update_message(self, message: ChatMessage) -> None:
        stats = json.dumps(asdict(message.stats)) if message.stats else None
        self.conn.execute("UPDATE messages SET content = ?, finish_reason = ?, stats = ? WHERE id = ?",
                          (message.content, message.finish_reason, stats, message.id))

    def delete_messages_from(self, session_id: int, message_id: int) -> None:
        """Drop a message and everything after it (edit-and-resend, regenerate)."""
        self.conn.execute("DELETE FROM messages WHERE session_id = ? AND id >= ?", (session_id, message_id))

    def load_messages(self, session_id: int) -> list[ChatMessage]:
        rows = self.conn.execute("SELECT * FROM messages WHERE session_id = ? ORDER BY id", (session_id,))
        # A reply is saved while it streams with no finish reason: one still without it was cut by a crash.
        return [ChatMessage(role=r["role"], content=r["content"], id=r["id"],
                            finish_reason=r["finish_reason"] or ("interrupted" if r["role"] == "assistant" else None),
                            stats=ReplyStats(**json.loads(r["stats"])) if r["stats"] else None,
                            model=r["model"], adapter=r["adapter"]) for r in rows.fetchall()]
