"""The async writer's rounds (``journal.aio_writer``), on SQLite and PostgreSQL alike: a run of
plain appends in one round is one insert, and each append gets exactly what ``Journal.append``
would have given it — its event, or its own error — whatever else the round holds.

The rounds here are made by hand (a writer that never starts its thread, given a list of queued
writes) so that which writes share a round is the test's choice, not the scheduler's; the
journal, the store and the database are the real ones."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import journal
import journal.aio
from journal.aio_writer import _Item, _Writer
from journal.errors import JournalError, SessionNotFound
from journal.model import Event

NOTE = {"content": "a message of ordinary length"}


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()  # for the queued writes' futures: never run
    yield loop
    loop.close()


def plain(session_id: str, type_: str = "user_message", data: dict[str, Any] | None = None) -> tuple:
    data = dict(NOTE) if data is None else data
    return (lambda j: j.append(session_id, type_, data)), (session_id, type_, data)


def other(call: Callable[[journal.Journal], Any]) -> tuple:
    return call, None


def run_round(j: journal.Journal, loop: asyncio.AbstractEventLoop, writes: list[tuple]) -> list[_Item]:
    """The writes as one round of the writer, in this order."""
    writer = _Writer(lambda: j)
    writer.journal = j
    items = [_Item(call, loop, operation="append", alone=False, synced=False, plain=p) for call, p in writes]
    writer._run_batch(items)
    return items


@pytest.fixture
def inserts(j: journal.Journal, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Each ``insert_events`` the store's database handle runs (the real one): its row count and
    whether it went through (False: refused)."""
    seen: list[tuple[int, bool]] = []
    database = type(j._store._database(j._store._checked("test"), None))
    real = database.insert_events

    def counted(self: Any, rows: Any, derived: Any = None) -> None:
        try:
            real(self, rows, derived)
        except BaseException:
            seen.append((len(rows), False))
            raise
        seen.append((len(rows), True))

    monkeypatch.setattr(database, "insert_events", counted)
    return seen


def test_a_rounds_plain_appends_are_one_insert_and_each_gets_the_event_append_gives(
    j: journal.Journal, db_path: Path, loop: asyncio.AbstractEventLoop, inserts: list[tuple[int, bool]]
) -> None:
    for s in ("a", "b", "c"):
        j.create_session(s)
        j.append(s, "user_message", {"content": "first"})  # the store knows each next seq now
    writes = [plain(s, data={"content": f"{s}{n}"}) for n in range(2) for s in ("a", "b", "c")]
    items = run_round(j, loop, writes)
    assert inserts == [(6, True)]
    assert [i.error for i in items] == [None] * 6
    got = [i.result for i in items]
    assert [(e.session_id, e.seq, e.data["content"]) for e in got] == [
        (s, 1 + n, f"{s}{n}") for n in range(2) for s in ("a", "b", "c")
    ]
    with journal.open(db_path) as fresh:  # durable, as each was told
        for s in ("a", "b", "c"):
            stored = fresh.events(s)[1:]
            assert [(e.seq, e.type, e.data, e.time_ms) for e in stored] == [
                (e.seq, e.type, e.data, e.time_ms) for e in got if e.session_id == s
            ]
        assert fresh.check() == []
    # The next plain append follows on from the round's rows.
    assert j.append("a", "user_message", NOTE).seq == 3


def test_g4_a_stale_guess_in_a_round_is_found_out_and_every_append_lands_in_order(
    j: journal.Journal, db_path: Path, loop: asyncio.AbstractEventLoop, inserts: list[tuple[int, bool]]
) -> None:
    j.create_session("a")
    j.create_session("b")
    j.append("a", "user_message", NOTE)
    j.append("b", "user_message", NOTE)
    with journal.open(db_path) as elsewhere:  # another writer appends: this journal's guess of a is stale
        elsewhere.append("a", "user_message", {"content": "from elsewhere"})
    items = run_round(j, loop, [plain("a", data={"content": "x"}), plain("b", data={"content": "y"})])
    assert [i.error for i in items] == [None, None]
    assert [(e.session_id, e.seq) for e in (i.result for i in items)] == [("a", 2), ("b", 1)]
    assert inserts[0] == (2, False)  # tried as one insert, refused, then each append ran itself
    assert [e.data["content"] for e in j.events("a")] == ["a message of ordinary length", "from elsewhere", "x"]
    assert j.check() == []


def test_g2_a_bad_or_unknown_append_in_a_round_fails_alone_with_the_error_append_gives(
    j: journal.Journal, loop: asyncio.AbstractEventLoop
) -> None:
    j.create_session("a")
    j.append("a", "user_message", NOTE)
    bad = ("a", "no_such_type", dict(NOTE))
    expected: dict[str, type[BaseException]] = {}
    for name, args in (("bad", bad), ("ghost", ("ghost", "user_message", dict(NOTE)))):
        with pytest.raises(JournalError) as raised:
            j.append(*args)
        expected[name] = type(raised.value)
    assert expected["ghost"] is SessionNotFound
    before = j.count("a")
    items = run_round(
        j, loop, [plain("a"), plain(bad[0], bad[1], bad[2]), plain("ghost"), plain("a", data={"content": "last"})]
    )
    assert type(items[1].error) is expected["bad"]
    assert type(items[2].error) is expected["ghost"]
    assert items[0].error is None and items[3].error is None
    assert [items[0].result.seq, items[3].result.seq] == [before, before + 1]
    assert j.count("a") == before + 2
    assert j.check() == []


def test_a_round_keeps_its_writes_in_order_around_one_that_is_not_a_plain_append(
    j: journal.Journal, loop: asyncio.AbstractEventLoop, inserts: list[tuple[int, bool]]
) -> None:
    j.create_session("a")
    j.append("a", "user_message", NOTE)
    items = run_round(
        j,
        loop,
        [
            plain("a", data={"content": "1"}),
            plain("a", data={"content": "2"}),
            other(lambda jj: jj.append_many("a", [("x.note", {"n": 3})])),
            other(lambda jj: jj.append("a", "user_message", {"content": "4"}, key="k4")),
            plain("a", data={"content": "5"}),
        ],
    )
    assert [i.error for i in items] == [None] * 5
    assert inserts[0] == (2, True)  # the two before the batch, inserted before it ran
    contents = [e.data.get("content", e.data.get("n")) for e in j.events("a")[1:]]
    assert contents == ["1", "2", 3, "4", "5"]
    results = [i.result for i in items]
    assert [r.seq for r in results[:2]] == [1, 2]
    assert [r.seq for r in results[2]] == [3]
    assert [results[3].seq, results[4].seq] == [4, 5]
    assert all(isinstance(r, Event) for r in (results[0], results[1], results[3], results[4]))


def test_many_coroutines_appending_at_once_each_get_their_event_and_the_log_holds_them_in_order(
    db_path: Path,
) -> None:
    async def main() -> dict[str, list[Event]]:
        async with journal.aio.open(db_path) as aj:
            for t in range(16):
                await aj.create_session(f"s{t}")

            async def agent(t: int) -> list[Event]:
                return [await aj.append(f"s{t}", "user_message", {"content": f"{t}.{n}"}) for n in range(25)]

            got = await asyncio.gather(*(agent(t) for t in range(16)))
            return {f"s{t}": events for t, events in enumerate(got)}

    told = asyncio.run(main())
    with journal.open(db_path) as j:
        for sid, events in told.items():
            stored = j.events(sid)
            assert [(e.seq, e.data, e.time_ms) for e in stored] == [(e.seq, e.data, e.time_ms) for e in events]
            assert [e.data["content"] for e in stored] == [f"{sid[1:]}.{n}" for n in range(25)]
        assert j.check() == []


AGENTS = """
import asyncio, os, sys, journal, journal.aio

async def main():
    ledger = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    async with journal.aio.open(sys.argv[1]) as aj:
        for t in range(16):
            try:
                await aj.session(f"s{t}")
            except journal.SessionNotFound:
                await aj.create_session(f"s{t}")
        print("ready", flush=True)

        async def agent(t):
            n = 0
            while True:
                event = await aj.append(f"s{t}", "user_message", {"content": f"{sys.argv[3]}.{t}.{n}"})
                os.write(ledger, f"{event.session_id} {event.seq} {event.data['content']}\\n".encode())
                n += 1

        await asyncio.gather(*(agent(t) for t in range(16)))

asyncio.run(main())
"""


@pytest.mark.parametrize("delay", [0.2, 0.5])
def test_g1_g4_a_kill_while_coroutines_append_keeps_every_awaited_event_at_the_seq_it_was_given(
    db_path: Path, tmp_path: Path, delay: float
) -> None:
    """Sixteen coroutines append without pause (the writer's rounds full of plain appends, one
    insert each) and record each awaited event outside the journal; the process is killed, run
    again (the store's guesses of each session's next seq start empty) and killed again. Every
    event an append returned is in the log at the seq it was told, with its content, and every
    session is contiguous."""
    import signal
    import time

    from tests.conftest import python_child

    ledger = tmp_path / "ledger"
    for run in range(2):
        child = python_child(AGENTS, str(db_path), str(ledger), str(run))
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)
        assert child.returncode == -signal.SIGKILL
    told = [line.split(" ", 2) for line in ledger.read_text().splitlines() if line.count(" ") == 2]
    assert len(told) > 16  # the appends ran
    with journal.open(db_path) as j:
        stored = {(e.session_id, e.seq): e.data["content"] for t in range(16) for e in j.events(f"s{t}")}
        for sid, seq, content in told:
            assert stored.get((sid, int(seq))) == content
        for t in range(16):
            assert [e.seq for e in j.events(f"s{t}")] == list(range(j.count(f"s{t}")))
        assert j.check() == []
