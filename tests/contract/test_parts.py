"""``Journal`` is a facade over parts built in its ``__init__``; cross-part behaviour is a direct call."""

from __future__ import annotations

import inspect

import pytest

import journal
from journal.log import Log
from journal.queue import Queue
from journal.store.groupcommit import GroupCommit
from journal.turns import Turns


def test_journal_is_composed_of_parts_and_inherits_from_nothing() -> None:
    assert journal.Journal.__mro__ == (journal.Journal, object)


def test_every_public_method_of_the_facade_keeps_its_parts_signature_and_docstring() -> None:
    for name in ("append", "turn_end", "claim", "recover", "reconcile", "put_result", "purge"):
        method = getattr(journal.Journal, name)
        assert method.__doc__ and method.__doc__.strip(), name
        assert "self" in inspect.signature(method).parameters, name


def test_the_facade_hands_out_the_parts_own_bound_methods(j) -> None:
    assert j.append.__self__ is j._log
    assert j.turn_end.__self__ is j._turns
    assert j.append is j.append  # bound once: the facade adds no call to the hot path


@pytest.mark.parametrize("end", ["complete", "turn_end", "context_manager"])
def test_settling_a_submission_on_turn_end_does_not_depend_on_any_declaration_order(j, fresh, end) -> None:
    """Ending a claimed turn settles its submission in the same transaction, however it ends."""
    j.create_session("s")
    sub = j.submit("s", "user_message", {"content": "hi"})
    claim = j.claim(session_id="s")
    assert claim is not None
    if end == "complete":
        claim.complete()
    elif end == "turn_end":
        j.turn_end(claim.turn)
    else:
        with claim.turn.step():
            claim.turn.assistant("done")
        claim.turn.complete()
    settled = fresh().submission(sub.id)
    assert settled.state is journal.SubmissionState.COMPLETED
    assert settled.outcome == "complete" and settled.lease_owner is None


def test_the_turns_part_settles_through_the_queue_part_it_was_given(j, fresh) -> None:
    """Built by hand, in the only order their dependencies allow, the parts still settle."""
    j.create_session("s")
    sub = j.submit("s", "user_message", {"content": "hi"})
    claim = j.claim(session_id="s")
    assert claim is not None
    store = j._store
    log = Log(store, j._codec, GroupCommit(store, "append"))
    turns = Turns(j, store, log, Queue(store, log))
    turns.turn_end(claim.turn)
    assert fresh().submission(sub.id).state is journal.SubmissionState.COMPLETED


def test_one_codec_carries_the_journals_limits_for_every_part(db_path) -> None:
    with journal.open(db_path, max_event_bytes=1234) as j:
        assert j._codec.max_event_bytes == 1234
        assert j._log.codec is j._codec
        for part in (j._queue, j._turns, j._claims, j._results, j._effects, j._recovery, j._reconciler, j._transcript):
            assert part._log is j._log


def test_the_size_limit_also_holds_on_the_paths_inside_parts(db_path) -> None:
    """compact appends through Log.append_txn, resolve validates its note: both under the journal's limit."""
    big = "x" * 2000
    with journal.open(db_path, max_event_bytes=1000) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "a"})
        with pytest.raises(journal.InvalidEvent, match="over the limit of 1000"):
            j.compact("s", 0, 0, big)
        with pytest.raises(journal.InvalidEvent, match="over the limit of 1000"):
            j.resolve("s", "c1", outcome="ran", note=big)
        assert [e.type for e in j.events("s")] == ["user_message"]
