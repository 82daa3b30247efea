"""The tail of a long chat (DESIGN §8, §11): ``messages(tail=N)`` and ``provider_view(tail=N)``
are the end of the whole view, read from the end of the log."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import journal
from journal.cli import main
from journal.pure.view import (
    ProviderView,
    compactions,
    fold,
    is_compaction,
    provider_tail,
    provider_view,
)
from tests.builders import HUGE, Item, assistant, log, raw, replace, result, tool_use, user
from tests.strategies import compaction_logs, conversations

# -- what a journal is given: chats with compactions anywhere ---------------------------------------


@st.composite
def chats(draw: st.DrawFn, prefix: str = "p", max_size: int = 40) -> list[Item]:
    """Items a journal accepts: user and system messages, assistants with calls (some aborted or
    errored, some ids reused), results (at most one per call id, some for unknown calls), app
    notes, and compactions over any range, greedy or past the end; call ids start with ``prefix``
    so that a fork's ids never meet its parent's."""
    items: list[Item] = []
    asked: list[str] = []
    answered: set[str] = set()
    for i in range(draw(st.integers(0, max_size))):
        what = draw(st.sampled_from(["user", "user", "assistant", "result", "note", "compaction", "compaction"]))
        if what == "user":
            items.append(
                user(f"{prefix}{i}") if draw(st.booleans()) else ("system_message", {"content": f"{prefix}{i}"})
            )
        elif what == "assistant":
            fresh = [f"{prefix}c{i}.{k}" for k in range(draw(st.integers(0, 2)))]
            reused = draw(st.lists(st.sampled_from(asked), max_size=1, unique=True)) if asked else []
            reason = draw(st.sampled_from([None, "stop", "aborted", "error"]))
            extra = {} if reason is None else {"stop_reason": reason}
            items.append(assistant(f"{prefix}{i}", *fresh, *reused, **extra))
            asked += fresh
        elif what == "result":
            open_calls = [c for c in asked if c not in answered]
            call_id = draw(st.sampled_from(open_calls)) if open_calls and draw(st.booleans()) else f"{prefix}zz{i}"
            answered.add(call_id)
            items.append(result(call_id, f"{prefix}{i}"))
        elif what == "note":
            items.append(raw("x.note", n=i))
        else:
            start = draw(st.integers(0, 14))
            stop = draw(st.one_of(st.integers(start, start + 10), st.just(HUGE)))
            kind = draw(st.sampled_from(["user_message", "system_message", "assistant_message"]))
            items.append(replace(start, stop, f"{prefix}S{i}", kind))
    return items


@pytest.fixture(scope="module")
def jm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[journal.Journal]:
    """One journal for the property tests: each example writes its own sessions."""
    with journal.open(tmp_path_factory.mktemp("tail") / "j.db", durability="normal") as j:
        yield j


def _session(j: journal.Journal, items: list[Item]) -> str:
    s = j.create_session(uuid.uuid4().hex).id
    if items:
        j.append_many(s, items)
    return s


def _last(values: list[Any], n: int) -> list[Any]:
    """The last n values (none for 0): what ``tail=n`` means, unlike ``values[-0:]``."""
    return values[max(len(values) - n, 0) :]


def _assert_every_tail_is_the_end(j: journal.Journal, s: str) -> None:
    full = j.messages(s)
    for n in range(len(full) + 3):
        assert j.messages(s, tail=n) == _last(full, n), n


def _assert_every_provider_tail_is_the_end(j: journal.Journal, s: str) -> None:
    full = j.provider_view(s)
    for n in range(len(full.messages) + 3):
        tail = j.provider_view(s, tail=n)
        assert tail == full.tail(n), n
        if tail.missing:
            with pytest.raises(journal.UnansweredCalls):
                j.messages(s, provider=True, tail=n)
        else:
            assert j.messages(s, provider=True, tail=n) == tail.messages


# -- the property: the tail is the end of the whole view -----------------------------------------------


@settings(max_examples=150, deadline=None)
@given(items=chats())
def test_every_tail_of_the_messages_is_the_end_of_the_whole_transcript(jm: journal.Journal, items: list[Item]) -> None:
    _assert_every_tail_is_the_end(jm, _session(jm, items))


@settings(max_examples=100, deadline=None)
@given(items=chats())
def test_every_provider_tail_is_the_end_of_the_whole_provider_view(jm: journal.Journal, items: list[Item]) -> None:
    _assert_every_provider_tail_is_the_end(jm, _session(jm, items))


@settings(max_examples=100, deadline=None)
@given(
    parent=chats("p", max_size=25),
    child=chats("f", max_size=15),
    grandchild=chats("g", max_size=10),
    later=chats("q", max_size=5),
    points=st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
)
def test_the_tail_of_a_fork_reaches_into_its_parents_and_only_their_inherited_events(
    jm: journal.Journal, parent: list[Item], child: list[Item], grandchild: list[Item], later: list[Item], points
) -> None:
    p = _session(jm, [user("first"), *parent])
    fork = jm.fork(p, points[0] % jm.count(p)).id
    if child:
        jm.append_many(fork, child)
    grand = jm.fork(fork, points[1] % jm.count(fork)).id
    if grandchild:
        jm.append_many(grand, grandchild)
    if later:  # events of a parent past the fork point are not the fork's
        jm.append_many(p, later)
    for s in (fork, grand):
        _assert_every_tail_is_the_end(jm, s)
        _assert_every_provider_tail_is_the_end(jm, s)
        assert jm.check(s) == []  # each compaction's row is where the log places it


@settings(max_examples=50, deadline=None)
@given(parent=chats("p", max_size=25), child=chats("f", max_size=15), point=st.integers(0, 10**6))
def test_a_fork_given_its_own_copy_by_a_purge_keeps_its_tail_and_its_compactions_placed(
    jm: journal.Journal, parent: list[Item], child: list[Item], point: int
) -> None:
    p = _session(jm, [user("first"), *parent])
    fork = jm.fork(p, point % jm.count(p)).id
    if child:
        jm.append_many(fork, child)
    whole = jm.messages(fork)
    jm.purge(p, copy_forks=True)
    assert jm.messages(fork) == whole
    _assert_every_tail_is_the_end(jm, fork)
    assert jm.check(fork) == []


# -- the pure pieces --------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(events=compaction_logs)
def test_each_compaction_is_placed_at_the_transcripts_length_before_and_after_it(events) -> None:
    placed = compactions(events)
    assert [c.seq for c in placed] == [e.seq for e in events if is_compaction(e)]
    for c in placed:
        assert c.before == len(fold(e for e in events if e.seq < c.seq))
        assert c.after == len(fold(e for e in events if e.seq <= c.seq))


@settings(max_examples=200, deadline=None)
@given(events=conversations(), n=st.integers(0, 30))
def test_the_provider_tail_from_any_end_of_the_transcript_is_exact_or_asks_for_more(events, n) -> None:
    whole = fold(events)
    expected = provider_view(events).tail(n)
    for m in range(len(whole) + 1):
        found = provider_tail(_last(whole, m), n, whole=m >= len(whole))
        assert found is None or found == expected
    assert provider_tail(whole, n, whole=True) == expected


@settings(max_examples=200, deadline=None)
@given(events=conversations(), n=st.integers(0, 30))
def test_a_provider_views_tail_keeps_the_missing_calls_of_the_assistants_in_it(events, n) -> None:
    view = provider_view(events)
    tail = view.tail(n)
    assert tail.messages == _last(view.messages, n)
    assistants = {m.seq for m in tail.messages if m.role == "assistant"}
    assert tail.missing == tuple(m for m in view.missing if m.assistant_seq in assistants)


def test_a_tail_of_the_provider_view_that_begins_with_results_does_not_ask_for_their_assistants_calls() -> None:
    events = log(user("go"), tool_use("a", "b"), result("a"), user("next"))
    view = provider_view(events)
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "user"]
    assert [m.tool_call_id for m in view.missing] == ["b"]
    assert view.tail(2) == ProviderView(messages=view.messages[2:], missing=())
    assert view.tail(3).missing == view.missing
    assert view.tail(0) == ProviderView(messages=[], missing=())


# -- edges, on a journal ----------------------------------------------------------------------------


def _chat(j: journal.Journal, s: str, n: int, start: int = 0) -> None:
    j.append_many(s, [user(f"m{i}") if i % 2 == 0 else assistant(f"m{i}") for i in range(start, start + n)])


def _contents(messages: list[journal.Message]) -> list[Any]:
    return [m.content for m in messages]


@pytest.mark.parametrize(
    ("compactions", "n", "expected"),
    [
        pytest.param([], 0, [], id="none for 0"),
        pytest.param([], 3, ["m7", "m8", "m9"], id="the last 3"),
        pytest.param([], 50, [f"m{i}" for i in range(10)], id="more than there are"),
        pytest.param([(3, 5)], 6, ["m2", "S", "m6", "m7", "m8", "m9"], id="a compaction inside the tail"),
        pytest.param([(3, 5)], 3, ["m7", "m8", "m9"], id="a compaction before the tail"),
        pytest.param([(0, 9)], 5, ["S"], id="a compaction of everything"),
        pytest.param([(3, 5), (2, 4)], 5, ["m1", "S", "m7", "m8", "m9"], id="a compaction of a compaction"),
        pytest.param([(0, 3), (1, 2)], 20, ["S", "S", "m6", "m7", "m8", "m9"], id="a compaction after one"),
    ],
)
def test_a_tail_of_a_compacted_chat(j: journal.Journal, compactions, n: int, expected: list[str]) -> None:
    s = j.create_session().id
    _chat(j, s, 10)
    for start, stop in compactions:
        j.compact(s, start, stop, "S")
    assert _contents(j.messages(s, tail=n)) == expected
    assert j.messages(s, tail=n) == _last(j.messages(s), n)


def test_a_compaction_past_the_end_appends_and_a_greedy_one_ends_the_transcript(j: journal.Journal) -> None:
    s = j.create_session().id
    _chat(j, s, 4)
    j.append_many(s, [replace(100, 200, "past"), replace(2, HUGE, "greedy"), user("after")])
    assert _contents(j.messages(s)) == ["m0", "m1", "greedy", "after"]
    assert _contents(j.messages(s, tail=3)) == ["m1", "greedy", "after"]


def test_a_fork_reads_its_tail_through_its_parent(j: journal.Journal) -> None:
    parent = j.create_session().id
    _chat(j, parent, 10)
    fork = j.fork(parent, 4).id  # inherits m0..m4
    j.append_many(fork, [user("f0"), replace(1, 2, "S"), user("f1")])
    _chat(j, parent, 3, start=10)  # the parent goes on; the fork does not see it
    assert _contents(j.messages(fork)) == ["m0", "S", "m3", "m4", "f0", "f1"]
    assert _contents(j.messages(fork, tail=4)) == ["m3", "m4", "f0", "f1"]
    assert _contents(j.messages(fork, tail=5)) == ["S", "m3", "m4", "f0", "f1"]


@pytest.mark.parametrize("tail", [-1, 1.5, True, "3", [2]])
def test_a_bad_tail_is_refused_before_anything_is_read(j: journal.Journal, tail: object) -> None:
    for call in (
        lambda: j.messages("no-such-session", tail=tail),
        lambda: j.messages("no-such-session", provider=True, tail=tail),
        lambda: j.provider_view("no-such-session", tail=tail),
    ):
        with pytest.raises(journal.InvalidArgument) as info:
            call()
        assert info.value.name == "tail"


def test_a_tail_of_an_unknown_session_is_session_not_found_even_for_0(j: journal.Journal) -> None:
    for call in (lambda: j.messages("nope", tail=0), lambda: j.provider_view("nope", tail=0)):
        with pytest.raises(journal.SessionNotFound):
            call()


def test_a_provider_tail_asks_only_about_the_calls_in_it(j: journal.Journal) -> None:
    s = j.create_session().id
    j.append_many(
        s, [user("go"), tool_use("a"), user("more"), tool_use("b"), result("b"), assistant("done", stop_reason="stop")]
    )
    with pytest.raises(journal.UnansweredCalls) as info:
        j.messages(s, provider=True)
    assert info.value.call_ids == ("a",)
    assert [m.tool_call_id for m in j.provider_view(s, tail=5).missing] == ["a"]
    assert j.messages(s, provider=True, tail=4) == j.provider_view(s).messages[-4:]


# -- the cost: bounded by the tail, not the session -------------------------------------------------


def _agent_chat(j: journal.Journal, s: str, turns: int) -> None:
    """Turns of an agent: a question, an assistant calling a tool, the result, bookkeeping, an
    answer; a compaction of early positions every 200 turns."""
    items: list[Item] = []
    for t in range(turns):
        items += [
            user(f"q{t}"),
            ("turn_start", {"turn": t + 1}),
            tool_use(f"c{t}"),
            result(f"c{t}"),
            assistant(f"a{t}", stop_reason="stop"),
            ("turn_end", {"turn": t + 1, "steps": 1, "reason": "complete"}),
        ]
        if t % 200 == 199:
            items.append(replace(1, 20, f"summary {t}"))
        if len(items) >= 3000:
            j.append_many(s, items)
            items = []
    if items:
        j.append_many(s, items)
    j.append_many(s, [user(f"tail {i}") for i in range(60)])  # the compactions are older than the tail


class _Reads:
    """Rows SQLite hands back, and its work in steps of 1,000 VM instructions."""

    def __init__(self) -> None:
        self.rows = 0
        self.work = 0

    def row(self, cursor: Any, row: Any) -> Any:
        self.rows += 1
        return row

    def step(self) -> bool:
        self.work += 1
        return False


@contextmanager
def _reads(j: journal.Journal) -> Iterator[_Reads]:
    """Count what the journal's connection reads inside the block."""
    reads, conn = _Reads(), j._store._conn
    conn.row_trace = reads.row
    conn.set_progress_handler(reads.step, 1000)
    try:
        yield reads
    finally:
        conn.row_trace = None
        conn.set_progress_handler(None)


def _compactions(j: journal.Journal, s: str) -> int:
    return sum(1 for e in j.events(s) if is_compaction(e))


@pytest.mark.sqlite_only(reason="counts the rows SQLite steps through")
@pytest.mark.parametrize(
    "ending",
    [
        pytest.param([], id="plain appends: the newest 50 events"),
        pytest.param(
            [replace(1, 20, "early summary"), *[user(f"after {i}") for i in range(10)]],
            id="a compaction of early positions among them",
        ),
        pytest.param([replace(0, 10**6, "all of it")], id="the newest event compacts everything"),
    ],
)
def test_a_tail_of_50_reads_the_tail_and_the_compactions_whatever_the_sessions_length(
    tmp_path: Path, ending: list[Item]
) -> None:
    with journal.open(tmp_path / "j.db", durability="normal") as j:
        short, long = j.create_session("short").id, j.create_session("long").id
        _agent_chat(j, short, 300)
        _agent_chat(j, long, 6000)  # 36,000 events, 30 compactions
        assert j.count(long) > 30_000
        costs = {}
        for s in (short, long):
            if ending:
                j.append_many(s, ending)
            expected = _last(j.messages(s), 50)
            with _reads(j) as reads:
                assert j.messages(s, tail=50) == expected
            costs[s] = reads
            # The messages, a row per compaction, the session's row and the schema version.
            assert reads.rows <= len(expected) + _compactions(j, s) + 2
        assert costs[long].work <= 2 * max(costs[short].work, 1)


@pytest.mark.sqlite_only(reason="counts the rows SQLite steps through")
def test_a_compaction_that_reaches_into_the_tail_is_placed_by_its_row_and_only_the_tail_is_read(
    tmp_path: Path,
) -> None:
    # Its row in `compactions` says how long the transcript was before it: the messages it
    # left at the end are the newest appends before it, read from there, whatever the length.
    with journal.open(tmp_path / "j.db", durability="normal") as j:
        costs = {}
        for s, turns in (("short", 300), ("long", 6000)):
            j.create_session(s)
            _agent_chat(j, s, turns)
            j.compact(s, 0, len(j.messages(s)) - 6, "all but the last 5")
            j.append(s, "user_message", {"content": "last"})
            expected = _last(j.messages(s), 50)
            assert len(expected) == 7
            with _reads(j) as reads:
                assert j.messages(s, tail=50) == expected
            assert reads.rows <= len(expected) + _compactions(j, s) + 2
            costs[s] = reads
        assert costs["long"].work <= 2 * max(costs["short"].work, 1)


# -- journal show --tail ----------------------------------------------------------------------------


@pytest.fixture
def shown(tmp_path: Path):
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        s = j.create_session("s").id
        j.append_many(s, [user("m0"), tool_use("a", "b"), result("b"), user("m3"), assistant("m4", stop_reason="stop")])
        j.compact(s, 0, 0, "S")
        full, provider = j.messages(s), j.provider_view(s)
        events = j.events(s)
    runner = CliRunner()

    def show(*args: str, code: int = 0):
        out = runner.invoke(main, ["show", "s", *args], env={"JOURNAL_DB": str(path)})
        assert out.exit_code == code, (out.output, out.exception)
        return out.output

    return show, full, provider, events


def test_show_tail_prints_the_last_messages_in_the_usual_shapes(shown) -> None:
    show, full, _provider, _events = shown
    document = json.loads(show("--view", "messages", "--tail", "2", "--json"))
    assert document["view"] == "messages" and set(document) == {"session", "view", "items"}
    assert document["items"] == json.loads(json.dumps([m.to_dict() for m in full[-2:]]))
    lines = show("--view", "messages", "--tail", "2", "--nl").strip().splitlines()
    assert [json.loads(line)["content"] for line in lines] == ["m3", "m4"]
    text = show("--view", "messages", "--tail", "1")
    assert "m4" in text and "m3" not in text
    assert json.loads(show("--view", "messages", "--tail", "0", "--json"))["items"] == []


def test_show_tail_of_the_provider_view_lists_only_the_missing_calls_in_it(shown) -> None:
    show, _full, provider, _events = shown
    whole = json.loads(show("--view", "provider", "--json"))
    assert [m["tool_call_id"] for m in whole["missing"]] == ["a"]
    for n in range(len(provider.messages) + 1):
        document = json.loads(show("--view", "provider", "--tail", str(n), "--json"))
        assert document["items"] == whole["items"][len(whole["items"]) - n :]
        assert [m["tool_call_id"] for m in document["missing"]] == [m.tool_call_id for m in provider.tail(n).missing]


def test_show_tail_of_the_log_is_its_last_events_and_goes_with_since(shown) -> None:
    show, _full, _provider, events = shown
    items = json.loads(show("--tail", "2", "--json"))["items"]
    assert [e["seq"] for e in items] == [e.seq for e in events[-2:]]
    items = json.loads(show("--view", "log", "--tail", "4", "--since", "4", "--json"))["items"]
    assert [e["seq"] for e in items] == [4, 5]
    assert json.loads(show("--tail", "0", "--json"))["items"] == []


@pytest.mark.parametrize("value", ["-1", "x", "1.5"])
def test_show_tail_must_be_a_count(shown, value: str) -> None:
    show = shown[0]
    assert "--tail" in show("--view", "messages", "--tail", value, code=2)


def test_check_names_a_compaction_row_that_disagrees_with_the_log(tmp_path: Path) -> None:
    with journal.open(tmp_path / "j.db") as j:
        s = j.create_session("s").id
        _chat(j, s, 6)
        j.compact(s, 1, 3, "summary")
        assert j.check() == []
    conn = apsw.Connection(str(tmp_path / "j.db"))
    conn.execute("UPDATE compactions SET before = 9, after = 7")
    conn.execute("INSERT INTO compactions VALUES ('s', 2, 'replace', 0, 0, 2, 1)")
    conn.close()
    with journal.open(tmp_path / "j.db") as j:
        found = {(d.table, d.key, d.field, d.stored, d.derived) for d in j.check()}
    assert found == {
        ("compactions", "6", "before", 9, 6),
        ("compactions", "6", "after", 7, 4),
        ("compactions", "2", "row", True, False),
    }
