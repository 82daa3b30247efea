"""The engine under storage faults, through the fault VFS (DESIGN §9): I/O errors at every write
and every sync index, a full disk, power loss after every commit, torn writes.

The workload is one realistic turn through the public API (a session, a turn, a step, an
assistant message with two tool calls, two dispatches and results, a second step, the turn's
end, with two plain appends, the second of which is a lone INSERT committed on its own): 14
commits. A sweep first counts the writes and syncs a clean run makes (journal.open
included, so schema creation is swept too), then runs it once per index with a fault armed
there. After each run the file is reopened with the default VFS and must pass
`integrity_check`, hold every write whose call returned, hold nothing beyond the write that
failed, agree with `check()`, and take new work. Every error the library raised must be a
`JournalIOError` (or `DiskFull`), never a raw apsw error, and its `outcome` must not contradict
what the reopened file holds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.testing.faultvfs import FaultVFS

SESSION = "s"
CALLS = [
    {"id": "c1", "name": "read_file", "arguments": {"path": "/etc/hosts"}},
    {"id": "c2", "name": "write_file", "arguments": {"path": "/tmp/out", "text": "x" * 300}},
]


@dataclass
class Run:
    """What one run of the workload saw."""

    returned: list[journal.Event] = field(default_factory=list)
    """Events whose write call returned, in order."""
    ops_returned: list[str] = field(default_factory=list)
    error: BaseException | None = None
    failed_op: str | None = None
    journal: journal.Journal | None = None


def _operations(j: journal.Journal) -> list[tuple[str, Callable[[], Any]]]:
    state: dict[str, Any] = {}

    def turn_start() -> journal.Event:
        handle = state["turn"] = j.turn_start(SESSION)
        return journal.Event(SESSION, handle.start_seq, "turn_start", {"turn": handle.turn}, 0)

    def dispatch(call_id: str) -> Callable[[], Any]:
        def run() -> Any:
            state[call_id] = j.dispatch(SESSION, call_id, turn=state["turn"])
            return state[call_id].event

        return run

    def turn() -> Any:
        return state["turn"]

    return [
        ("create_session", lambda: j.create_session(SESSION)),
        ("turn_start", turn_start),
        ("append", lambda: j.append(SESSION, "user_message", {"content": "tidy up my files"})),
        ("append", lambda: j.append(SESSION, "user_message", {"content": "and the backups"})),
        ("step_start", lambda: turn().step_start()),
        ("provider_started", lambda: turn().provider_started(stream_key="s:1:1")),
        ("assistant", lambda: turn().assistant("", tool_calls=CALLS, stop_reason="tool_use")),
        ("dispatch", dispatch("c1")),
        ("put_result", lambda: state["c1"].result("127.0.0.1 localhost", name="read_file").event),
        ("dispatch", dispatch("c2")),
        ("put_result", lambda: state["c2"].result("written", name="write_file").event),
        ("step_end", lambda: turn().step_end()),
        ("step_start", lambda: turn().step_start()),
        ("assistant", lambda: turn().assistant("Done.", stop_reason="stop")),
        ("step_end", lambda: turn().step_end()),
        ("turn_end", lambda: turn().complete()),
    ]


def run_workload(
    path: Path, vfs: FaultVFS, *, durability: str, checkpoint_pages: int | None, arm: Callable[[], None]
) -> Run:
    """Open (through `vfs`) and run the workload, stopping at the first error; the journal is
    left open in `run.journal` (None if the open itself failed)."""
    run = Run()
    vfs.reset()
    arm()
    try:
        run.journal = journal.open(path, durability=durability, vfs=vfs.name, checkpoint_pages=checkpoint_pages)
    except BaseException as exc:
        run.error, run.failed_op = exc, "open"
        return run
    for name, op in _operations(run.journal):
        try:
            value = op()
        except BaseException as exc:
            run.error, run.failed_op = exc, name
            return run
        run.ops_returned.append(name)
        if isinstance(value, journal.Event):
            run.returned.append(value)
    return run


def close_quietly(j: journal.Journal | None) -> None:
    if j is None:
        return
    try:
        j.close()
    except journal.JournalError:
        pass  # the disk may be gone; the connection is closed all the same


def clean_log(
    tmp_path: Path, vfs: FaultVFS, *, durability: str, checkpoint_pages: int | None
) -> tuple[list[tuple[str, Any]], int, int]:
    """The clean run's log as (type, data), and the writes and syncs it made (open included)."""
    run = run_workload(
        tmp_path / "clean.db", vfs, durability=durability, checkpoint_pages=checkpoint_pages, arm=lambda: None
    )
    assert run.error is None, run.error
    counted = vfs.writes, vfs.syncs  # before close: the closing checkpoint is not swept
    assert run.journal is not None
    log = [(e.type, e.data) for e in run.journal.events(SESSION)]
    run.journal.close()
    assert len(log) == len(run.returned) == 14
    return log, *counted


def assert_typed(run: Run) -> None:
    """The error, if any, is the library's typed I/O error: never a raw driver error."""
    if run.error is None:
        return
    assert isinstance(run.error, journal.JournalIOError), (
        f"{run.failed_op} raised {type(run.error).__module__}.{type(run.error).__name__}: {run.error}"
    )
    assert run.error.outcome in ("absent", "present", "unknown")


def assert_honest_after_reopen(path: Path, run: Run, clean: list[tuple[str, Any]], *, durability: str) -> None:
    """Reopen with the default VFS: intact, every returned write there, nothing beyond the failed
    one, the outcome not contradicted, derived state in agreement, and the engine takes work."""
    with journal.open(path, durability=durability) as j:
        assert j.integrity_check() == ["ok"]
        try:
            log = [(e.type, e.data) for e in j.events(SESSION)]
        except journal.SessionNotFound:
            log = []
        returned = [(e.type, e.data) for e in run.returned]
        assert log[: len(returned)] == returned, "a write whose call returned is missing"
        assert log == clean[: len(log)], "the log is not a prefix of the clean run's"
        assert len(log) <= len(returned) + 1, "more than the failed write appeared"
        if isinstance(run.error, journal.JournalIOError) and run.failed_op not in ("provider_started", "open"):
            wrote = len(log) > len(returned)
            if run.error.outcome == "absent":
                assert not wrote, f"{run.failed_op} said absent, but its write is in the file"
            if run.error.outcome == "present" and run.failed_op not in ("create_session",):
                assert wrote, f"{run.failed_op} said present, but its write is not in the file"
        assert j.check() == []
        j.recover()
        assert j.recover() == [] or all(not r.appended for r in j.recover())
        assert j.check() == []
        assert not j.scan().open_turns
        # The engine works again: a whole new turn on a new session.
        j.create_session("after")
        with j.turn("after") as turn:
            j.append("after", "user_message", {"content": "still there?"})
            with turn.step():
                turn.assistant("yes", stop_reason="stop")
        assert j.check() == []
        assert j.integrity_check() == ["ok"]


# -- the I/O-error sweep --------------------------------------------------------------------------


@pytest.mark.parametrize("then", ["close", "crash"])
@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
@pytest.mark.parametrize("kind", ["write", "sync"])
def test_an_io_error_at_every_write_and_sync_index_raises_a_typed_error_and_loses_nothing_returned(
    vfs: FaultVFS, tmp_path: Path, kind: str, persistent: bool, then: str
) -> None:
    durability = "full"
    clean, writes, syncs = clean_log(tmp_path, vfs, durability=durability, checkpoint_pages=None)
    count = writes if kind == "write" else syncs
    assert count > (100 if kind == "write" else 15)
    for index in range(1, count + 1):
        path = tmp_path / f"{index}.db"
        arm = functools.partial(vfs.fail_write if kind == "write" else vfs.fail_sync, index, persistent=persistent)
        run = run_workload(path, vfs, durability=durability, checkpoint_pages=None, arm=arm)
        assert vfs.injected >= 1, f"{kind} {index} was never reached"
        assert run.error is not None, f"{kind} {index}: a fault fired and no call raised"
        assert_typed(run)
        vfs.heal()
        if run.journal is not None:
            run.journal.create_session("healed")  # the fault is gone: the same handle works again
        if then == "crash":
            vfs.crash()
        close_quietly(run.journal)
        vfs.reset()
        assert_honest_after_reopen(path, run, clean, durability=durability)


def test_a_sweep_with_frequent_checkpoints_keeps_every_returned_write(vfs: FaultVFS, tmp_path: Path) -> None:
    # A small auto-checkpoint puts checkpoints and WAL resets inside the workload, so the
    # faults also land in writes to the database file and in the syncs around them.
    clean, writes, syncs = clean_log(tmp_path, vfs, durability="full", checkpoint_pages=4)
    assert vfs.count("write") == writes
    for kind, count in (("write", writes), ("sync", syncs)):
        for index in range(1, count + 1, 2):
            path = tmp_path / f"{kind}-{index}.db"
            arm = functools.partial(vfs.fail_write if kind == "write" else vfs.fail_sync, index)
            run = run_workload(path, vfs, durability="full", checkpoint_pages=4, arm=arm)
            assert run.error is not None
            assert_typed(run)
            vfs.crash()
            close_quietly(run.journal)
            vfs.reset()
            assert_honest_after_reopen(path, run, clean, durability="full")


# -- a full disk ----------------------------------------------------------------------------------


def test_a_full_disk_raises_disk_full_and_the_journal_works_once_space_is_back(vfs: FaultVFS, tmp_path: Path) -> None:
    clean, _, _ = clean_log(tmp_path, vfs, durability="full", checkpoint_pages=None)
    seen_full = 0
    for after_bytes in (0, 4096, 20_000, 40_000, 60_000, 80_000):
        path = tmp_path / f"{after_bytes}.db"
        arm = functools.partial(vfs.disk_full, after_bytes=after_bytes)
        run = run_workload(path, vfs, durability="full", checkpoint_pages=None, arm=arm)
        if run.error is not None:
            assert isinstance(run.error, journal.DiskFull), repr(run.error)
            seen_full += 1
            vfs.heal()
            if run.journal is not None:
                run.journal.create_session("space-is-back")  # the same handle works again
        close_quietly(run.journal)
        vfs.reset()
        assert_honest_after_reopen(path, run, clean, durability="full")
    assert seen_full >= 3


def test_a_write_failing_with_sqlite_full_raises_disk_full(vfs: FaultVFS, tmp_path: Path) -> None:
    clean, _, _ = clean_log(tmp_path, vfs, durability="full", checkpoint_pages=None)
    path = tmp_path / "full.db"
    run = run_workload(path, vfs, durability="full", checkpoint_pages=None, arm=lambda: vfs.fail_write(70, full=True))
    assert isinstance(run.error, journal.DiskFull)
    close_quietly(run.journal)
    vfs.reset()
    assert_honest_after_reopen(path, run, clean, durability="full")


# -- power loss -----------------------------------------------------------------------------------


OPERATIONS = 15


def _run_prefix(
    path: Path, vfs: FaultVFS, ops: int, *, durability: str, checkpoint_pages: int | None
) -> tuple[journal.Journal, list[journal.Event]]:
    """Run the first `ops` operations of the workload with no fault: the open journal and the
    events whose calls returned."""
    vfs.reset()
    j = journal.open(path, durability=durability, vfs=vfs.name, checkpoint_pages=checkpoint_pages)
    returned = []
    for _, op in _operations(j)[:ops]:
        value = op()
        if isinstance(value, journal.Event):
            returned.append(value)
    return j, returned


@pytest.mark.parametrize("torn", [False, True], ids=["clean", "torn"])
def test_g1_power_loss_after_each_commit_loses_nothing_returned_under_full(
    vfs: FaultVFS, tmp_path: Path, torn: bool
) -> None:
    clean, _, _ = clean_log(tmp_path, vfs, durability="full", checkpoint_pages=None)
    for ops in range(OPERATIONS + 1):
        path = tmp_path / f"{ops}.db"
        opened, returned = _run_prefix(path, vfs, ops, durability="full", checkpoint_pages=None)
        vfs.power_loss(torn=torn, seed=ops)
        close_quietly(opened)
        vfs.reset()
        with journal.open(path) as j:
            assert j.integrity_check() == ["ok"]
            log = [(e.type, e.data) for e in j.events(SESSION)] if ops else []
            assert log == [(e.type, e.data) for e in returned] == clean[: len(returned)]
            assert j.check() == []


@pytest.mark.parametrize("checkpoint_pages", [None, 4], ids=["default-checkpoint", "checkpoint-4"])
@pytest.mark.parametrize("torn", [False, True], ids=["clean", "torn"])
def test_g1_power_loss_under_normal_loses_only_a_tail_of_commits(
    vfs: FaultVFS, tmp_path: Path, torn: bool, checkpoint_pages: int | None
) -> None:
    clean, _, _ = clean_log(tmp_path, vfs, durability="normal", checkpoint_pages=checkpoint_pages)
    kept = []
    for ops in range(OPERATIONS + 1):
        path = tmp_path / f"{ops}.db"
        opened, returned = _run_prefix(path, vfs, ops, durability="normal", checkpoint_pages=checkpoint_pages)
        vfs.power_loss(torn=torn, seed=ops)
        close_quietly(opened)
        vfs.reset()
        with journal.open(path, durability="normal") as j:
            assert j.integrity_check() == ["ok"]
            try:
                log = [(e.type, e.data) for e in j.events(SESSION)]
            except journal.SessionNotFound:
                log = []
            assert log == clean[: len(log)], "what survives is a prefix of what was written"
            assert len(log) <= len(returned)
            # G6: a dispatch is synced even under normal, so it and all before it survive.
            synced = max((n + 1 for n, e in enumerate(returned) if e.type == "tool_call"), default=0)
            assert len(log) >= synced
            assert j.check() == []
            j.recover()
            assert j.check() == [] and not j.scan().open_turns
        kept.append(len(log))
    # Some tail was lost somewhere (normal), and something survived (the synced dispatches).
    assert any(kept) and any(k < n for n, k in enumerate(kept))


@pytest.mark.parametrize("kind", ["write", "sync"])
def test_torn_power_loss_at_every_io_index_keeps_integrity_and_every_returned_write(
    vfs: FaultVFS, tmp_path: Path, kind: str
) -> None:
    clean, writes, syncs = clean_log(tmp_path, vfs, durability="full", checkpoint_pages=4)
    count = writes if kind == "write" else syncs
    for index in range(1, count + 1, 2 if kind == "write" else 1):
        path = tmp_path / f"{index}.db"
        cut = vfs.power_loss_at_write if kind == "write" else vfs.power_loss_at_sync
        arm = functools.partial(cut, index, torn=True, seed=index)
        run = run_workload(path, vfs, durability="full", checkpoint_pages=4, arm=arm)
        assert not vfs.running, f"{kind} {index} was never reached"
        assert_typed(run)
        close_quietly(run.journal)
        vfs.reset()
        assert_honest_after_reopen(path, run, clean, durability="full")


# -- power cuts at the edges: a file being created, a dispatch under normal ----------------------


def test_a_power_cut_while_a_journal_is_created_never_leaves_a_file_that_cannot_be_opened(
    vfs: FaultVFS, tmp_path: Path
) -> None:
    # The third sync of a new file's open is the database file's, after WAL mode's first page
    # was written through a rollback journal; a torn power cut there can keep every sector of
    # page 1 but the first (all zeros on this new file), so the file has no SQLite header.
    for seed in range(6):
        path = tmp_path / f"{seed}.db"
        arm = functools.partial(vfs.power_loss_at_sync, 3, torn=True, seed=seed)
        run = run_workload(path, vfs, durability="full", checkpoint_pages=None, arm=arm)
        assert_typed(run)
        close_quietly(run.journal)
        vfs.reset()
        with journal.open(path) as j:  # NotAJournal for seeds 0, 2 and 5
            assert j.integrity_check() == ["ok"]
            assert j.sessions() == []


def test_g6_under_normal_a_dispatch_survives_a_power_cut_once_its_tool_ran(vfs: FaultVFS, tmp_path: Path) -> None:
    path = tmp_path / "normal.db"
    opened, returned = _run_prefix(path, vfs, 8, durability="normal", checkpoint_pages=None)  # ... dispatch c1
    assert returned[-1].type == "tool_call"
    # The tool runs now, its side effect outside the journal; then the power goes.
    vfs.power_loss()
    close_quietly(opened)
    vfs.reset()
    with journal.open(path, durability="normal") as j:
        dispatched = [e for e in j.events(SESSION) if e.type == "tool_call"] if j.sessions() else []
        assert [e.data["id"] for e in dispatched] == ["c1"]
