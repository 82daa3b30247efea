"""The async face (DESIGN §13): ``journal.aio``, its writer thread, its guarantees.

Each test runs its own event loop (``asyncio.run``). Durability and crash safety are checked
through a fresh connection or a fresh, SIGKILLed process, as for the sync API.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from pathlib import Path
from typing import Any

import apsw
import pytest

import journal
import journal.aio
from journal.aio import AsyncJournal
from journal.engine import KINDS
from journal.testing import Ledger

from .conftest import python_child, run_child
from .raw import WriteLock

CALL = {"id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def user(text: str) -> dict[str, Any]:
    return {"content": text}


# -- the twins ------------------------------------------------------------------------------------

# That every public method of Journal has a twin with its parameters, run as its declared kind,
# and typed for users, is checked in tests/test_typed.py.


def test_a_session_through_the_async_face_reads_back_as_the_sync_api_wrote_it(tmp_path: Path) -> None:
    async def main() -> list[journal.Event]:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            session = await aj.create_session("s", meta={"title": "async"})
            assert session.id == "s"
            first = await aj.append("s", "user_message", user("add 1 and 2"))
            assert (first.seq, first.data) == (0, user("add 1 and 2"))
            async with aj.turn("s") as turn:
                async with turn.step():
                    await turn.assistant("", tool_calls=[CALL])
                    async with turn.dispatch("c1") as call:
                        assert call.arguments == {"a": 1, "b": 2}
                        outcome = await call.result(str(sum(call.arguments.values())))
                        assert outcome.won
                async with turn.step():
                    await turn.assistant("3", stop_reason="stop")
            assert turn.closed
            assert [m.content for m in await aj.messages("s")] == ["add 1 and 2", "", "3", "3"]
            assert (await aj.session("s")).count == 11
            assert await aj.check() == []
            return await aj.events("s")

    events = run(main())
    with journal.open(tmp_path / "j.db") as j:  # a fresh connection
        assert j.events("s") == events
        assert [e.type for e in events] == [
            "user_message", "turn_start", "step_start", "assistant_message", "tool_call", "tool_result",
            "step_end", "step_start", "assistant_message", "step_end", "turn_end",
        ]  # fmt: skip
        assert j.scan().open_turns == ()


def test_errors_are_the_sync_apis_and_are_raised_in_the_awaiting_task(tmp_path: Path) -> None:
    async def main() -> None:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            with pytest.raises(journal.SessionNotFound):
                await aj.append("nobody", "user_message", user("hi"))
            await aj.create_session("s")
            with pytest.raises(journal.SessionExists):
                await aj.create_session("s")
            with pytest.raises(journal.InvalidEvent):
                await aj.append("s", "user_message", {"content": 3})
            with pytest.raises(journal.SessionNotFound):
                await aj.events("nobody")
            assert await aj.count("s") == 0

    run(main())


def test_g13_a_foreign_file_or_a_bad_option_is_refused_when_awaited_and_left_untouched(tmp_path: Path) -> None:
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a journal\n")

    async def main() -> None:
        with pytest.raises(journal.NotAJournal):
            await journal.aio.open(foreign)
        with pytest.raises(journal.InvalidArgument):
            async with journal.aio.open(tmp_path / "j.db", durability="sometimes"):
                pass

    run(main())
    assert foreign.read_text() == "not a journal\n"


def test_g13_writes_queued_while_the_open_fails_raise_journal_closed_and_close_returns(tmp_path: Path) -> None:
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a journal\n")

    async def main() -> None:
        aj = journal.aio.open(foreign)
        opening = asyncio.ensure_future(aj.__aenter__())
        await asyncio.sleep(0)  # the open has begun, in the writer thread
        write = asyncio.ensure_future(aj.create_session("s"))
        with pytest.raises(journal.NotAJournal):
            await opening
        with pytest.raises(journal.JournalClosed):  # queued or refused: never left waiting
            await asyncio.wait_for(write, 60)
        await asyncio.wait_for(aj.close(), 60)  # nothing to drain: it returns
        await aj.close()

    run(main())
    assert foreign.read_text() == "not a journal\n"


def test_after_close_every_call_raises_journal_closed(tmp_path: Path) -> None:
    async def main() -> None:
        aj = await journal.aio.open(tmp_path / "j.db")
        await aj.create_session("s")
        await aj.close()
        await aj.close()  # twice: nothing
        with pytest.raises(journal.JournalClosed):
            await aj.append("s", "user_message", user("late"))
        with pytest.raises(journal.JournalClosed, match="the journal is closed"):
            await aj.events("s")

    run(main())


def test_a_journal_used_before_it_is_opened_says_how_to_open_it(tmp_path: Path) -> None:
    """``journal.aio.open(path)`` not awaited (handed to an adapter, say) was reported "closed"."""

    async def main() -> None:
        aj = journal.aio.open(tmp_path / "j.db")
        for use in (lambda: aj.create_session("s"), lambda: aj.events("s")):
            with pytest.raises(journal.JournalClosed, match=r"not open yet: await journal\.aio\.open") as refused:
                await use()
            assert refused.value.opened is False
        await aj.close()  # never opened: closing is a no-op, and then it is closed
        with pytest.raises(journal.JournalClosed, match="the journal is closed"):
            await aj.events("s")
        assert not (tmp_path / "j.db").exists()

    run(main())


# -- group commit: shared commits, each write its own fate ------------------------------------------


def test_g1_64_coroutines_share_commits_and_every_awaited_append_is_durable(tmp_path: Path) -> None:
    async def main() -> tuple[list[journal.Event], int]:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            for i in range(64):
                await aj.create_session(f"s{i}")
            before = aj.commits

            async def agent(i: int) -> list[journal.Event]:
                return [await aj.append(f"s{i}", "user_message", user(f"{i}.{k}")) for k in range(10)]

            done = await asyncio.gather(*(agent(i) for i in range(64)))
            return [e for events in done for e in events], aj.commits - before

    returned, commits = run(main())
    assert len(returned) == 640
    assert commits < 640 / 4  # most commits carried several appends
    with journal.open(tmp_path / "j.db") as j:
        for event in returned:
            assert j.events(event.session_id, since=event.seq)[0] == event


def test_g2_a_refused_write_in_a_shared_commit_fails_alone(tmp_path: Path) -> None:
    async def main() -> list[Any]:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            await aj.create_session("s")
            async with aj.turn("s") as turn:
                await turn.step_start()
                await turn.assistant("", tool_calls=[CALL])
                await turn.dispatch("c1")
                writes = [
                    aj.append("s", "x.note", {"n": 1}),
                    aj.append("nobody", "user_message", user("no such session")),  # SessionNotFound
                    aj.append("s", "x.note", {"n": 2}),
                    aj.dispatch("s", "c1"),  # AlreadyDispatched
                    aj.append("s", "user_message", {"content": None}),  # InvalidEvent
                    aj.dispatch("s", "c9"),  # UnknownToolCall
                    aj.append("s", "x.note", {"n": 3}),
                    aj.put_result("s", "c1", "3"),
                    aj.put_result("s", "c1", "three"),  # the first result wins (G5)
                ]
                outcomes = await asyncio.gather(*writes, return_exceptions=True)
                await turn.step_end()
            return outcomes

    outcomes = run(main())
    kinds = [type(o).__name__ for o in outcomes]
    assert kinds == [
        "Event", "SessionNotFound", "Event", "AlreadyDispatched", "InvalidEvent", "UnknownToolCall", "Event",
        "PutResult", "PutResult",
    ]  # fmt: skip
    assert outcomes[7].won and not outcomes[8].won
    with journal.open(tmp_path / "j.db") as j:
        notes = [e.data["n"] for e in j.events("s") if e.type == "x.note"]
        assert notes == [1, 2, 3]
        results = [e for e in j.events("s") if e.type == "tool_result"]
        assert [r.data["content"] for r in results] == ["3"]
        assert j.check() == []


def test_g4_64_coroutines_appending_to_one_session_get_contiguous_distinct_seqs(tmp_path: Path) -> None:
    async def main() -> list[int]:
        async with journal.aio.open(tmp_path / "j.db", durability="normal") as aj:
            await aj.create_session("s")

            async def agent(i: int) -> list[int]:
                return [(await aj.append("s", "x.note", {"who": i, "k": k})).seq for k in range(20)]

            done = await asyncio.gather(*(agent(i) for i in range(64)))
            return [seq for seqs in done for seq in seqs]

    seqs = run(main())
    assert sorted(seqs) == list(range(64 * 20))
    with journal.open(tmp_path / "j.db") as j:
        events = j.events("s")
        assert [e.seq for e in events] == list(range(64 * 20))
        per_agent: dict[int, list[int]] = {}
        for e in events:
            per_agent.setdefault(e.data["who"], []).append(e.data["k"])
        assert all(ks == list(range(20)) for ks in per_agent.values())  # each agent's order kept


def test_a_sync_journal_another_process_and_an_async_journal_write_the_same_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        for name in ("async", "thread", "process"):
            j.create_session(name)
    child = python_child(
        """
        import sys, journal
        with journal.open(sys.argv[1]) as j:
            for k in range(200):
                j.append("process", "x.note", {"k": k})
        """,
        str(path),
    )

    def sync_writer() -> None:
        with journal.open(path) as j:
            for k in range(200):
                j.append("thread", "x.note", {"k": k})

    async def main() -> None:
        async with journal.aio.open(path) as aj:
            thread = threading.Thread(target=sync_writer)
            thread.start()
            await asyncio.gather(*(aj.append("async", "x.note", {"k": k}) for k in range(200)))
            await asyncio.get_running_loop().run_in_executor(None, thread.join)

    run(main())
    assert child.wait(timeout=120) == 0, child.stderr.read() if child.stderr else ""
    with journal.open(path) as j:
        for name in ("async", "thread", "process"):
            assert sorted(e.data["k"] for e in j.events(name)) == list(range(200)), name
        assert j.check() == []


# -- the loop never waits on the database (its lag is measured by bench/aio.py, not asserted) -------


@contextlib.contextmanager
def _statements_by_thread() -> Any:
    """Every SQL statement run on a connection opened inside the block, with the thread that ran
    it: apsw's connection hook gives each new connection an exec trace."""
    seen: list[tuple[int, str]] = []

    def trace(cursor: Any, sql: str, bindings: Any) -> bool:
        seen.append((threading.get_ident(), sql))
        return True  # run it

    def hook(conn: Any) -> None:
        conn.exec_trace = trace

    apsw.connection_hooks.append(hook)
    try:
        yield seen
    finally:
        apsw.connection_hooks.remove(hook)


def test_no_database_call_runs_on_the_loop_thread_while_64_coroutines_write_and_read(tmp_path: Path) -> None:
    async def main() -> int:
        async with journal.aio.open(tmp_path / "j.db") as aj:

            async def agent(i: int) -> None:
                await aj.create_session(f"s{i}")
                async with aj.turn(f"s{i}") as turn, turn.step():
                    await turn.assistant("", tool_calls=[CALL])
                    async with turn.dispatch("c1") as call:
                        await call.result("3")
                for k in range(10):
                    await aj.append(f"s{i}", "user_message", user(f"{k}"))
                assert len(await aj.events(f"s{i}")) == 17  # a turn of 7 events, 10 messages
                assert (await aj.scan()).open_turns == ()

            await asyncio.gather(*(agent(i) for i in range(64)))
        return threading.get_ident()

    with _statements_by_thread() as seen:
        loop_thread = run(main())
    assert len(seen) > 64 * 17  # the probe saw the workload's statements (the writer's, the readers')
    on_the_loop = [sql for thread, sql in seen if thread == loop_thread]
    assert on_the_loop == [], on_the_loop[:5]


def test_the_loop_keeps_running_while_a_write_waits_on_the_database(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
    holder = WriteLock(path)  # another connection holds the write lock: the writer's BEGIN waits

    async def main() -> int:
        async with journal.aio.open(path, busy_timeout_ms=600_000) as aj:
            pending = asyncio.ensure_future(aj.append("s", "x.note", {"k": 0}))
            # Until the writer thread is inside its BEGIN, blocked on the lock: then the loop
            # must go on running (a count of its own turns, not a clock) while the write waits.
            while not any(sql.startswith("BEGIN IMMEDIATE") for _, sql in seen):
                await asyncio.sleep(0)
            turns = 0
            while turns < 1000:
                await asyncio.sleep(0)
                turns += 1
                assert not pending.done()  # the write is still waiting for the database
            holder.release()
            assert (await pending).seq == 0
            return turns

    with _statements_by_thread() as seen:
        assert run(main()) == 1000
    with journal.open(path) as fresh:
        assert [e.data for e in fresh.events("s")] == [{"k": 0}]


# -- cancellation, and close with writes in flight -------------------------------------------------


def _hold_the_writer(aj: AsyncJournal) -> tuple[threading.Event, threading.Event, asyncio.Future[Any]]:
    """A write that holds the writer thread until released: what is queued behind it waits."""
    started, release = threading.Event(), threading.Event()

    def hold(j: journal.Journal) -> None:
        started.set()
        release.wait(30)

    return started, release, asyncio.ensure_future(aj._write(hold, alone=True))


def test_a_write_cancelled_before_the_writer_took_it_is_withdrawn(tmp_path: Path) -> None:
    async def main() -> None:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            await aj.create_session("s")
            started, release, held = _hold_the_writer(aj)
            await asyncio.get_running_loop().run_in_executor(None, started.wait)
            task = asyncio.ensure_future(aj.append("s", "user_message", user("never")))
            await asyncio.sleep(0.01)  # queued behind the held write
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            release.set()
            await held
            kept = await aj.append("s", "user_message", user("after"))
            assert kept.seq == 0  # nothing took seq 0 before it

    run(main())
    with journal.open(tmp_path / "j.db") as j:
        assert [e.data["content"] for e in j.events("s")] == ["after"]


def test_a_write_cancelled_after_the_writer_took_it_completes_and_the_task_sees_cancelled(tmp_path: Path) -> None:
    async def main() -> None:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            await aj.create_session("s")
            taken, release = threading.Event(), threading.Event()

            def append_slowly(j: journal.Journal) -> journal.Event:
                taken.set()
                release.wait(30)
                return j.append("s", "user_message", user("taken"))

            task = asyncio.ensure_future(aj._write(append_slowly))
            await asyncio.get_running_loop().run_in_executor(None, taken.wait)
            task.cancel()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Reading shows the outcome: it was committed all the same.
            assert [e.data["content"] for e in await aj.events("s")] == ["taken"]

    run(main())
    with journal.open(tmp_path / "j.db") as j:
        assert [e.data["content"] for e in j.events("s")] == ["taken"]


def test_close_commits_every_write_queued_before_it_and_refuses_the_rest(tmp_path: Path) -> None:
    async def main() -> list[Any]:
        aj = await journal.aio.open(tmp_path / "j.db")
        await aj.create_session("s")
        started, release, held = _hold_the_writer(aj)
        await asyncio.get_running_loop().run_in_executor(None, started.wait)
        queued = [asyncio.ensure_future(aj.append("s", "x.note", {"k": k})) for k in range(50)]
        await asyncio.sleep(0.01)  # all 50 are queued behind the held write
        closing = asyncio.ensure_future(aj.close())
        await asyncio.sleep(0.01)
        late = asyncio.ensure_future(aj.append("s", "x.note", {"k": "late"}))
        release.set()
        await closing
        await held
        return await asyncio.gather(*queued, late, return_exceptions=True)

    outcomes = run(main())
    assert all(isinstance(o, journal.Event) for o in outcomes[:50])
    assert isinstance(outcomes[50], journal.JournalClosed)
    with journal.open(tmp_path / "j.db") as j:
        assert [e.data["k"] for e in j.events("s")] == list(range(50))


# -- one loop: a call from another loop is refused before anything is queued ----------------------------

# What each twin is called with from the wrong loop: calls that would write if they ran, so that
# the fresh process's read below shows that none of them did.
MISUSE_ARGS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "create_session": (("misuse",), {}),
    "append": (("s", "x.note", {"k": "misuse"}), {}),
    "append_many": (("s", [("x.note", {"k": "misuse"})]), {}),
    "fork": (("q",), {"id": "misuse"}),
    "submit": (("q", "user_message", user("again")), {}),
    "claim": ((), {}),
    "put_result": (("s", "c1", "3"), {}),
    "dispatch": (("s", "c1"), {}),
    "set_state": (("s", {"k": "misuse"}), {}),
    "save_chunk": (("s", "misuse", 0, "chunk"), {}),
    "retract": (("q",), {}),
    "purge": (("q",), {}),
    "recover": ((), {"force": True}),
    "reconcile": ((), {"now": 4e9}),
    "recover_effects": ((journal.ToolRegistry(),), {}),
    "resolve": (("s", "c1"), {"outcome": "did_not_run"}),
    "compact": (("q", 0, 0, "summary"), {}),
    "checkpoint": ((), {}),
    "sessions": ((), {}),
    "session_totals": ((), {}),
    "scan": ((), {}),
    "open_turns": (("s",), {}),
    "interrupted": (("s",), {}),
    "indeterminate": ((), {}),
    "check": ((), {}),
    "integrity_check": ((), {}),
    "size_bytes": ((), {}),
    "submissions": ((), {}),
    "submission": (("nothing",), {}),
    "stream_chunks": (("misuse",), {}),
}


async def _entered(scope: Any) -> None:
    async with scope:
        raise AssertionError("entered from the wrong loop")


async def _first(iterator: Any) -> Any:
    return await iterator.__anext__()


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _every_misuse(aj: AsyncJournal, turn: Any, dispatched: Any, claim: Any) -> list[tuple[str, Any]]:
    """Every call of the async face, on the journal and on its handles, as a factory of the
    coroutine that makes it (a context manager is entered, ``follow`` is iterated once)."""
    calls: list[tuple[str, Any]] = []
    for name in (*KINDS, "take_over", "turn_start"):
        if name in ("turn", "dispatch"):  # scopes: entered below
            continue
        args, kwargs = MISUSE_ARGS.get(name, (("s",), {}))
        if name in ("step_start", "step_end", "provider_started", "turn_end"):
            args = (turn,)
        elif name == "record_assistant":
            args = (turn, "misuse")
        elif name in ("fail", "requeue", "renew"):
            args = (claim, "misuse") if name == "fail" else (claim,)
        calls.append((name, lambda name=name, args=args, kwargs=kwargs: _awaited(getattr(aj, name)(*args, **kwargs))))
    calls += [
        ("open", lambda: _awaited(aj)),
        ("async with aj", lambda: _entered(aj)),
        ("aj.turn", lambda: _entered(aj.turn("q"))),
        ("aj.turn resume", lambda: _entered(aj.turn("s", resume=True))),
        ("aj.dispatch", lambda: _awaited(aj.dispatch("s", "c1"))),
        ("turn.step", lambda: _entered(turn.step())),
        ("turn.step_start", lambda: turn.step_start()),
        ("turn.step_end", lambda: turn.step_end()),
        ("turn.provider_started", lambda: turn.provider_started()),
        ("turn.save_chunk", lambda: turn.save_chunk(0, "chunk")),
        ("turn.assistant", lambda: turn.assistant("misuse")),
        ("turn.put_result", lambda: turn.put_result("c1", "3")),
        ("turn.complete", lambda: turn.complete()),
        ("turn.reject", lambda: turn.reject()),
        ("turn.dispatch awaited", lambda: _awaited(turn.dispatch("c1"))),
        ("turn.dispatch entered", lambda: _entered(turn.dispatch("c1"))),
        ("dispatched.result", lambda: dispatched.result("3")),
        ("claim.complete", lambda: claim.complete()),
        ("claim.reject", lambda: claim.reject()),
        ("claim.fail", lambda: claim.fail("misuse")),
        ("claim.requeue", lambda: claim.requeue()),
        ("claim.renew", lambda: claim.renew()),
        ("follow", lambda: _first(aj.follow("s"))),
        ("close", lambda: aj.close()),
    ]
    return calls


async def _handles(aj: AsyncJournal) -> tuple[Any, Any, Any]:
    """A turn with a dispatched call (session ``s``) and a claimed submission (session ``q``)."""
    await aj.create_session("s")
    await aj.create_session("q")
    turn = await aj.turn_start("s")
    await turn.step_start()
    await turn.assistant("", tool_calls=[CALL])
    dispatched = await turn.dispatch("c1")
    await aj.submit("q", "user_message", user("hello"))
    claim = await aj.claim(owner="w")
    assert claim is not None
    return turn, dispatched, claim


def _refused_from(where: str, misuses: list[tuple[str, Any]]) -> list[str]:
    """Run every misuse on a loop of this thread: the names that were not refused with WrongLoop."""

    async def attempt() -> list[str]:
        wrong = []
        for name, make in misuses:
            try:
                await make()
            except journal.WrongLoop as exc:
                if exc.where != where or not isinstance(exc, RuntimeError):
                    wrong.append(f"{name}: {exc!r}")
            except BaseException as exc:
                wrong.append(f"{name}: {exc!r}")
            else:
                wrong.append(f"{name}: not refused")
        return wrong

    return asyncio.run(attempt())


FRESH_READ = """
import json, sys, journal
with journal.open(sys.argv[1], readonly=True) as j:
    log = {s.id: [[e.type, e.data] for e in j.events(s.id)] for s in j.sessions()}
    print(json.dumps({"log": log, "submissions": len(j.submissions()), "chunks": j.stream_chunks("misuse")}))
"""


def _read_in_a_fresh_process(path: Path) -> Any:
    import json

    done = run_child(FRESH_READ, str(path))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _as_read(events: list[journal.Event]) -> list[list[Any]]:
    return [[e.type, e.data] for e in events]


def test_g12_every_call_from_another_loop_of_the_same_thread_is_refused_typed_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    loop = asyncio.new_event_loop()  # the journal's own loop, idle while another one runs
    try:
        aj = loop.run_until_complete(journal.aio.open(path))
        turn, dispatched, claim = loop.run_until_complete(_handles(aj))
        before = loop.run_until_complete(aj.events("s")), loop.run_until_complete(aj.events("q"))
        wrong = _refused_from("another event loop", _every_misuse(aj, turn, dispatched, claim))
        assert wrong == []
        # The journal still works on its own loop, and closes there.
        loop.run_until_complete(aj.append("s", "x.note", {"k": "own loop"}))
        loop.run_until_complete(aj.close())
    finally:
        loop.close()
    seen = _read_in_a_fresh_process(path)
    assert seen["log"] == {"s": [*_as_read(before[0]), ["x.note", {"k": "own loop"}]], "q": _as_read(before[1])}
    assert seen["submissions"] == 1 and seen["chunks"] == []


def test_g12_every_call_from_another_threads_loop_is_refused_typed_while_the_journals_loop_runs(tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    async def main() -> tuple[list[str], Any]:
        async with journal.aio.open(path) as aj:
            turn, dispatched, claim = await _handles(aj)
            before = {"s": _as_read(await aj.events("s")), "q": _as_read(await aj.events("q"))}
            misuses = _every_misuse(aj, turn, dispatched, claim)
            wrong = await asyncio.get_running_loop().run_in_executor(
                None, _refused_from, "an event loop of another thread", misuses
            )
            # The right way from another thread: run the call on the journal's own loop.
            loop = asyncio.get_running_loop()

            def via_own_loop() -> journal.Event:
                return asyncio.run_coroutine_threadsafe(aj.append("s", "x.note", {"k": "threadsafe"}), loop).result(60)

            event = await loop.run_in_executor(None, via_own_loop)
            before["s"].append(["x.note", {"k": "threadsafe"}])
            assert event.seq == len(before["s"]) - 1
            return wrong, before

    wrong, before = run(main())
    assert wrong == []
    seen = _read_in_a_fresh_process(path)
    assert seen["log"] == before and seen["submissions"] == 1 and seen["chunks"] == []


def test_g12_a_call_driven_without_a_running_loop_is_refused_typed_and_the_error_pickles(tmp_path: Path) -> None:
    import pickle

    loop = asyncio.new_event_loop()
    try:
        aj = loop.run_until_complete(journal.aio.open(tmp_path / "j.db"))
        turn, dispatched, claim = loop.run_until_complete(_handles(aj))
        before = loop.run_until_complete(aj.count("s"))
        for name, make in _every_misuse(aj, turn, dispatched, claim):
            coro = make()
            with pytest.raises(journal.WrongLoop) as info:
                coro.send(None)  # stepped by hand: no loop is running
            assert info.value.where == "no running event loop", name
            coro.close()
        error = info.value
        clone = pickle.loads(pickle.dumps(error))
        assert (type(clone), clone.operation, clone.where, str(clone)) == (
            journal.WrongLoop,
            error.operation,
            error.where,
            str(error),
        )
        assert "nothing was queued or written" in str(error)
        assert loop.run_until_complete(aj.count("s")) == before
        loop.run_until_complete(aj.close())
    finally:
        loop.close()


# -- following a session -------------------------------------------------------------------------------


def test_follow_yields_the_log_then_each_new_event_from_this_journal_or_another(tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    async def main() -> list[Any]:
        async with journal.aio.open(path) as aj:
            await aj.create_session("s")
            await aj.append("s", "x.note", {"k": 0})
            seen: list[Any] = []

            async def follower() -> None:
                async for event in aj.follow("s", interval=0.02):
                    seen.append(event.data["k"])
                    if len(seen) == 3:
                        return

            following = asyncio.ensure_future(follower())
            await asyncio.sleep(0.05)
            await aj.append("s", "x.note", {"k": 1})

            def elsewhere() -> None:
                with journal.open(path) as j:
                    j.append("s", "x.note", {"k": 2})

            await asyncio.get_running_loop().run_in_executor(None, elsewhere)
            await asyncio.wait_for(following, 10)
            return seen

    assert run(main()) == [0, 1, 2]


# -- crashes: SIGKILL at the writer's commit boundaries ------------------------------------------------

AGENT = """
import asyncio, sys, journal
from journal.testing import Ledger

path, ledger = sys.argv[1], Ledger(sys.argv[2])

async def agent(aj, s):
    async with aj.turn(s) as turn:
        async with turn.step():
            await turn.assistant("", tool_calls=[{"id": f"{s}-call", "name": "charge", "arguments": {}}])
            async with turn.dispatch(f"{s}-call") as call:
                ledger.record(call=call.call_id)        # the side effect, on the loop
                await call.result("charged")

async def main():
    async with journal.aio.open(path) as aj:
        for i in range(8):
            await aj.create_session(f"s{i}")
        await asyncio.gather(*(agent(aj, f"s{i}") for i in range(8)))
    print("finished")

asyncio.run(main())
"""


@pytest.mark.parametrize("point", ["writer.before_commit", "writer.after_commit"])
@pytest.mark.parametrize("occurrence", [1, 3, 5, 8])
def test_g5_g6_a_kill_at_a_writer_commit_leaves_no_effect_without_its_dispatch_and_recovery_closes_the_rest(
    tmp_path: Path, point: str, occurrence: int
) -> None:
    path, ledger = tmp_path / "j.db", Ledger(tmp_path / "ledger")
    done = run_child(AGENT, str(path), str(ledger.path), env={"JOURNAL_CRASH_AT": f"{point}:{occurrence}"})
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    with journal.open(path) as j:
        assert j.integrity_check() == ["ok"]
        assert j.check() == []
        ran = {entry["call"] for entry in ledger.entries()}
        for session in j.sessions():
            events = j.events(session.id)
            dispatched = {e.data["id"] for e in events if e.type == "tool_call"}
            results = [e.data["tool_call_id"] for e in events if e.type == "tool_result"]
            assert len(results) == len(set(results))  # G5
            # G6: a tool never ran on a dispatch a crash could take back.
            assert {c for c in ran if c.startswith(f"{session.id}-")} <= dispatched
        j.recover()
        report = j.scan()
        assert report.open_turns == ()
        assert j.check() == []
        for session in j.sessions():
            results = [e for e in j.events(session.id) if e.type == "tool_result"]
            assert len(results) <= 1
    assert ledger.repeated("call") == {}


def test_g1_an_awaited_append_survives_a_kill_of_its_process(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    child = python_child(
        """
        import asyncio, os, signal, sys, journal

        async def main():
            async with journal.aio.open(sys.argv[1]) as aj:
                await aj.create_session("s")
                await asyncio.gather(*(aj.append("s", "x.note", {"k": k}) for k in range(100)))
                print("returned", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)   # no close, no cleanup

        asyncio.run(main())
        """,
        str(path),
    )
    out, err = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL, err
    assert out.strip() == "returned"
    with journal.open(path) as j:
        assert sorted(e.data["k"] for e in j.events("s")) == list(range(100))


def test_a_kill_mid_batch_leaves_each_write_whole_and_the_restart_scan_and_recovery_finish(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    code = """
    import asyncio, sys, journal

    async def agent(aj, i):
        await aj.create_session(f"s{i}")
        turn = await aj.turn_start(f"s{i}")
        await turn.step_start()
        calls = [{"id": "a", "name": "t", "arguments": {}}, {"id": "b", "name": "t", "arguments": {}}]
        await turn.assistant("", tool_calls=calls)
        await turn.dispatch("a")
        await aj.append_many(f"s{i}", [("x.note", {"n": 1}), ("x.note", {"n": 2})])
        await turn.put_result("a", "done")
        await turn.dispatch("b")

    async def main():
        async with journal.aio.open(sys.argv[1]) as aj:
            await asyncio.gather(*(agent(aj, i) for i in range(32)))

    asyncio.run(main())
    """
    done = run_child(code, str(path), env={"JOURNAL_CRASH_AT": "writer.before_commit:6"})
    assert done.returncode == -signal.SIGKILL, done.stderr
    with journal.open(path) as j:
        assert j.check() == []
        for session in j.sessions():
            notes = [e.data["n"] for e in j.events(session.id) if e.type == "x.note"]
            assert notes in ([], [1, 2])  # append_many: all or nothing (G2)
        report = j.scan()
        assert report.open_turns  # the kill left turns open
        j.recover()
        assert j.scan().open_turns == ()
        assert j.check() == []
        for session in j.sessions():
            assert j.messages(session.id, provider=True) is not None  # every call answered


# -- the other guarantees, through the async face ------------------------------------------------------


async def _dispatched_turn(aj: AsyncJournal, session: str, call: dict[str, Any]) -> Any:
    """A session with an open turn whose call is dispatched and has no result (a crash mid-tool)."""
    await aj.create_session(session)
    turn = await aj.turn_start(session)
    await turn.step_start()
    await turn.assistant("", tool_calls=[call])
    await turn.dispatch(call["id"], effect="unsafe")
    return turn


def test_g3_purge_through_the_async_face_refuses_a_read_through_fork_unless_asked(tmp_path: Path) -> None:
    async def main() -> None:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            await aj.create_session("s")
            await aj.append_many("s", [("user_message", user("a")), ("user_message", user("b"))])
            fork = await aj.fork("s", id="f")
            with pytest.raises(journal.SessionHasForks):
                await aj.purge("s")
            result = await aj.purge("s", copy_forks=True)
            assert result.forks_copied == (fork.id,)
            assert [m.content for m in await aj.messages("f")] == ["a", "b"]
            with pytest.raises(journal.SessionNotFound):
                await aj.events("s")

    run(main())


def test_g5_a_late_result_is_kept_as_evidence_through_the_async_face(tmp_path: Path) -> None:
    async def main() -> None:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            await _dispatched_turn(aj, "s", CALL)
            first, second = await asyncio.gather(aj.put_result("s", "c1", "3"), aj.put_result("s", "c1", "three"))
            assert first.won and not second.won and second.late is not None
            types = [e.type for e in await aj.events("s")]
            assert types.count("tool_result") == 1 and types.count("tool_result_late") == 1

    run(main())


def test_g7_g8_scan_writes_nothing_and_racing_recoveries_make_one_repair(tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    async def main() -> None:
        async with journal.aio.open(path) as aj:
            for i in range(20):
                await _dispatched_turn(aj, f"s{i}", {**CALL, "id": f"c{i}"})
            before = [await aj.count(f"s{i}") for i in range(20)]
            report = await aj.scan()
            assert len(report.open_turns) == 20
            assert [await aj.count(f"s{i}") for i in range(20)] == before  # the scan wrote nothing

            def sync_recover() -> None:
                with journal.open(path) as j:
                    j.recover(force=True)

            thread = asyncio.get_running_loop().run_in_executor(None, sync_recover)
            await asyncio.gather(aj.recover(force=True), thread)
            counts = [await aj.count(f"s{i}") for i in range(20)]
            await aj.recover(force=True)  # again: nothing to append
            assert [await aj.count(f"s{i}") for i in range(20)] == counts
            assert (await aj.scan()).open_turns == ()
            for i in range(20):
                results = [e for e in await aj.events(f"s{i}") if e.type == "tool_result"]
                ends = [e for e in await aj.events(f"s{i}") if e.type == "turn_end"]
                assert len(results) == 1 and len(ends) == 1  # one repair, not two
            assert await aj.check() == []

    run(main())


def test_g9_g10_an_unsafe_call_that_may_have_run_becomes_indeterminate_until_resolved(tmp_path: Path) -> None:
    ran: list[str] = []

    async def main() -> None:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            await _dispatched_turn(aj, "s", {**CALL, "name": "email"})
            tools = journal.ToolRegistry()
            tools.register("email", lambda args, ctx: ran.append(ctx.call_id), effects=journal.Unsafe())
            await aj.recover_effects(tools)
            assert ran == []  # never re-run (G9)
            assert [c.call_id for c in await aj.indeterminate("s")] == ["c1"]  # a state (G10)
            await aj.resolve("s", "c1", outcome="did_not_run")
            assert await aj.indeterminate("s") == []

    run(main())


def test_g11_a_fork_through_the_async_face_never_inherits_an_open_turn(tmp_path: Path) -> None:
    async def main() -> None:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            await _dispatched_turn(aj, "s", CALL)
            with pytest.raises(journal.OpenTurnError):
                await aj.fork("s")
            assert [s.id for s in await aj.sessions()] == ["s"]

    run(main())


def test_g12_bad_input_in_a_shared_commit_writes_nothing_and_the_rest_commit(tmp_path: Path) -> None:
    async def main() -> list[Any]:
        async with journal.aio.open(tmp_path / "j.db", max_event_bytes=1000) as aj:
            await aj.create_session("s")
            return await asyncio.gather(
                aj.append("s", "x.note", {"n": 1}),
                aj.append("s", "user_message", {"content": "x" * 5000}),  # too big
                aj.append("s", "user_message", {"content": "ok", "surface_op": ["replace", 3, 1]}),  # malformed op
                aj.append_many("s", [("x.note", {"n": 2}), ("no_such_type", {})]),  # the batch: none of it
                aj.append("s", "x.note", {"n": 3}),
                return_exceptions=True,
            )

    outcomes = run(main())
    assert [type(o).__name__ for o in outcomes] == ["Event", "InvalidEvent", "InvalidEvent", "InvalidEvent", "Event"]
    with journal.open(tmp_path / "j.db") as j:
        assert [e.data for e in j.events("s")] == [{"n": 1}, {"n": 3}]


# -- storage faults through the async face (the fault VFS) ----------------------------------------------


def test_g1_a_power_cut_after_shared_commits_loses_no_awaited_write(vfs: Any, tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    async def main() -> list[journal.Event]:
        aj = await journal.aio.open(path, vfs=vfs.name)
        for i in range(8):
            await aj.create_session(f"s{i}")
        returned = await asyncio.gather(*(aj.append(f"s{i % 8}", "x.note", {"k": i}) for i in range(64)))
        vfs.power_loss(torn=True, seed=7)  # the power goes: nothing more reaches the disk
        with contextlib.suppress(journal.JournalError):
            await aj.close()  # its closing checkpoint fails on the dead disk
        return returned

    returned = run(main())
    vfs.reset()
    with journal.open(path) as j:
        assert j.integrity_check() == ["ok"]
        for event in returned:
            assert j.events(event.session_id, since=event.seq)[0] == event
        assert j.check() == []


def test_g6_under_normal_a_dispatch_in_a_shared_commit_survives_a_power_cut(vfs: Any, tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    async def main() -> None:
        aj = await journal.aio.open(path, durability="normal", vfs=vfs.name)
        await aj.create_session("s")
        await aj.create_session("chat")
        turn = await aj.turn_start("s")
        await turn.step_start()
        await turn.assistant("", tool_calls=[CALL])
        # A dispatch queued with plain appends: the round that holds it is synced.
        await asyncio.gather(turn.dispatch("c1"), *(aj.append("chat", "x.note", {"k": k}) for k in range(10)))
        vfs.power_loss()  # the tool ran; then the power went
        with contextlib.suppress(journal.JournalError):
            await aj.close()

    run(main())
    vfs.reset()
    with journal.open(path, durability="normal") as j:
        assert [e.data["id"] for e in j.events("s") if e.type == "tool_call"] == ["c1"]


def test_a_full_disk_fails_every_write_of_the_round_with_a_typed_error_and_the_next_round_works(
    vfs: Any, tmp_path: Path
) -> None:
    path = tmp_path / "j.db"

    async def main() -> tuple[list[Any], journal.Event]:
        async with journal.aio.open(path, vfs=vfs.name) as aj:
            await aj.create_session("s")
            vfs.fail_write(1, full=True, persistent=True)  # the disk is full from the next write on
            outcomes = await asyncio.gather(
                *(aj.append("s", "x.note", {"k": k, "pad": "x" * 2000}) for k in range(20)), return_exceptions=True
            )
            vfs.heal()
            return outcomes, await aj.append("s", "x.note", {"k": "after"})

    outcomes, after = run(main())
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    assert failed and all(isinstance(o, journal.JournalError) for o in failed), outcomes
    vfs.reset()
    with journal.open(path) as j:
        kept = [e.data["k"] for e in j.events("s")]
        returned = [o.data["k"] for o in outcomes if isinstance(o, journal.Event)]
        assert kept == [*returned, "after"] and after.seq == len(returned)
        assert j.check() == []


async def _round_behind_a_held_writer(aj: AsyncJournal, writes: list[Any], arm: Any) -> list[Any]:
    """Queue ``writes`` behind a held writer so that they share ONE round, arm a fault for that
    round's commit, then let it run: each write's own outcome (a result or an error)."""
    started, release, held = _hold_the_writer(aj)
    await asyncio.get_running_loop().run_in_executor(None, started.wait)
    queued = [asyncio.ensure_future(w) for w in writes]
    await asyncio.sleep(0)  # every task has queued its write
    commits = aj.commits
    arm()
    release.set()
    await held
    outcomes = await asyncio.gather(*queued, return_exceptions=True)
    assert aj.commits - commits <= 1  # the held write's round committed nothing: one round or none
    return outcomes


def test_g1_an_fsync_error_at_a_shared_commit_gives_every_write_an_unknown_outcome_never_absent(
    vfs: Any, tmp_path: Path
) -> None:
    path = tmp_path / "j.db"

    async def main() -> list[Any]:
        aj = await journal.aio.open(path, vfs=vfs.name)
        await aj.create_session("s")
        writes = [aj.append("s", "x.note", {"k": k}) for k in range(8)]
        outcomes = await _round_behind_a_held_writer(aj, writes, lambda: vfs.fail_sync(1, suffix="-wal"))
        vfs.crash()  # the process dies before anything else reaches the disk
        with contextlib.suppress(journal.JournalError):
            await aj.close()
        return outcomes

    outcomes = run(main())
    assert all(isinstance(o, journal.JournalIOError) for o in outcomes), outcomes
    assert [(o.operation, o.outcome) for o in outcomes] == [("append", "unknown")] * 8
    assert len({id(o) for o in outcomes}) == 8  # each task raised its own error
    vfs.reset()
    with journal.open(path) as fresh:
        # The commit frame reached the WAL before its fsync failed: after the crash the round is
        # back. "absent" would have been a lie, and a retry would have written it twice.
        assert [e.data["k"] for e in fresh.events("s")] == list(range(8))
        assert fresh.integrity_check() == ["ok"] and fresh.check() == []


def test_g1_a_failed_checkpoint_after_a_shared_commit_gives_every_write_a_present_outcome(
    vfs: Any, tmp_path: Path
) -> None:
    path = tmp_path / "j.db"

    async def main() -> list[Any]:
        async with journal.aio.open(path, vfs=vfs.name, checkpoint_pages=1) as aj:
            await aj.create_session("s")
            await aj.create_session("t")
            writes = [
                aj.append("s", "x.note", {"k": 0}),
                aj.append("nobody", "x.note", {"k": "refused"}),  # fails alone (G2): absent
                aj.append_many("t", [("x.note", {"k": 1}), ("x.note", {"k": 2})]),
                aj.append("s", "x.note", {"k": 3}),
                aj.set_state("t", {"mood": "calm"}),
            ]
            # The COMMIT is synced in the WAL; the auto-checkpoint after it fails writing the
            # database file, and SQLite reports that error from the COMMIT.
            return await _round_behind_a_held_writer(aj, writes, lambda: vfs.fail_write(1, suffix="j.db"))

    outcomes = run(main())
    assert isinstance(outcomes[1], journal.SessionNotFound)
    failed = [o for i, o in enumerate(outcomes) if i != 1]
    assert all(isinstance(o, journal.JournalIOError) for o in failed), outcomes
    assert [(o.operation, o.outcome) for o in failed] == [
        ("append", "present"), ("append_many", "present"), ("append", "present"), ("set_state", "present")
    ]  # fmt: skip
    vfs.reset()
    with journal.open(path) as fresh:  # what the errors said: every write of the round is there
        assert [e.data["k"] for e in fresh.events("s")] == [0, 3]
        assert [e.data["k"] for e in fresh.events("t")] == [1, 2]
        assert fresh.state("t") == {"mood": "calm"}
        assert fresh.integrity_check() == ["ok"] and fresh.check() == []


def test_g1_an_error_of_the_store_that_is_not_the_librarys_never_reaches_a_write_untyped(tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    async def main() -> list[Any]:
        async with journal.aio.open(path) as aj:
            await aj.create_session("s")
            store = aj._writer.journal._store  # private: a store that breaks after its COMMIT
            real = store.batch

            @contextlib.contextmanager
            def batch(operation: str, **kwargs: Any) -> Any:
                with real(operation, **kwargs) as shared:
                    yield shared
                raise RuntimeError("the store broke after committing")

            def arm() -> None:
                store.batch = batch

            writes = [aj.append("s", "x.note", {"k": k}) for k in range(4)]
            outcomes = await _round_behind_a_held_writer(aj, writes, arm)
            del store.batch
            return outcomes

    outcomes = run(main())
    assert all(isinstance(o, journal.JournalIOError) for o in outcomes), outcomes
    assert [o.outcome for o in outcomes] == ["present"] * 4  # re-read: the round is in the file
    assert all(isinstance(o.__cause__, RuntimeError) for o in outcomes)
    with journal.open(path) as fresh:
        assert [e.data["k"] for e in fresh.events("s")] == [0, 1, 2, 3]


def test_g12_a_write_queued_after_close_raises_journal_closed_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    async def main() -> None:
        aj = await journal.aio.open(path)
        await aj.create_session("s")
        turn = await aj.turn_start("s")
        closing = asyncio.ensure_future(aj.close())
        await asyncio.sleep(0)  # close() has begun: it waits for the writer to drain
        for late in (
            aj.append("s", "x.note", {"k": "late"}),
            turn.step_start(),
            aj.submit("s", "user_message", user("x")),
        ):
            with pytest.raises(journal.JournalClosed):
                await late
        await closing
        for late in (aj.append("s", "x.note", {"k": "later"}), turn.complete(), aj.events("s")):
            with pytest.raises(journal.JournalClosed):
                await late

    run(main())
    seen = _read_in_a_fresh_process(path)
    assert [t for t, _ in seen["log"]["s"]] == ["turn_start"] and seen["submissions"] == 0
