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


@pytest.mark.parametrize(
    ("point", "occurrence", "committed", "effects"),
    _points(_clean_run()[1]),
    ids=[f"{p}:{n}" for p, n, _, _ in _points(_clean_run()[1])],
)
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
