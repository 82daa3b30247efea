"""Fork (DESIGN §8): durable, read through the parent, never a half turn (G11)."""

from __future__ import annotations

import pytest

import journal


def _closed_turn(j: journal.Journal, s: str) -> None:
    with j.turn(s) as turn, turn.step():
        turn.assistant("ok", stop_reason="stop")


@pytest.fixture
def parent(j: journal.Journal) -> str:
    """seq 0 user, 1-5 a closed turn, 6 user, 7-.. a turn closed later."""
    s = j.create_session("parent").id
    j.append(s, "user_message", {"content": "one"})  # 0
    _closed_turn(j, s)  # 1..5
    j.append(s, "user_message", {"content": "two"})  # 6
    return s


def test_a_boundary_after_a_closed_turn_forks(j: journal.Journal, parent: str, fresh) -> None:
    fork = j.fork(parent, 6)
    assert (fork.parent_id, fork.seed_length, fork.count) == (parent, 7, 7)
    stored = fresh().session(fork.id)
    assert (stored.parent_id, stored.seed_length, stored.count) == (parent, 7, 7)
    assert [e.seq for e in j.events(fork.id)] == list(range(7))
    assert j.events(fork.id)[6].data == {"content": "two"}
    assert j.append(fork.id, "user_message", {"content": "fork"}).seq == 7


def test_g11_a_boundary_inside_a_turn_closed_later_in_the_parent_is_an_open_turn_error(
    j: journal.Journal, parent: str
) -> None:
    _closed_turn(j, parent)  # 7..11
    for boundary in (7, 8, 10):
        with pytest.raises(journal.OpenTurnError) as info:
            j.fork(parent, boundary)
        assert info.value.seq == 7
    assert j.fork(parent, 11).seed_length == 12


def test_g11_a_boundary_inside_an_open_turn_and_last_with_an_open_final_turn_raise(
    j: journal.Journal, parent: str
) -> None:
    turn = j.turn_start(parent)  # 7
    turn.step_start()  # 8
    with pytest.raises(journal.OpenTurnError) as info:
        j.fork(parent, 8)
    assert info.value.seq == 7
    with pytest.raises(journal.OpenTurnError) as info:
        j.fork(parent, "last")
    assert info.value.seq == 7
    j.recover(parent)
    fork = j.fork(parent, "last")
    assert fork.seed_length == j.count(parent)
    assert j.scan().open_turns == ()


def test_g11_the_innermost_open_turn_is_named(j: journal.Journal) -> None:
    s = j.create_session().id
    j.append(s, "turn_start", {"turn": 1})  # 0
    j.append(s, "turn_start", {"turn": 2})  # 1 (nested: only a damaged or hand-made log does this)
    j.append(s, "turn_end", {"turn": 2, "steps": 0, "reason": "complete"})  # 2
    j.append(s, "user_message", {"content": "x"})  # 3
    with pytest.raises(journal.OpenTurnError) as info:
        j.fork(s, 1)
    assert info.value.seq == 1
    with pytest.raises(journal.OpenTurnError) as info:
        j.fork(s, 3)
    assert info.value.seq == 0


@pytest.mark.parametrize("boundary", [-1, 1.5, "first", True, None])
def test_invalid_boundaries_are_refused(j: journal.Journal, parent: str, boundary) -> None:
    with pytest.raises(journal.InvalidBoundary):
        j.fork(parent, boundary)
    assert len(j.sessions()) == 1


def test_a_boundary_past_the_end_is_out_of_range(j: journal.Journal, parent: str) -> None:
    with pytest.raises(journal.BoundaryOutOfRange) as info:
        j.fork(parent, 7)
    assert (info.value.boundary, info.value.count) == (7, 7)


def test_an_empty_session_forks_at_last(j: journal.Journal) -> None:
    s = j.create_session().id
    fork = j.fork(s, "last")
    assert (fork.seed_length, j.count(fork.id), j.events(fork.id)) == (0, 0, [])
    assert j.append(fork.id, "user_message", {"content": "hi"}).seq == 0
    assert j.count(s) == 0


def test_later_appends_to_the_parent_never_show_in_the_fork(j: journal.Journal, parent: str) -> None:
    fork = j.fork(parent)
    j.append(parent, "user_message", {"content": "parent only"})
    j.append(fork.id, "user_message", {"content": "fork only"})
    assert [e.data.get("content") for e in j.events(fork.id)][-2:] == ["two", "fork only"]
    assert [e.data.get("content") for e in j.events(parent)][-2:] == ["two", "parent only"]


def test_a_fork_of_a_fork_records_its_immediate_parent_and_reads_through_both(j: journal.Journal, parent: str) -> None:
    child = j.fork(parent, 6, id="child")
    j.append("child", "user_message", {"content": "c"})  # 7
    grandchild = j.fork("child", id="grandchild")
    assert grandchild.parent_id == "child" and grandchild.seed_length == 8
    assert [e.data.get("content") for e in j.events("grandchild") if e.type == "user_message"] == ["one", "two", "c"]
    assert [e.seq for e in j.events("grandchild", since=5)] == [5, 6, 7]
    assert child.id == "child"


def test_g5_a_fork_inherits_no_derived_open_work_and_results_respect_first_write_wins(j: journal.Journal) -> None:
    s = j.create_session().id
    with j.turn(s) as turn, turn.step():
        turn.assistant("", tool_calls=[{"id": "c", "name": "t", "arguments": {}}])
        turn.dispatch("c").result("real")
    fork = j.fork(s)
    again = j.put_result(fork.id, "c", "second")
    assert not again.won and again.event.data["content"] == "real"
    assert again.late is not None and again.late.session_id == fork.id
    with pytest.raises(journal.AlreadyDispatched):
        j.dispatch(fork.id, "c")
    with pytest.raises(journal.AlreadyDispatched):
        j.append(fork.id, "tool_call", {"id": "c", "name": "t"})
    with pytest.raises(journal.ResultExists):
        j.append(fork.id, "tool_result", {"tool_call_id": "c", "content": "again"})


def test_fork_to_an_existing_id_is_session_exists(j: journal.Journal, parent: str) -> None:
    with pytest.raises(journal.SessionExists):
        j.fork(parent, id=parent)
