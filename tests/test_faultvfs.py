"""The fault-injecting VFS, on raw apsw: power loss, torn writes, crashes, I/O errors, a full disk.

Each workload is a few insert transactions (BEGIN IMMEDIATE, INSERT, COMMIT) in WAL mode with a
small auto-checkpoint, so that commits, checkpoints and WAL resets all happen inside it. After
each fault the file is reopened with the default VFS and must pass `integrity_check`, keep
every transaction whose COMMIT returned, and hold nothing that was never attempted. A
transaction that raised may be present or absent (DESIGN.md §4: a COMMIT that raises has an
unknown outcome); two tests below pin down the two ways it ends up present.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import pytest

from journal.testing.faultvfs import SECTOR_SIZE, FaultVFS

TRANSACTIONS = 12
PAYLOAD_BYTES = 600
CHECKPOINT_PAGES = 4
DB_NAME = "test.db"
FILE_FLAGS = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_MAIN_DB


@dataclass
class Workload:
    """What one run of insert transactions saw: which COMMITs returned, which ones raised."""

    committed: list[int] = field(default_factory=list)
    raised: dict[int, apsw.Error] = field(default_factory=dict)


def open_fresh(directory: Path, vfs: FaultVFS, *, synchronous: str = "FULL") -> apsw.Connection:
    """Create a WAL database with table t in `directory` through `vfs`, durable, counters zeroed."""
    vfs.reset()
    directory.mkdir(parents=True)
    conn = apsw.Connection(str(directory / DB_NAME), vfs=vfs.name)
    try:
        assert conn.execute("PRAGMA journal_mode=WAL").fetchall() == [("wal",)]
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}")
        conn.execute("CREATE TABLE t(i INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except BaseException:
        conn.close()
        raise
    vfs.reset()
    return conn


def run_workload(
    conn: apsw.Connection,
    *,
    first: int = 0,
    count: int = TRANSACTIONS,
    stop: Callable[[], bool] | None = None,
) -> Workload:
    """Run `count` insert transactions, recording each outcome; stop early once `stop()` is true."""
    seen = Workload()
    for i in range(first, first + count):
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t(i, payload) VALUES (?, randomblob(?))", (i, PAYLOAD_BYTES))
            conn.execute("COMMIT")
        except apsw.Error as error:
            seen.raised[i] = error
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except apsw.Error:
                    pass  # the next BEGIN will say so; every later transaction then raises
        else:
            seen.committed.append(i)
        if stop is not None and stop():
            break
    return seen


def close_quietly(conn: apsw.Connection) -> None:
    """Close a connection whose disk may be gone (after a power loss or crash, close raises)."""
    try:
        conn.close()
    except apsw.Error:
        pass


def read_back(directory: Path) -> set[int]:
    """Open the database with the default VFS, assert it is intact, and return the ids present."""
    conn = apsw.Connection(str(directory / DB_NAME))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return {i for (i,) in conn.execute("SELECT i FROM t")}
    finally:
        conn.close()


def assert_honest(directory: Path, seen: Workload) -> set[int]:
    """Integrity ok, nothing whose COMMIT returned is lost, nothing present that never ran."""
    present = read_back(directory)
    assert set(seen.committed) <= present, f"lost committed {set(seen.committed) - present}"
    assert present <= set(seen.committed) | set(seen.raised), f"phantom rows in {present}"
    return present


def merged(*runs: Workload) -> Workload:
    """One record of several runs on the same file."""
    seen = Workload()
    for run in runs:
        seen.committed += run.committed
        seen.raised |= run.raised
    return seen


def count_workload(directory: Path, vfs: FaultVFS) -> tuple[int, int]:
    """The writes and syncs one clean run of the workload makes."""
    conn = open_fresh(directory, vfs)
    try:
        seen = run_workload(conn)
        counted = vfs.writes, vfs.syncs  # before close: its checkpoint is not part of the sweep
    finally:
        conn.close()
    assert seen.committed == list(range(TRANSACTIONS))
    return counted


# -- the power-loss model, on a plain file ------------------------------------------------------


def test_power_loss_puts_back_the_synced_bytes_and_size(vfs: FaultVFS, tmp_path: Path) -> None:
    path = tmp_path / "plain"
    file = vfs.xOpen(str(path), [FILE_FLAGS, 0])
    file.xWrite(b"a" * 4096, 0)
    file.xSync(apsw.SQLITE_SYNC_NORMAL)
    file.xWrite(b"b" * 1000, 100)
    file.xWrite(b"c" * 2000, 4096)
    file.xTruncate(3000)
    file.xWrite(b"d" * 10, 5000)
    file.xClose()
    assert vfs.unsynced_bytes() == 3010

    vfs.power_loss()

    assert path.read_bytes() == b"a" * 4096


def test_torn_power_loss_keeps_whole_sectors_of_old_or_new_data(vfs: FaultVFS, tmp_path: Path) -> None:
    outcomes = set()
    for seed in range(8):
        path = tmp_path / f"plain{seed}"
        vfs.reset()
        file = vfs.xOpen(str(path), [FILE_FLAGS, 0])
        file.xWrite(b"o" * 8 * SECTOR_SIZE, 0)
        file.xSync(apsw.SQLITE_SYNC_NORMAL)
        file.xWrite(b"n" * 8 * SECTOR_SIZE, 0)
        file.xClose()

        vfs.power_loss(torn=True, seed=seed)

        data = path.read_bytes()
        assert len(data) == 8 * SECTOR_SIZE
        sectors = [data[k : k + SECTOR_SIZE] for k in range(0, len(data), SECTOR_SIZE)]
        assert all(s in (b"o" * SECTOR_SIZE, b"n" * SECTOR_SIZE) for s in sectors)
        outcomes.add(tuple(s[:1] for s in sectors))
    assert len(outcomes) > 1, "torn power loss should not always keep the same sectors"
    assert any(b"o" in o and b"n" in o for o in outcomes), "no write was ever torn"


def test_power_loss_removes_a_file_created_and_never_synced(vfs: FaultVFS, tmp_path: Path) -> None:
    path = tmp_path / "new"
    file = vfs.xOpen(str(path), [FILE_FLAGS, 0])
    file.xWrite(b"x" * 100, 0)
    file.xClose()

    vfs.power_loss()

    assert not path.exists()


def test_every_io_fails_after_power_loss_until_reset(vfs: FaultVFS, tmp_path: Path) -> None:
    conn = open_fresh(tmp_path / "db", vfs)
    try:
        run_workload(conn, count=2)
        vfs.power_loss()
        assert not vfs.running
        seen = run_workload(conn, first=2, count=2)
        assert seen.committed == [] and set(seen.raised) == {2, 3}
        with pytest.raises(apsw.CantOpenError):
            apsw.Connection(str(tmp_path / "db" / DB_NAME), vfs=vfs.name)
    finally:
        close_quietly(conn)
    assert not (tmp_path / "db" / f"{DB_NAME}-shm").exists()

    vfs.reset()
    conn = apsw.Connection(str(tmp_path / "db" / DB_NAME), vfs=vfs.name)
    try:
        assert run_workload(conn, first=2, count=2).committed == [2, 3]
    finally:
        conn.close()
    assert read_back(tmp_path / "db") == {0, 1, 2, 3}


def test_a_file_changed_through_another_vfs_is_taken_as_durable(vfs: FaultVFS, tmp_path: Path) -> None:
    # After a crash the default VFS replays and checkpoints the WAL behind this VFS's back;
    # undoing the stale unsynced writes on top of that would corrupt the file.
    directory = tmp_path / "db"
    conn = open_fresh(directory, vfs, synchronous="NORMAL")
    try:
        conn.execute("PRAGMA wal_autocheckpoint=0")  # everything stays in the unsynced WAL
        first = run_workload(conn)
        vfs.crash()
    finally:
        close_quietly(conn)
    assert read_back(directory) == set(range(TRANSACTIONS))

    vfs.reset()
    conn = apsw.Connection(str(directory / DB_NAME), vfs=vfs.name)
    try:
        second = run_workload(conn, first=100, count=3)
        vfs.power_loss()
    finally:
        close_quietly(conn)
    assert first.committed and second.committed == [100, 101, 102]
    assert read_back(directory) == set(range(TRANSACTIONS)) | {100, 101, 102}


# -- the VFS itself ------------------------------------------------------------------------------


def test_a_name_already_registered_is_refused_and_exit_unregisters(vfs: FaultVFS) -> None:
    with pytest.raises(ValueError, match="already registered"):
        FaultVFS(vfs.name)
    name = f"faultvfs-test-{uuid.uuid4().hex}"
    with FaultVFS(name):
        assert name in apsw.vfs_names()
    assert name not in apsw.vfs_names()


def test_wal_mode_with_shared_memory_works_through_the_vfs(vfs: FaultVFS, tmp_path: Path) -> None:
    writer = open_fresh(tmp_path / "db", vfs)
    reader = apsw.Connection(str(tmp_path / "db" / DB_NAME), vfs=vfs.name)
    try:
        assert reader.execute("PRAGMA journal_mode").fetchall() == [("wal",)]
        run_workload(writer, count=3)
        assert (tmp_path / "db" / f"{DB_NAME}-shm").exists()
        assert reader.execute("SELECT count(*) FROM t").fetchall() == [(3,)]
    finally:
        reader.close()
        writer.close()


def test_counters_count_writes_and_syncs_per_file_since_reset(vfs: FaultVFS, tmp_path: Path) -> None:
    conn = open_fresh(tmp_path / "db", vfs)
    try:
        assert (vfs.writes, vfs.syncs) == (0, 0)
        run_workload(conn)
    finally:
        conn.close()
    wal_writes = vfs.count("write", suffix="-wal")
    db_writes = vfs.count("write", suffix=DB_NAME)
    assert wal_writes > TRANSACTIONS and db_writes > 0, "the workload should checkpoint"
    assert wal_writes + db_writes == vfs.writes
    assert vfs.count("sync", suffix="-wal") >= TRANSACTIONS
    vfs.reset()
    assert (vfs.writes, vfs.syncs, vfs.injected) == (0, 0, 0)


def test_injected_errors_carry_the_extended_result_code(vfs: FaultVFS, tmp_path: Path) -> None:
    for kind, code in (("write", apsw.SQLITE_IOERR_WRITE), ("sync", apsw.SQLITE_IOERR_FSYNC)):
        conn = open_fresh(tmp_path / kind, vfs)
        try:
            (vfs.fail_write if kind == "write" else vfs.fail_sync)(1)
            seen = run_workload(conn, count=2)
        finally:
            conn.close()
        assert seen.committed == [1]
        assert isinstance(seen.raised[0], apsw.IOError)
        assert seen.raised[0].extendedresult == code
        assert vfs.injected == 1


# -- power loss and crashes under a workload ------------------------------------------------------


@pytest.mark.parametrize("torn", [False, True], ids=["clean", "torn"])
def test_power_loss_after_each_commit_keeps_every_commit_under_full(vfs: FaultVFS, tmp_path: Path, torn: bool) -> None:
    for done in range(TRANSACTIONS + 1):
        for seed in range(3) if torn else [None]:
            directory = tmp_path / f"{done}-{seed}"
            conn = open_fresh(directory, vfs)
            try:
                seen = run_workload(conn, count=done)
                vfs.power_loss(torn=torn, seed=seed)
            finally:
                close_quietly(conn)
            assert seen.committed == list(range(done))
            assert read_back(directory) == set(range(done))


@pytest.mark.parametrize("torn", [False, True], ids=["clean", "torn"])
def test_power_loss_under_normal_loses_only_a_tail_of_commits(vfs: FaultVFS, tmp_path: Path, torn: bool) -> None:
    kept = []
    for done in range(TRANSACTIONS + 1):
        directory = tmp_path / str(done)
        conn = open_fresh(directory, vfs, synchronous="NORMAL")
        try:
            run_workload(conn, count=done)
            vfs.power_loss(torn=torn, seed=done)
        finally:
            close_quietly(conn)
        present = read_back(directory)
        assert present == set(range(len(present))), f"not a prefix: {sorted(present)}"
        assert len(present) <= done
        kept.append(len(present))
    assert any(0 < k for k in kept), "checkpoints should make some commits durable"
    assert any(k < done for done, k in enumerate(kept)), "NORMAL should lose unsynced commits"


def test_power_loss_drops_commits_that_were_never_synced(vfs: FaultVFS, tmp_path: Path) -> None:
    conn = open_fresh(tmp_path / "db", vfs)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        assert run_workload(conn).committed == list(range(TRANSACTIONS))
        assert vfs.syncs == 0 and vfs.unsynced_bytes() > 0
        vfs.power_loss()
    finally:
        close_quietly(conn)
    assert read_back(tmp_path / "db") == set()


@pytest.mark.parametrize(
    ("how", "torn"),
    [("power_loss", False), ("power_loss", True), ("crash", False)],
    ids=["power-loss", "torn-power-loss", "crash"],
)
@pytest.mark.parametrize("kind", ["write", "sync"])
def test_cutting_the_machine_at_every_io_index_keeps_every_commit(
    vfs: FaultVFS, tmp_path: Path, kind: str, how: str, torn: bool
) -> None:
    writes, syncs = count_workload(tmp_path / "count", vfs)
    for index in range(1, (writes if kind == "write" else syncs) + 1):
        for seed in range(2) if torn else [None]:
            directory = tmp_path / f"{index}-{seed}"
            conn = open_fresh(directory, vfs)
            try:
                if how == "crash":
                    (vfs.crash_at_write if kind == "write" else vfs.crash_at_sync)(index)
                elif kind == "write":
                    vfs.power_loss_at_write(index, torn=torn, seed=seed)
                else:
                    vfs.power_loss_at_sync(index, torn=torn, seed=seed)
                seen = run_workload(conn, stop=lambda: not vfs.running)
            finally:
                close_quietly(conn)
            assert not vfs.running, f"{kind} {index} was never reached"
            assert len(seen.raised) == 1
            assert_honest(directory, seen)


# -- I/O errors and a full disk -------------------------------------------------------------------


@pytest.mark.parametrize("after", ["close", "power_loss", "crash"])
@pytest.mark.parametrize("kind", ["write", "sync"])
def test_a_transient_error_at_every_io_index_keeps_every_commit(
    vfs: FaultVFS, tmp_path: Path, kind: str, after: str
) -> None:
    writes, syncs = count_workload(tmp_path / "count", vfs)
    for index in range(1, (writes if kind == "write" else syncs) + 1):
        directory = tmp_path / str(index)
        conn = open_fresh(directory, vfs)
        try:
            (vfs.fail_write if kind == "write" else vfs.fail_sync)(index)
            if after == "close":
                seen = run_workload(conn)
            else:
                seen = run_workload(conn, stop=lambda: vfs.injected > 0)
                vfs.power_loss() if after == "power_loss" else vfs.crash()
        finally:
            close_quietly(conn)
        assert vfs.injected == 1, f"{kind} {index} was never reached"
        assert len(seen.raised) == 1
        assert_honest(directory, seen)


def test_commit_whose_fsync_failed_reappears_after_a_crash(vfs: FaultVFS, tmp_path: Path) -> None:
    # SQLite wrote the commit frame, the fsync failed, SQLite rolled back in memory; the frame
    # is still in the WAL with a valid checksum, so recovery after a crash brings it back.
    conn = open_fresh(tmp_path / "db", vfs)
    try:
        run_workload(conn, count=2)
        vfs.fail_sync(1, suffix="-wal")
        seen = run_workload(conn, first=2, count=1)
        assert seen.raised[2].extendedresult == apsw.SQLITE_IOERR_FSYNC
        assert conn.execute("SELECT count(*) FROM t WHERE i = 2").fetchall() == [(0,)]
        vfs.crash()
    finally:
        close_quietly(conn)
    assert read_back(tmp_path / "db") == {0, 1, 2}


def test_commit_raises_for_a_failed_autocheckpoint_although_it_is_durable(vfs: FaultVFS, tmp_path: Path) -> None:
    # The commit is synced in the WAL; the auto-checkpoint that follows it fails writing the
    # database file, and apsw raises that error from the COMMIT statement.
    conn = open_fresh(tmp_path / "db", vfs)
    try:
        vfs.fail_write(1, suffix=DB_NAME)
        seen = run_workload(conn, stop=lambda: vfs.injected > 0)
        vfs.power_loss()
    finally:
        close_quietly(conn)
    [(failed, error)] = seen.raised.items()
    assert isinstance(error, apsw.IOError)
    assert error.extendedresult == apsw.SQLITE_IOERR_WRITE
    assert read_back(tmp_path / "db") == set(range(failed + 1))


@pytest.mark.parametrize("kind", ["write", "sync"])
def test_a_persistent_error_fails_every_commit_until_healed(vfs: FaultVFS, tmp_path: Path, kind: str) -> None:
    conn = open_fresh(tmp_path / "db", vfs)
    try:
        (vfs.fail_write if kind == "write" else vfs.fail_sync)(2, persistent=True)
        failing = run_workload(conn, count=4)
        assert len(failing.raised) >= 3
        assert all(isinstance(e, apsw.IOError) for e in failing.raised.values())
        vfs.heal()
        healed = run_workload(conn, first=10, count=3)
    finally:
        conn.close()
    assert healed.committed == [10, 11, 12]
    assert_honest(tmp_path / "db", merged(failing, healed))


def test_disk_full_raises_full_error_and_keeps_the_file_intact(vfs: FaultVFS, tmp_path: Path) -> None:
    conn = open_fresh(tmp_path / "db", vfs)
    try:
        vfs.disk_full(after_bytes=20_000)
        full = run_workload(conn, count=40)
        assert full.committed and full.raised
        assert all(isinstance(e, apsw.FullError) for e in full.raised.values())
        vfs.heal()
        healed = run_workload(conn, first=100, count=2)
    finally:
        conn.close()
    assert healed.committed == [100, 101]
    assert_honest(tmp_path / "db", merged(full, healed))


def test_fail_write_full_raises_full_error_once(vfs: FaultVFS, tmp_path: Path) -> None:
    conn = open_fresh(tmp_path / "db", vfs)
    try:
        vfs.fail_write(1, full=True)
        seen = run_workload(conn, count=3)
    finally:
        conn.close()
    assert isinstance(seen.raised[0], apsw.FullError)
    assert seen.committed == [1, 2]
    assert_honest(tmp_path / "db", seen)
