"""The one transaction skeleton above both stores (``journal.store.base.Transactions``): G1 and
G2 as the skeleton keeps them, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import journal
from journal import crash
from journal.store.base import Transactions
from journal.store.postgres import PostgresStore
from journal.store.sqlite import SqliteStore


class Boom(Exception):
    pass


def _raise_at(point: str):
    def observer(name: str) -> None:
        if name == point:
            raise Boom(name)

    return observer


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def test_the_transaction_skeleton_is_written_once_above_both_stores() -> None:
    for store in (SqliteStore, PostgresStore):
        assert issubclass(store, Transactions)
        assert not {"write", "write_one", "batch"} & set(vars(store)), store


def test_g1_a_write_failing_at_its_commit_point_leaves_nothing_and_the_next_write_commits(
    j: journal.Journal, fresh
) -> None:
    j.create_session("s")
    with crash.observing(_raise_at("append.before_commit")), pytest.raises((Boom, journal.JournalError)) as failed:
        j.append("s", "user_message", {"content": "lost"})
    assert any(isinstance(e, Boom) for e in _chain(failed.value))
    assert fresh().events("s") == []
    # The transaction was rolled back, not left open on the connection: the next append is
    # committed, and another connection sees it.
    event = j.append("s", "user_message", {"content": "kept"})
    assert [e.data for e in fresh().events("s")] == [{"content": "kept"}]
    assert event.seq == 0


def test_g1_an_error_after_the_commit_point_leaves_the_write_committed(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    with crash.observing(_raise_at("append.after_commit")), pytest.raises((Boom, journal.JournalError)) as failed:
        j.append("s", "user_message", {"content": "kept"})
    assert any(isinstance(e, Boom) for e in _chain(failed.value))
    assert [e.data for e in fresh().events("s")] == [{"content": "kept"}]
    assert j.append("s", "user_message", {"content": "next"}).seq == 1


def test_g2_a_batch_keeps_its_writes_when_one_inside_fails_alone(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    with j._store.batch("writer") as shared:
        j.append("s", "user_message", {"content": "one"})
        with pytest.raises(journal.SessionNotFound):
            j.append("nope", "user_message", {"content": "refused"})
        j.append("s", "user_message", {"content": "two"})
        assert not shared.broken
        assert fresh().events("s") == []  # nothing is committed before the batch's COMMIT
    assert [e.data["content"] for e in fresh().events("s")] == ["one", "two"]


def test_g2_a_batch_whose_body_raises_leaves_none_of_its_writes(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    with pytest.raises(Boom), j._store.batch("writer"):
        j.append("s", "user_message", {"content": "one"})
        j.append("s", "user_message", {"content": "two"})
        raise Boom("the writer gave up")
    assert fresh().events("s") == []
    assert j.append("s", "user_message", {"content": "after"}).seq == 0
    assert [e.data["content"] for e in fresh().events("s")] == ["after"]


def test_g2_a_batch_failing_at_its_commit_point_leaves_none_of_its_writes(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    with crash.observing(_raise_at("writer.before_commit")), pytest.raises(Boom), j._store.batch("writer"):
        j.append("s", "user_message", {"content": "one"})
    assert fresh().events("s") == []
    assert j.append("s", "user_message", {"content": "after"}).seq == 0
