"""Purge (G3's one exception): a whole session erased in one transaction, forks kept whole."""

from __future__ import annotations

import pytest

import journal
from tests.raw import Raw, Refused


def _session_with_history(j: journal.Journal, sid: str) -> str:
    s = j.create_session(sid).id
    j.append(s, "user_message", {"content": "my secret"})
    with j.turn(s) as turn, turn.step():
        turn.assistant("", tool_calls=[{"id": f"{sid}-c", "name": "t", "arguments": {}}])
        turn.dispatch(f"{sid}-c").result("done")
    j.save_chunk(s, "k", 0, "chunk")
    return s


def _rows(db_path, session_id: str) -> dict[str, int]:
    with Raw(db_path) as conn:
        return {
            table: conn.value(f"SELECT count(*) FROM {table} WHERE session_id = ?", (session_id,))
            for table in ("events", "turn_journal", "tool_calls", "stream_chunks", "submissions", "notifications")
        }


def test_g3_purge_erases_the_session_and_its_derived_state_in_one_transaction(
    j: journal.Journal, db_path, fresh
) -> None:
    s = _session_with_history(j, "secret")
    other = _session_with_history(j, "other")
    result = j.purge(s)
    assert (result.session_id, result.events_deleted, result.forks_copied) == (s, 8, ())
    assert set(_rows(db_path, s).values()) == {0}
    with pytest.raises(journal.SessionNotFound):
        fresh().session(s)
    assert fresh().count(other) == 8 and fresh().check() == []
    assert j.create_session(s).count == 0  # the id is free again


def test_g3_raw_deletes_stay_refused_for_sessions_not_being_purged(j: journal.Journal, db_path) -> None:
    _session_with_history(j, "keep")
    j.purge(_session_with_history(j, "gone"))
    with Raw(db_path) as conn, pytest.raises(Refused):
        conn.execute("DELETE FROM events WHERE session_id = 'keep'")
    assert j.count("keep") == 8


def test_purging_a_session_that_forks_read_through_is_refused_and_writes_nothing(j: journal.Journal) -> None:
    s = _session_with_history(j, "parent")
    j.fork(s, id="child")
    with pytest.raises(journal.SessionHasForks) as info:
        j.purge(s)
    assert info.value.fork_ids == ("child",)
    assert j.count(s) == 8 and j.count("child") == 8


def test_copy_forks_gives_each_fork_its_own_copy_first(j: journal.Journal, fresh) -> None:
    s = _session_with_history(j, "parent")
    j.fork(s, at=0, id="early")  # inherits only the first message
    j.append("early", "user_message", {"content": "early fork"})
    before = j.events("early")
    j.append(s, "user_message", {"content": "parent only"})
    j.fork(s, id="late")
    j.fork("late", id="grandchild")
    j.append("late", "user_message", {"content": "late fork"})
    expected = {sid: j.events(sid) for sid in ("early", "late", "grandchild")}
    result = j.purge(s, copy_forks=True)
    assert result.forks_copied == ("early", "late")
    reopened = fresh()
    for sid, events in expected.items():
        assert reopened.events(sid) == events
    assert reopened.events("early") == before
    assert reopened.session("late").parent_id is None and reopened.session("grandchild").parent_id == "late"
    assert reopened.check() == [] and reopened.scan().clean
    again = reopened.put_result("late", "parent-c", "second")  # first write wins still holds
    assert not again.won


def test_a_fork_that_inherited_nothing_survives_its_parents_purge(j: journal.Journal) -> None:
    s = j.create_session("empty-parent").id
    j.fork(s, id="empty-fork")
    j.append("empty-fork", "user_message", {"content": "hi"})
    j.purge(s)
    assert [e.data["content"] for e in j.events("empty-fork")] == ["hi"]


def test_purging_a_fork_leaves_its_parent_untouched(j: journal.Journal) -> None:
    s = _session_with_history(j, "parent")
    j.fork(s, id="child")
    j.append("child", "user_message", {"content": "mine"})
    j.purge("child")
    assert j.count(s) == 8 and j.check() == []


def test_purging_an_unknown_session_is_session_not_found(j: journal.Journal) -> None:
    with pytest.raises(journal.SessionNotFound):
        j.purge("nope")
