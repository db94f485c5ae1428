"""SQLite storage for conversations (message trees), in WAL mode with one transaction per write.

Only the GUI thread touches the connection; every write is small (one message or one field),
so it never blocks long enough to matter.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.message_tree import MessageTree, StoredMessage, tool_calls_from_json, tool_calls_to_json
from engine.types import ToolCall

SCHEMA_VERSION = 2
# columns added after version 1 (ALTER TABLE on an older database): per-conversation chat
# controls (app.core.settings.GenerationDefaults as JSON; '' = the app's defaults) and the draft
_ADDED_COLUMNS = (("conversations", "generation", "TEXT NOT NULL DEFAULT ''"),
                  ("conversations", "draft", "TEXT NOT NULL DEFAULT ''"))

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    leaf_id TEXT,
    reasoning_effort TEXT NOT NULL DEFAULT 'medium',
    system_prompt TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id TEXT,
    role TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '',
    reasoning TEXT,
    tool_calls TEXT,
    tool_call_id TEXT,
    name TEXT,
    created REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id);
CREATE INDEX IF NOT EXISTS conversations_by_updated ON conversations(updated DESC);
"""


@dataclass(frozen=True)
class ConversationRecord:
    id: str
    title: str
    created: float
    updated: float
    leaf_id: str | None
    reasoning_effort: str
    system_prompt: str
    generation: dict[str, Any] | None = None  # the conversation's chat controls; None = app defaults
    draft: str = ""


class ConversationStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: autocommit; explicit BEGIN IMMEDIATE in _tx() makes each
        # write one transaction that other processes (a second app instance) see whole.
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=True)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=3000")
        with self._tx() as db:
            # executescript() would commit on its own; run the statements inside our transaction.
            for stmt in filter(str.strip, _SCHEMA.split(";")):
                db.execute(stmt)
            for table, col, decl in _ADDED_COLUMNS:
                have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
                if col not in have:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._seq = int(self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM messages").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def journal_mode(self) -> str:
        return str(self._db.execute("PRAGMA journal_mode").fetchone()[0])

    # ---- transactions -----------------------------------------------------------------
    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")
            return self.db

        def __exit__(self, exc_type: Any, *_: Any) -> None:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")

    def _tx(self) -> ConversationStore._Tx:
        return ConversationStore._Tx(self._db)

    # ---- conversations ----------------------------------------------------------------
    def create_conversation(self, title: str = "New chat", reasoning_effort: str = "medium",
                            system_prompt: str = "", generation: dict[str, Any] | None = None) -> str:
        cid = uuid.uuid4().hex
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO conversations(id, title, created, updated, reasoning_effort, system_prompt, generation) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)", (cid, title, now, now, reasoning_effort, system_prompt,
                                                 json.dumps(generation) if generation else ""))
        return cid

    @staticmethod
    def _record(r: sqlite3.Row) -> ConversationRecord:
        gen = None
        if r["generation"]:
            try:
                gen = json.loads(r["generation"])
            except ValueError:  # a damaged row falls back to the app's defaults
                gen = None
        return ConversationRecord(r["id"], r["title"], r["created"], r["updated"], r["leaf_id"],
                                  r["reasoning_effort"], r["system_prompt"], gen if isinstance(gen, dict) else None,
                                  r["draft"])

    def conversation(self, cid: str) -> ConversationRecord:
        row = self._db.execute("SELECT * FROM conversations WHERE id=?", (cid,)).fetchone()
        if row is None:
            raise KeyError(cid)
        return self._record(row)

    def set_generation(self, cid: str, generation: dict[str, Any]) -> None:
        """The conversation's chat controls (system prompt, sampling, effort, max tokens)."""
        with self._tx() as db:
            db.execute("UPDATE conversations SET generation=?, reasoning_effort=?, system_prompt=? WHERE id=?",
                       (json.dumps(generation), str(generation.get("reasoning_effort", "medium")),
                        str(generation.get("system_prompt", "")), cid))

    def set_draft(self, cid: str, text: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE conversations SET draft=? WHERE id=?", (text, cid))

    def list_conversations(self, search: str = "") -> list[ConversationRecord]:
        """Newest first; ``search`` matches titles and message text (case-insensitive)."""
        if search.strip():
            pat = "%" + search.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self._db.execute(
                "SELECT * FROM conversations c WHERE c.title LIKE ? ESCAPE '\\' OR EXISTS ("
                "SELECT 1 FROM messages m WHERE m.conversation_id=c.id AND m.content LIKE ? ESCAPE '\\') "
                "ORDER BY updated DESC", (pat, pat)).fetchall()
        else:
            rows = self._db.execute("SELECT * FROM conversations ORDER BY updated DESC").fetchall()
        return [self._record(r) for r in rows]

    def rename(self, cid: str, title: str) -> None:
        title = title.strip() or "Untitled"
        with self._tx() as db:
            db.execute("UPDATE conversations SET title=? WHERE id=?", (title, cid))

    def set_reasoning_effort(self, cid: str, effort: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE conversations SET reasoning_effort=? WHERE id=?", (effort, cid))

    def set_leaf(self, cid: str, leaf_id: str | None) -> None:
        with self._tx() as db:
            db.execute("UPDATE conversations SET leaf_id=? WHERE id=?", (leaf_id, cid))

    def delete(self, cid: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM messages WHERE conversation_id=?", (cid,))
            db.execute("DELETE FROM conversations WHERE id=?", (cid,))

    # ---- messages ---------------------------------------------------------------------
    def add_message(self, cid: str, parent_id: str | None, role: str, content: str = "", *,
                    reasoning: str | None = None, tool_calls: tuple[ToolCall, ...] = (),
                    meta: dict[str, Any] | None = None) -> StoredMessage:
        """Insert a message and make it the conversation's leaf, in one transaction."""
        now = time.time()
        self._seq += 1
        msg = StoredMessage(id=uuid.uuid4().hex, conversation_id=cid, parent_id=parent_id, role=role,
                            content=content, reasoning=reasoning, tool_calls=tool_calls, created=now,
                            seq=self._seq, meta=dict(meta or {}))
        with self._tx() as db:
            db.execute(
                "INSERT INTO messages(id, seq, conversation_id, parent_id, role, content, reasoning, tool_calls, "
                "created, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (msg.id, msg.seq, cid, parent_id, role, content, reasoning, tool_calls_to_json(tool_calls), now,
                 json.dumps(msg.meta)))
            db.execute("UPDATE conversations SET leaf_id=?, updated=? WHERE id=?", (msg.id, now, cid))
        return msg

    def update_message(self, msg_id: str, *, content: str, reasoning: str | None,
                       tool_calls: tuple[ToolCall, ...] = (), meta: dict[str, Any] | None = None) -> None:
        with self._tx() as db:
            db.execute("UPDATE messages SET content=?, reasoning=?, tool_calls=?, meta=? WHERE id=?",
                       (content, reasoning, tool_calls_to_json(tool_calls), json.dumps(meta or {}), msg_id))
            db.execute("UPDATE conversations SET updated=? WHERE id=(SELECT conversation_id FROM messages "
                       "WHERE id=?)", (time.time(), msg_id))

    def update_streaming(self, msg_id: str, content: str, reasoning: str | None) -> None:
        """The growing answer, saved as it streams (a crash keeps what was on screen): one row
        update in one WAL transaction, no metadata rewrite."""
        with self._tx() as db:
            db.execute("UPDATE messages SET content=?, reasoning=? WHERE id=?", (content, reasoning, msg_id))

    def delete_message(self, msg_id: str) -> None:
        """Remove a leaf message (an answer that never started); its parent becomes the leaf."""
        with self._tx() as db:
            row = db.execute("SELECT conversation_id, parent_id FROM messages WHERE id=?", (msg_id,)).fetchone()
            if row is None:
                return
            if db.execute("SELECT 1 FROM messages WHERE parent_id=?", (msg_id,)).fetchone():
                raise ValueError("only a message without replies can be deleted")
            db.execute("DELETE FROM messages WHERE id=?", (msg_id,))
            db.execute("UPDATE conversations SET leaf_id=? WHERE id=? AND leaf_id=?",
                       (row["parent_id"], row["conversation_id"], msg_id))

    def messages(self, cid: str) -> list[StoredMessage]:
        rows = self._db.execute("SELECT * FROM messages WHERE conversation_id=? ORDER BY seq", (cid,)).fetchall()
        return [StoredMessage(id=r["id"], conversation_id=r["conversation_id"], parent_id=r["parent_id"],
                              role=r["role"], content=r["content"], reasoning=r["reasoning"],
                              tool_calls=tool_calls_from_json(r["tool_calls"]), tool_call_id=r["tool_call_id"],
                              name=r["name"], created=r["created"], seq=r["seq"], meta=json.loads(r["meta"]))
                for r in rows]

    def tree(self, cid: str) -> MessageTree:
        return MessageTree(self.messages(cid))

    def thread(self, cid: str) -> list[StoredMessage]:
        """The visible branch: root to the remembered leaf."""
        return self.tree(cid).path_to(self.conversation(cid).leaf_id)
