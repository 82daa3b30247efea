"""Every commit boundary of the live loop, killed for real (SIGKILL in a child process).

A clean run of the scripted workload records, at each crash point, how many events an
independent reader saw committed and how many side effects the ledger held. Then, for each
point, a child runs the same workload armed to die there; the reopened file must hold exactly
those events, a turn journal that agrees with the log, and the same ledger.
"""

from __future__ import annotations

import functools
import signal
import tempfile
from pathlib import Path

import pytest

import journal
from journal import crash
from journal.testing import Ledger, workload

from .conftest import run_child

SESSION = "agent"


def _strip(events: list[journal.Event]) -> list[tuple[str, dict]]:
    return [(e.type, e.data) for e in events]


@functools.cache
def _clean_run() -> tuple[list[tuple[str, dict]], list[tuple[str, int, int, int]]]:
    """The clean run's events and, per crash point reached, (point, occurrence, events, ledger).

    Computed once, at collection time (the crash cases are parametrized from it), in a
    temporary directory."""
    with tempfile.TemporaryDirectory() as root:
        return _trace(Path(root))


def _trace(root: Path) -> tuple[list[tuple[str, dict]], list[tuple[str, int, int, int]]]:
    path, ledger = root / "j.db", Ledger(root / "ledger")
    trace: list[tuple[str, int, int, int]] = []
    seen: dict[str, int] = {}
    with journal.open(path) as j:
        j.create_session(SESSION)
        reader = journal.open(path, readonly=True)

        def record(name: str) -> None:
            seen[name] = seen.get(name, 0) + 1
            trace.append((name, seen[name], reader.count(SESSION), len(ledger.entries())))

        try:
            with crash.observing(record):
                workload.run(j, SESSION, ledger)
        finally:
            reader.close()
        return _strip(j.events(SESSION)), trace


def _points(trace: list[tuple[str, int, int, int]]) -> list[tuple[str, int, int, int]]:
    """The first and the last occurrence of every point the workload reaches."""
    last: dict[str, tuple[str, int, int, int]] = {}
    first: dict[str, tuple[str, int, int, int]] = {}
    for entry in trace:
        first.setdefault(entry[0], entry)
        last[entry[0]] = entry
    return sorted(set(first.values()) | set(last.values()))


def _cases(trace: list[tuple[str, int, int, int]]) -> list[object]:
    """One case per point and occurrence: the last occurrence in the default run (the longest
    committed prefix and ledger to keep exactly), an earlier one of the same point marked slow
    (the same commit boundary again, in an earlier turn)."""
    last = {entry[0]: entry for entry in trace}
    return [
        pytest.param(*entry, id=f"{entry[0]}:{entry[1]}", marks=() if last[entry[0]] == entry else pytest.mark.slow)
        for entry in _points(trace)
    ]


@pytest.fixture
def clean_trace():
    return _clean_run()


def test_the_workload_reaches_every_live_loop_commit_boundary(clean_trace) -> None:
    reached = {name for name, *_ in clean_trace[1]}
    for op in ("turn_start", "step_start", "provider_started", "save_chunk", "assistant", "dispatch", "put_result",
               "step_end", "turn_end", "append"):  # fmt: skip
        assert {f"{op}.before_commit", f"{op}.after_commit"} <= reached
        assert f"{op}.before_commit" in crash.POINTS
    assert set(crash.TOOL_POINTS) <= reached


CHILD = """
import sys, journal
from journal.testing import Ledger, workload
with journal.open(sys.argv[1]) as j:
    j.create_session(sys.argv[2])
    workload.run(j, sys.argv[2], Ledger(sys.argv[3]))
print("finished without crashing")
"""


@pytest.mark.parametrize(("point", "occurrence", "committed", "effects"), _cases(_clean_run()[1]))
def test_a_kill_at_each_commit_boundary_keeps_exactly_what_was_committed(
    tmp_path: Path, point: str, occurrence: int, committed: int, effects: int
) -> None:
    clean_events = _clean_run()[0]
    path, ledger = tmp_path / "j.db", Ledger(tmp_path / "ledger")
    done = run_child(CHILD, str(path), SESSION, str(ledger.path), env={"JOURNAL_CRASH_AT": f"{point}:{occurrence}"})
    assert done.returncode == -signal.SIGKILL, (point, done.stdout, done.stderr)
    with journal.open(path) as j:
        assert j.integrity_check() == ["ok"]
        events = j.events(SESSION)
        assert _strip(events) == clean_events[:committed], point
        assert j.check() == [], point
    assert len(ledger.entries()) == effects


def _kill_at(tmp_path: Path, point: str) -> tuple[list[journal.Event], Ledger]:
    path, ledger = tmp_path / "j.db", Ledger(tmp_path / "ledger")
    done = run_child(CHILD, str(path), SESSION, str(ledger.path), env={"JOURNAL_CRASH_AT": point})
    assert done.returncode == -signal.SIGKILL, done.stderr
    with journal.open(path) as j:
        return j.events(SESSION), ledger


def test_g6_kill_between_the_dispatch_commit_and_the_tool_run_leaves_the_dispatch_and_no_effect(tmp_path: Path) -> None:
    events, ledger = _kill_at(tmp_path, "dispatch.after_commit")
    assert events[-1].type == "tool_call"
    assert ledger.entries() == []


def test_g6_kill_after_the_side_effect_and_before_the_result_commit_leaves_evidence_of_both(tmp_path: Path) -> None:
    events, ledger = _kill_at(tmp_path, "put_result.before_commit")
    assert events[-1].type == "tool_call"
    call_id = events[-1].data["id"]
    assert ledger.count(call=call_id) == 1
    assert not any(e.type == "tool_result" and e.data["tool_call_id"] == call_id for e in events)


# -- the points outside the live loop: queue, reconciler, operator path, purge, schema ----------

OPERATIONS_CHILD = """
import sys, journal
from journal.testing.bot import work
from journal.testing import Ledger

path, ledger = sys.argv[1], Ledger(sys.argv[2])
with journal.open(path) as j:                        # create_schema
    s = j.create_session("bot").id
    j.submit(s, "user_message", {"content": "first"})  # submit
    claim = j.claim(owner="elsewhere:1:1")             # claim
    claim.renew()                                      # renew
    claim.requeue()                                    # requeue
    claim = j.claim(owner="elsewhere:1:1")
    claim.fail("the model refused")                    # fail
    j.submit(s, "user_message", {"content": "second"})
    claim = j.claim(owner="elsewhere:1:1", lease_ms=1)
    claim.turn.step_start()
    j.reconcile(now_ms=journal.log.now_ms() + 60_000)  # reconcile
    work(j, ledger)
    tools = journal.ToolRegistry(on_indeterminate=lambda call: print("operator paged", file=sys.stderr))
    tools.register("email", lambda args, ctx: ledger.record(call=ctx.call_id), effects=journal.Unsafe())
    turn = j.turn_start(s)
    turn.step_start()
    turn.assistant("", tool_calls=[{"id": "mail-1", "name": "email", "arguments": {}}])
    j.dispatch(s, "mail-1", turn=turn, effect="unsafe")   # dispatched, the tool never reports
    j.recover_effects(tools)                            # effect_recovery, notify
    j.resolve(s, "mail-1", outcome="did_not_run")       # resolve
    j.recover(s)
    j.append_many(s, [("x.note", {"n": 1}), ("x.note", {"n": 2})])
    j.fork(s, id="copy")
    from journal import transfer
    exported = [line.replace('"copy"', '"copy2"') for line in transfer.export_lines(j, ["copy"])]
    transfer.import_lines(j, exported)                  # import
    j.purge(s, copy_forks=True)                         # purge
    j.set_state("copy2", {"channel": [1, 2]})           # set_state
    j.append("copy2", "user_message", {"content": "oops"})
    j.retract("copy2")                                  # retract
    j.append("copy2", "turn_start", {"turn": 9})        # a turn no process owns
    j.take_over("copy2").complete()                     # take_over
import asyncio

async def through_the_async_face():
    async with journal.aio.open(path) as aj:
        await asyncio.gather(*(aj.append("copy2", "x.note", {"n": n}) for n in range(3, 6)))  # writer
asyncio.run(through_the_async_face())
print("finished")
"""

OTHER_POINTS = [
    f"{op}.{when}"
    for op in (
        "create_schema",
        "submit",
        "claim",
        "renew",
        "requeue",
        "fail",
        "reconcile",
        "effect_recovery",
        "notify",
        "resolve",
        "import",
        "purge",
        "writer",
        "set_state",
        "retract",
        "take_over",
    )
    for when in ("before_commit", "after_commit")
]


def test_every_crash_point_is_reached_by_the_workload_or_the_operations_script(tmp_path: Path) -> None:
    code = "from journal import crash\n_observe = crash.observing(print)\n_observe.__enter__()\n" + OPERATIONS_CHILD
    done = run_child(code, str(tmp_path / "j.db"), str(tmp_path / "ledger"))
    assert done.returncode == 0, done.stderr
    reached = set(done.stdout.split()) | set(_points_reached_by_workload())
    assert set(OTHER_POINTS) <= reached
    # migrate_schema's points need a file of an older version: tests/test_migrate.py has them.
    wanted = {p for p in crash.POINTS if not p.startswith("migrate_schema.")}
    assert wanted <= reached, sorted(wanted - reached)


def _points_reached_by_workload() -> list[str]:
    return [name for name, *_ in _clean_run()[1]]


@pytest.mark.parametrize("point", OTHER_POINTS)
def test_a_kill_at_every_other_commit_boundary_is_survived(tmp_path: Path, point: str) -> None:
    path, ledger = tmp_path / "j.db", tmp_path / "ledger"
    done = run_child(OPERATIONS_CHILD, str(path), str(ledger), env={"JOURNAL_CRASH_AT": point})
    assert done.returncode == -signal.SIGKILL, (point, done.stdout, done.stderr)
    with journal.open(path) as j:
        assert j.integrity_check() == ["ok"]
        assert j.check() == []
        j.reconcile(now_ms=journal.log.now_ms() + 3_600_000)
        j.recover()
        report = j.scan()
        assert report.open_turns == () and report.stale_submissions == ()
        assert j.check() == []
    assert Ledger(ledger).repeated("call") == {}
