"""The fork chain (``journal.lineage``): a session's log as segments of its own and its ancestors'
events, the one walk every read through a fork goes by (DESIGN §8, §12)."""

from __future__ import annotations

import pytest

import journal
from journal import lineage


@pytest.fixture
def chain(j: journal.Journal) -> tuple[str, str, str]:
    """A grandparent of 5 events, a parent forked at seq 2 with 3 of its own, a child forked from
    the parent at seq 3 (inheriting seqs 0-2 of the grandparent and 3 of the parent) with 2."""
    grand = j.create_session("grand").id
    for n in range(5):
        j.append(grand, "user_message", {"content": f"g{n}"})
    parent = j.fork(grand, 2, id="parent").id
    for n in range(3):
        j.append(parent, "user_message", {"content": f"p{n}"})
    child = j.fork(parent, 3, id="child").id
    for n in range(2):
        j.append(child, "user_message", {"content": f"c{n}"})
    return grand, parent, child


def test_a_fork_of_a_fork_is_three_segments_each_below_the_next_fork_point(fresh, chain) -> None:
    grand, parent, child = chain
    with fresh() as j, j._store.read() as db:
        assert lineage.chain_txn(db, child) == [(child, 4, lineage.SEQ_END), (parent, 3, 4), (grand, 0, 3)]
        assert lineage.chain_txn(db, child, newest_first=False) == [
            (grand, 0, 3),
            (parent, 3, 4),
            (child, 4, lineage.SEQ_END),
        ]
        assert lineage.chain_txn(db, child, 2, 5, newest_first=False) == [(grand, 2, 3), (parent, 3, 4), (child, 4, 5)]
        assert lineage.chain_txn(db, child, 4, 5) == [(child, 4, 5)]  # the empty segments are left out
        assert lineage.next_seq_txn(db, child) == 6 and lineage.seed_length_txn(db, child) == 4


def test_each_seq_of_a_fork_of_a_fork_is_read_from_the_session_that_wrote_it(fresh, chain) -> None:
    grand, parent, child = chain
    with fresh() as j:
        assert [e.data["content"] for e in j.events(child)] == ["g0", "g1", "g2", "p0", "c0", "c1"]
        assert [e.seq for e in j.events(child)] == list(range(6))
        assert all(e.session_id == child for e in j.events(child))
        with j._store.read() as db:
            segments = lineage.chain_txn(db, child)
            assert [lineage.owner_of(segments, seq) for seq in range(6)] == [grand] * 3 + [parent] + [child] * 2
            assert [e.data["content"] for e in lineage.read_events_txn(db, child, 2, 5)] == ["g2", "p0", "c0"]
            assert lineage.forks_reading_txn(db, parent) == [(child, 4)]
            assert lineage.forks_reading_txn(db, child) == []


def test_purging_an_ancestor_shortens_the_chain_and_the_purged_one_is_not_found(
    j: journal.Journal, fresh, chain
) -> None:
    grand, parent, child = chain
    j.purge(grand, copy_forks=True)
    with fresh() as again, again._store.read() as db:
        assert lineage.chain_txn(db, child) == [(child, 4, lineage.SEQ_END), (parent, 0, 4)]  # its own copy now
        with pytest.raises(journal.SessionNotFound) as info:
            lineage.chain_txn(db, grand)
    assert info.value.session_id == grand


def test_past_every_seq_is_the_largest_integer_both_backends_store(j: journal.Journal) -> None:
    s = j.create_session().id
    j.append(s, "user_message", {"content": "a"})
    with j._store.read() as db:
        (own,) = lineage.chain_txn(db, s)
        assert own == (s, 0, 2**63 - 1)
        # The bound binds as an integer on both backends: a read up to it reads to the end.
        assert [e.seq for e in lineage.read_events_txn(db, s, 0, lineage.SEQ_END)] == [0]
