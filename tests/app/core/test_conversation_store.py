"""Conversation storage: SQLite in WAL mode, one transaction per write, message trees that persist."""

from __future__ import annotations

import sqlite3

import pytest

from app.core.conversation_store import ConversationStore
from app.core.message_tree import MessageTree
from engine.types import ToolCall


def test_wal_and_roundtrip_across_reopen(tmp_path):
    db = tmp_path / "c.db"
    s = ConversationStore(db)
    assert s.journal_mode() == "wal"
    cid = s.create_conversation("Dates", reasoning_effort="high")
    u = s.add_message(cid, None, "user", "parse 2024-02-30?")
    call = ToolCall("call_1", "lookup", '{"q": 1}')
    a = s.add_message(cid, u.id, "assistant", "No.", reasoning="think", tool_calls=(call,), meta={"usage": {"x": 1}})
    s.close()
    s2 = ConversationStore(db)
    rec = s2.conversation(cid)
    assert (rec.title, rec.reasoning_effort, rec.leaf_id) == ("Dates", "high", a.id)
    thread = s2.thread(cid)
    assert [m.role for m in thread] == ["user", "assistant"]
    assert thread[1].reasoning == "think" and thread[1].tool_calls == (call,) and thread[1].meta == {"usage": {"x": 1}}
    assert thread[1].to_engine().tool_calls == (call,)


def test_failed_write_rolls_back(tmp_path):
    s = ConversationStore(tmp_path / "c.db")
    cid = s.create_conversation()
    before = s.conversation(cid).leaf_id
    # A bad parameter type fails the INSERT; the leaf update in the same transaction must not happen.
    with pytest.raises(sqlite3.Error):
        s.add_message(cid, None, "user", object())  # type: ignore[arg-type]
    assert s.conversation(cid).leaf_id == before
    assert s.messages(cid) == []


def test_search_rename_delete(tmp_path):
    s = ConversationStore(tmp_path / "c.db")
    a = s.create_conversation("Python dates")
    b = s.create_conversation("Rust lifetimes")
    s.add_message(b, None, "user", "what is 100% of a borrow_checker?")
    assert [c.id for c in s.list_conversations("dates")] == [a]
    assert [c.id for c in s.list_conversations("borrow_checker")] == [b]
    assert [c.id for c in s.list_conversations("100%")] == [b]  # LIKE wildcards are escaped
    assert s.list_conversations("1000%") == []
    s.rename(a, "  ISO dates  ")
    assert s.conversation(a).title == "ISO dates"
    s.delete(b)
    assert [c.id for c in s.list_conversations()] == [a]
    assert s.messages(b) == []
    with pytest.raises(KeyError):
        s.conversation(b)


def test_message_tree_branches(tmp_path):
    s = ConversationStore(tmp_path / "c.db")
    cid = s.create_conversation()
    u1 = s.add_message(cid, None, "user", "q")
    a1 = s.add_message(cid, u1.id, "assistant", "first")
    a2 = s.add_message(cid, u1.id, "assistant", "second")  # regenerate
    u2 = s.add_message(cid, a1.id, "user", "follow-up on first")
    u1b = s.add_message(cid, None, "user", "q edited")  # edit of the first message: a second root
    tree = s.tree(cid)
    assert isinstance(tree, MessageTree)
    assert [m.id for m in tree.siblings(a1.id)] == [a1.id, a2.id]
    assert tree.branch_info(a2.id).index == 1 and tree.branch_info(a2.id).count == 2
    assert tree.branch_info(u1b.id).count == 2
    # leaf is the newest message; switching from the edited root back to the first shows its newest branch
    assert [m.id for m in s.thread(cid)] == [u1b.id]
    assert tree.switched_leaf(u1b.id, -1) == a2.id  # newest child of u1
    assert tree.switched_leaf(a2.id, -1) == u2.id  # first answer's branch continues with its follow-up
    assert tree.switched_leaf(a1.id, -5) == u2.id  # clamped
    assert [m.id for m in tree.path_to(u2.id)] == [u1.id, a1.id, u2.id]
    assert set(tree.descendants(u1.id)) == {u1.id, a1.id, a2.id, u2.id}
