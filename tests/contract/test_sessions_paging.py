"""Listing sessions a page at a time (issue 14, item 3): ``sessions(limit=, after=)`` is one query
in (created_ms, id) order that walks the listing index; each session carries its count and its
last activity; ``journal sessions`` streams its pages and prints what the unpaged form printed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import journal
from journal.cli import main
from journal.escape import dumps, escape
from journal.transfer import import_lines

from ..conftest import python_child

HI = {"content": "hi"}


def import_sessions(j: journal.Journal, sessions: list[tuple[str, int, list[int]]], meta: Any = None) -> None:
    """Sessions ``(id, created_ms, [time_ms of each event])`` with the times given (an import keeps
    them), so that tests can make ties in ``created_ms`` and clocks that go backwards."""
    lines = []
    for sid, created_ms, times in sessions:
        lines.append(dumps({"session": {"id": sid, "meta": meta, "created_ms": created_ms}}))
        for seq, time_ms in enumerate(times):
            event = {"session_id": sid, "seq": seq, "type": "user_message", "data": HI, "time_ms": time_ms}
            lines.append(dumps({"event": event}))
    import_lines(j, lines)


def every_page(j: journal.Journal, limit: int) -> list[list[journal.Session]]:
    """The pages of the listing, as a caller reads them: on until a page is short."""
    pages: list[list[journal.Session]] = []
    after: str | None = None
    while True:
        page = j.sessions(limit=limit, after=after)
        pages.append(page)
        if len(page) < limit:
            return pages
        after = page[-1].id
        assert len(pages) < 1000, "the pages do not move on"  # a failure, not a hang


def statements(j: journal.Journal, call: Callable[[], Any]) -> list[tuple[str, Any]]:
    """The SQL statements ``call`` runs on the journal's connection, with their bindings (apsw's
    exec trace)."""
    seen: list[tuple[str, Any]] = []

    def trace(_cursor: Any, sql: str, bindings: Any) -> bool:
        seen.append((sql, bindings))
        return True

    conn = j._store._conn
    conn.exec_trace = trace
    try:
        call()
    finally:
        conn.exec_trace = None
    return seen


# -- pages ------------------------------------------------------------------------------------

session_rows = st.lists(
    st.tuples(st.text("abxyz09", min_size=1, max_size=4), st.integers(0, 3), st.integers(0, 3)),
    unique_by=lambda row: row[0],
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(rows=session_rows, limit=st.integers(1, 35))
def test_pages_cover_every_session_once_in_listing_order_for_any_page_size(tmp_path_factory, rows, limit) -> None:
    # created_ms from 0..3: many ties, broken by id, whatever order the sessions came in.
    with journal.open(tmp_path_factory.mktemp("paging") / "j.db", durability="normal") as j:
        import_sessions(j, [(sid, created, [7] * events) for sid, created, events in rows])
        pages = every_page(j, limit)
        listed = [s for page in pages for s in page]
        assert [s.id for s in listed] == [sid for _, sid in sorted((created, sid) for sid, created, _ in rows)]
        assert listed == j.sessions()  # the unpaged listing is the pages end to end
        assert all(len(page) == limit for page in pages[:-1]) and len(pages[-1]) < limit
        assert {s.id: s.count for s in listed} == {sid: events for sid, _, events in rows}


def test_the_page_after_the_last_session_is_empty(j: journal.Journal) -> None:
    j.create_session("a")
    assert j.sessions(after="a") == [] and j.sessions(limit=1, after="a") == []
    assert [s.id for s in j.sessions(limit=1)] == ["a"]


@pytest.mark.parametrize("existing", [[], ["a", "b"]], ids=["empty", "with_sessions"])
def test_after_an_unknown_session_is_session_not_found(j: journal.Journal, existing: list[str]) -> None:
    for sid in existing:
        j.create_session(sid)
    with pytest.raises(journal.SessionNotFound) as info:
        j.sessions(limit=10, after="nope")
    assert info.value.session_id == "nope"
    with pytest.raises(journal.SessionNotFound):
        j.sessions(after="nope")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit": 0},
        {"limit": -1},
        {"limit": True},
        {"limit": 2.0},
        {"limit": "10"},
        {"limit": 2**63},
        {"after": 5},
        {"after": b"a"},
        {"after": ["a"]},
    ],
    ids=repr,
)
def test_bad_paging_arguments_are_invalid_argument_before_anything_is_read(j: journal.Journal, kwargs) -> None:
    j.create_session("a")
    refused: list[journal.InvalidArgument] = []

    def call() -> None:
        with pytest.raises(journal.InvalidArgument) as info:
            j.sessions(**kwargs)
        refused.append(info.value)

    assert statements(j, call) == []  # not even a BEGIN
    assert refused[0].name in kwargs


# -- what each session carries ----------------------------------------------------------------


def test_a_forks_count_includes_inherited_events_and_its_last_activity_is_its_own(j: journal.Journal) -> None:
    j.create_session("p")
    j.append_many("p", [("user_message", HI)] * 3)
    fork = j.fork("p", 1, id="f")
    listed = {s.id: s for s in j.sessions()}
    assert (listed["f"].count, listed["f"].seed_length, listed["f"].parent_id) == (2, 2, "p")
    assert listed["f"].last_ms == fork.created_ms == fork.last_ms  # inherited events are not its activity
    assert listed["f"] == fork
    event = j.append("f", "user_message", {"content": "in the fork"})
    listed = {s.id: s for s in j.sessions(limit=5)}
    assert (listed["f"].count, listed["f"].last_ms) == (3, event.time_ms)
    assert (listed["p"].count, listed["p"].last_ms) == (3, j.events("p")[-1].time_ms)
    assert all(s.count == j.count(s.id) for s in listed.values())


def test_last_activity_is_the_last_events_time_or_the_creation_time(j: journal.Journal) -> None:
    # "last" is the log's order (the highest seq), even when a clock went backwards.
    import_sessions(j, [("new", 40, []), ("busy", 10, [50, 90, 70])])
    busy, new = j.sessions()
    assert (busy.id, busy.count, busy.last_ms) == ("busy", 3, 70)
    assert (new.id, new.count, new.last_ms) == ("new", 0, 40)
    assert j.create_session("fresh").last_ms == j.session("fresh").last_ms == j.session("fresh").created_ms


def test_session_returns_the_shape_the_listing_returns(j: journal.Journal) -> None:
    j.create_session("a", meta={"title": "first", "tags": ["x"]})
    j.append("a", "user_message", HI)
    j.fork("a", id="f")
    j.create_session("e")
    for s in j.sessions():
        assert j.session(s.id) == s
    assert j.session("a").to_dict() == {
        "id": "a",
        "count": 1,
        "created_ms": j.session("a").created_ms,
        "meta": {"title": "first", "tags": ["x"]},
        "parent_id": None,
        "seed_length": 0,
        "last_ms": j.events("a")[0].time_ms,
    }


def test_purged_sessions_are_left_out_of_every_page(j: journal.Journal) -> None:
    import_sessions(j, [("a", 1, [2]), ("b", 2, [3, 4]), ("c", 3, [])])
    j.purge("b")
    assert [[s.id for s in page] for page in every_page(j, 1)] == [["a"], ["c"], []]
    with pytest.raises(journal.SessionNotFound):
        j.sessions(limit=1, after="b")


# -- cost -------------------------------------------------------------------------------------


def _listing_calls(j: journal.Journal) -> list[list[tuple[str, Any]]]:
    first = j.sessions()[0].id
    calls = [lambda: j.sessions(), lambda: j.sessions(limit=5), lambda: j.sessions(limit=5, after=first)]
    return [statements(j, call) for call in calls]


def test_the_listing_is_one_query_whatever_the_number_of_sessions(tmp_path: Path) -> None:
    traced = []
    for number in (3, 60):
        with journal.open(tmp_path / f"{number}.db", durability="normal") as j:
            import_sessions(j, [(f"s{i:03d}", i // 4, [i] * (i % 3)) for i in range(number)])
            j.fork("s001", id="fork")
            traced.append(_listing_calls(j))
    assert [[sql for sql, _ in ran] for ran in traced[0]] == [[sql for sql, _ in ran] for ran in traced[1]]
    for ran in traced[0]:
        assert [sql.split()[0].upper() for sql, _ in ran] == ["BEGIN", "SELECT", "COMMIT"], ran


@pytest.mark.sqlite_only(reason="reads SQLite's query plan")
def test_a_page_seeks_the_listing_index_and_counts_through_the_events_key(j: journal.Journal) -> None:
    import_sessions(j, [(f"s{i}", i, [i, i]) for i in range(20)])
    for ran in _listing_calls(j):
        (select, bindings) = ran[1]
        plan = [row[3] for row in j._store._conn.execute("EXPLAIN QUERY PLAN " + select, bindings)]
        assert not any("TEMP B-TREE" in step for step in plan), plan  # no sort of every session
        assert any("USING INDEX sessions_created" in step for step in plan), plan
        on_events = [step for step in plan if " events " in f" {step} "]
        assert len(on_events) == 2 and all("USING PRIMARY KEY (session_id=?)" in s for s in on_events), plan


CREATOR = """
import random, sys, uuid, journal
from journal.escape import dumps
from journal.transfer import import_lines
with journal.open(sys.argv[1], durability="normal") as j:
    for n in range(int(sys.argv[2])):
        if n % 2:
            j.create_session()
        else:  # an imported session, created long ago: it lands among those being paged
            row = {"id": uuid.uuid4().hex, "meta": None, "created_ms": random.randint(1000, 1100)}
            import_lines(j, [dumps({"session": row})])
"""
CREATED = 1500


def test_pages_cover_every_session_once_while_another_process_creates_sessions(db_path: Path) -> None:
    # The child's sessions land behind the reader, ahead of it, and at the end (the newest), where
    # the pages are heading: a reader chases those while they come, so the child stops in the end.
    with journal.open(db_path) as j:
        import_sessions(j, [(f"old-{i:03d}", 1000 + i // 3, []) for i in range(300)])
        child = python_child(CREATOR, str(db_path), str(CREATED))
        try:
            deadline = time.monotonic() + 60
            while len(j.sessions()) == 300:  # the child is creating
                assert child.poll() is None and time.monotonic() < deadline, "the child creates no session"
                time.sleep(0.01)
            before = {s.id for s in j.sessions()}
            listed: list[journal.Session] = []
            after: str | None = None
            while True:
                page = j.sessions(limit=7, after=after)
                listed += page
                if len(page) < 7:
                    break
                after = page[-1].id
                assert len(listed) < 10 * CREATED, "the pages do not move on"
                time.sleep(0.001)  # the child commits between pages
            after_paging = len(j.sessions())
        finally:
            _out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert after_paging > len(before)  # the child did create sessions while the pages were read
    ids = [s.id for s in listed]
    assert len(ids) == len(set(ids))  # none twice
    assert before <= set(ids)  # every session that existed before the paging started
    keys = [(s.created_ms, s.id) for s in listed]
    assert keys == sorted(keys)


# -- the command line -------------------------------------------------------------------------

HOSTILE_META = {"title": "é \x1b[2J \u202e\n", "nested": {"list": [1, {"empty": {}}, []], "none": None}}


@pytest.fixture
def paged_cli(db_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("journal.cli.sessions.PAGE", 3)  # several pages from a few sessions

    def invoke(*args: str) -> str:
        result = CliRunner().invoke(main, [*args, "--db", str(db_path)])
        assert result.exit_code == 0, (result.output, result.exception)
        return result.output

    return invoke


def _fill(j: journal.Journal, number: int) -> None:
    """``number`` sessions (ties in created_ms, 0-2 events each, hostile meta), and a fork of s1."""
    import_sessions(j, [(f"s{i}", i // 2, [i] * (i % 3)) for i in range(number)], meta=HOSTILE_META)
    if number > 1:
        j.fork("s1", id="zfork")


@pytest.mark.parametrize("number", [0, 1, 2, 3, 5, 8])
def test_sessions_json_is_byte_identical_to_the_unpaged_document(db_path: Path, paged_cli, number: int) -> None:
    with journal.open(db_path) as j:
        _fill(j, number)
        found = j.sessions()
    items = [s.to_dict() for s in found]
    # What `output({"sessions": items}, ...)` printed before the listing was paged.
    assert paged_cli("sessions", "--json") == dumps({"sessions": items}, indent=2) + "\n"
    assert paged_cli("sessions", "--nl") == "".join(dumps(item) + "\n" for item in items)
    text = paged_cli("sessions")
    assert text.splitlines() == [escape(f"{s.id}  {s.count:>6} events" + _fork_note(s)) for s in found]


def _fork_note(s: journal.Session) -> str:
    return f"  fork of {s.parent_id} at {s.seed_length - 1}" if s.parent_id else ""


def test_stats_counts_page_by_page_what_the_sessions_hold(db_path: Path, paged_cli) -> None:
    with journal.open(db_path) as j:
        _fill(j, 8)
        j.purge("s4")
        found = j.sessions()
        totals = j._sessions.session_totals()  # the sessions part's one-query count
    stats = json.loads(paged_cli("stats", "--json"))
    expected = (len(found), sum(1 for s in found if s.parent_id), sum(s.count - s.seed_length for s in found))
    assert (stats["sessions"], stats["forks"], stats["events"]) == expected
    assert (totals.sessions, totals.forks, totals.events) == expected == (8, 1, 6)


def test_paging_after_a_listed_session_goes_on_even_if_it_was_purged_meanwhile(j) -> None:
    for n in range(5):
        j.create_session(f"s{n}")
    first = j.sessions(limit=2)
    j.purge(first[-1].id)
    rest = j.sessions(after=first[-1])
    assert [s.id for s in first] + [s.id for s in rest] == ["s0", "s1", "s2", "s3", "s4"]
    with pytest.raises(journal.SessionNotFound):
        j.sessions(after=first[-1].id)  # by id, a purged session is unknown


@pytest.mark.parametrize("size", [100_000, 1_000_000], ids=["100kB", "1MB"])
def test_g12_a_long_meta_key_or_value_is_stored_and_found_on_every_backend(j: journal.Journal, size: int) -> None:
    # Parity (DESIGN §16): what SQLite takes, PostgreSQL takes (its index holds digests).
    value, key = "v" * size + "!", "k" * (size // 10)
    j.create_session("long", meta={"note": value, key: 7, "short": "x"})
    j.create_session("other", meta={"note": value[:-1], key: 8})
    assert [s.id for s in j.sessions(meta={"note": value})] == ["long"]
    assert [s.id for s in j.sessions(meta={key: 7})] == ["long"]
    assert j.sessions(meta={"note": value + "?"}) == [] and j.session("long").meta["note"] == value
