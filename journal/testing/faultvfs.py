"""A fault-injecting apsw VFS for tests: power loss, torn writes, I/O errors and a full disk.

`FaultVFS` inherits every operation from the default VFS (so WAL and its shared memory work:
apsw proxies a `VFSFile`'s xShm* calls straight to the inherited file) and sits between SQLite
and the disk for the calls that decide durability: xWrite, xTruncate, xSync, xDelete.

What it models, and what a test must know:

- **Durability.** Per file it remembers every write and truncate not yet followed by a
  successful xSync of that file, with the bytes each one replaced. `power_loss()` undoes them on
  disk, newest first, and cuts the file back to its size at the last sync, so each file holds
  exactly what was synced; with `torn=True` a seeded random subset of the 512-byte sectors of
  the unsynced writes (and of the unsynced truncates) is then laid back on top, in order. A
  file created through the VFS and never synced is removed (its directory entry never reached
  the disk). The `-shm` file of every database opened through the VFS is deleted (SQLite never
  syncs it; after a reboot it is as if it lived on tmpfs). A deletion is durable at once.
- **Crash.** `crash()` is a killed process: the disk keeps every write (the operating system
  has them), synced or not, and the `-shm` stays; SQLite recovers from the WAL on the next open.
- **The machine stays down.** After `power_loss()` or `crash()` (or the `*_at_write` /
  `*_at_sync` triggers that call them at a chosen operation) every later open, read, write,
  truncate, sync and delete through the VFS raises an I/O error, so connections still open
  cannot touch the disk; close them (their errors are expected and may be ignored), then open
  the file again, with the default VFS or with this one after `reset()`. Never open the file
  through another VFS while a connection through this one is still open: SQLite shares its
  lock and shared-memory state per file inside a process. `power_loss()` rewrites the files
  through descriptors of its own, and closing those drops every POSIX lock the process holds
  on them: no connection through another VFS may be open on the files when it runs either.
- **Only what went through it.** A file changed through another VFS while no connection of
  this one had it open (say, reopened with the default VFS after a crash, which replays and
  checkpoints the WAL) is noticed at the next open by its size and, when it had unsynced
  changes, a hash of its content; what is on disk is then taken as durable.
- **Errors.** A fault raises the exception apsw maps to the SQLite code: `apsw.IOError` with
  `extendedresult` SQLITE_IOERR_WRITE (a write), SQLITE_IOERR_FSYNC (a sync), or
  `apsw.FullError` (SQLITE_FULL). A failed write writes nothing; a failed sync syncs nothing (the
  writes before it stay unsynced until a later sync of that file succeeds).
- **Counting.** Indexes are 1-based and counted from when the fault is armed, over the files
  that match its `suffix` (the end of the file's full path: ``"-wal"``, ``"-journal"``, or the
  database's own name). Only files SQLite names are tracked and counted; its nameless temporary
  files pass straight through. `writes`, `syncs` and `count()` report what happened since
  construction or `reset()`, so a test can count a workload once and then sweep a fault over
  every index.
- One thread at a time should drive the connections on a `FaultVFS` when the test relies on
  exact indexes; the bookkeeping itself is guarded by a lock.
"""

from __future__ import annotations

import hashlib
import random
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

import apsw

from journal.testing.faultvfs_disk import SECTOR_SIZE as SECTOR_SIZE
from journal.testing.faultvfs_disk import (
    _FileState,
    _remove_if_present,
    _restore,
    _size_or_none,
    _Truncate,
    _Write,
)

OpKind = Literal["write", "sync", "truncate"]


@dataclass
class _Fault:
    """One armed fault: fires on the `remaining`-th matching operation, then maybe keeps firing."""

    remaining: int
    persistent: bool
    code: int
    suffix: str | None = None
    then: Literal["power_loss", "crash"] | None = None
    torn: bool = False
    seed: int | None = None
    fired: bool = False

    def matches(self, path: str) -> bool:
        return self.suffix is None or path.endswith(self.suffix)


def _error(code: int) -> apsw.Error:
    error = apsw.exception_for(code)  # typed as any Exception: it is the apsw.Error of that code
    assert isinstance(error, apsw.Error)
    return error


class FaultVFS(apsw.VFS):
    """A VFS over the default one that can lose power, fail writes and syncs, and fill up.

    Open connections with ``apsw.Connection(path, vfs=fault_vfs.name)``. The instance must stay
    referenced while they are open. Use it as a context manager, or call `unregister()`, to
    remove it. `name` must not already be registered (a clash raises ValueError rather than
    silently replacing another VFS).
    """

    def __init__(self, name: str, *, base: str = "") -> None:
        if name in apsw.vfs_names():
            raise ValueError(f"a VFS named {name!r} is already registered")
        self.name = name
        self._base = base
        self._lock = threading.RLock()
        self._files: dict[str, _FileState] = {}
        self._log: list[tuple[OpKind, str]] = []
        self._write_fault: _Fault | None = None
        self._sync_fault: _Fault | None = None
        self._free_bytes: int | None = None
        self._running = True
        self.injected = 0
        """Faults that fired (errors raised and power cuts) since construction or `reset()`."""
        super().__init__(name, base)

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> FaultVFS:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unregister()

    def reset(self) -> None:
        """Heal every fault, turn the power back on, and zero the counters.

        The unsynced state of open files is kept: it is the disk's, not the test's.
        """
        with self._lock:
            self.heal()
            self._running = True
            self._log.clear()
            self.injected = 0

    # -- counters ----------------------------------------------------------------------------

    @property
    def writes(self) -> int:
        """Writes attempted on named files since construction or `reset()` (failed ones too)."""
        return self.count("write")

    @property
    def syncs(self) -> int:
        """Syncs attempted on named files since construction or `reset()` (failed ones too)."""
        return self.count("sync")

    @property
    def running(self) -> bool:
        """False from a power loss or crash until `reset()`: no I/O reaches the disk meanwhile."""
        return self._running

    def count(self, kind: OpKind, *, suffix: str | None = None) -> int:
        """Operations of one kind since construction or `reset()`, optionally for matching files."""
        with self._lock:
            return sum(1 for op, path in self._log if op == kind and (suffix is None or path.endswith(suffix)))

    def unsynced_bytes(self) -> int:
        """Bytes written but not yet synced, over all tracked files (what power loss would drop)."""
        with self._lock:
            return sum(len(op.data) for state in self._files.values() for op in state.pending if isinstance(op, _Write))

    # -- arming faults -----------------------------------------------------------------------

    def fail_write(
        self,
        n: int,
        *,
        persistent: bool = False,
        full: bool = False,
        suffix: str | None = None,
    ) -> None:
        """Make the n-th write from now (1 = the next one) raise, writing nothing.

        The error is SQLITE_IOERR_WRITE, or SQLITE_FULL with `full`. Transient by default: only
        that write fails. With `persistent` it and every later matching write fail until
        `heal()`. Arming replaces any write fault already armed.
        """
        code = apsw.SQLITE_FULL if full else apsw.SQLITE_IOERR_WRITE
        with self._lock:
            self._write_fault = _Fault(_positive(n), persistent, code, suffix=suffix)

    def fail_sync(self, n: int, *, persistent: bool = False, suffix: str | None = None) -> None:
        """Make the n-th sync from now (1 = the next one) raise SQLITE_IOERR_FSYNC, syncing nothing.

        Transient by default; with `persistent` every later matching sync fails too, until
        `heal()`. Arming replaces any sync fault already armed.
        """
        with self._lock:
            self._sync_fault = _Fault(_positive(n), persistent, apsw.SQLITE_IOERR_FSYNC, suffix=suffix)

    def disk_full(self, *, after_bytes: int) -> None:
        """Let files grow by `after_bytes` more in total, then fail growing writes with SQLITE_FULL.

        Overwrites inside a file's current size always succeed (they need no new space);
        truncates and deletes give space back. Lasts until `heal()`.
        """
        if after_bytes < 0:
            raise ValueError(f"after_bytes must be >= 0, got {after_bytes}")
        with self._lock:
            self._free_bytes = after_bytes

    def heal(self) -> None:
        """Disarm every write, sync and disk-full fault (the power state is left as it is)."""
        with self._lock:
            self._write_fault = None
            self._sync_fault = None
            self._free_bytes = None

    def power_loss_at_write(
        self, n: int, *, torn: bool = False, seed: int | None = None, suffix: str | None = None
    ) -> None:
        """Cut the power just before the n-th write from now (1 = the next one) reaches the disk.

        That write is lost and raises SQLITE_IOERR_WRITE; from then on it is as if
        `power_loss(torn=torn, seed=seed)` had been called at that instant.
        """
        with self._lock:
            self._write_fault = _Fault(
                _positive(n),
                True,
                apsw.SQLITE_IOERR_WRITE,
                suffix=suffix,
                then="power_loss",
                torn=torn,
                seed=seed,
            )

    def power_loss_at_sync(
        self, n: int, *, torn: bool = False, seed: int | None = None, suffix: str | None = None
    ) -> None:
        """Cut the power just before the n-th sync from now completes (its writes stay unsynced).

        That sync raises SQLITE_IOERR_FSYNC; from then on it is as if
        `power_loss(torn=torn, seed=seed)` had been called at that instant.
        """
        with self._lock:
            self._sync_fault = _Fault(
                _positive(n),
                True,
                apsw.SQLITE_IOERR_FSYNC,
                suffix=suffix,
                then="power_loss",
                torn=torn,
                seed=seed,
            )

    def crash_at_write(self, n: int, *, suffix: str | None = None) -> None:
        """Kill the process, as far as the disk can tell, just before the n-th write from now.

        That write is lost and raises SQLITE_IOERR_WRITE; from then on it is as if `crash()` had
        been called at that instant.
        """
        with self._lock:
            self._write_fault = _Fault(_positive(n), True, apsw.SQLITE_IOERR_WRITE, suffix=suffix, then="crash")

    def crash_at_sync(self, n: int, *, suffix: str | None = None) -> None:
        """Kill the process, as far as the disk can tell, just before the n-th sync from now.

        That sync raises SQLITE_IOERR_FSYNC; from then on it is as if `crash()` had been called.
        """
        with self._lock:
            self._sync_fault = _Fault(_positive(n), True, apsw.SQLITE_IOERR_FSYNC, suffix=suffix, then="crash")

    # -- power loss --------------------------------------------------------------------------

    def power_loss(self, *, torn: bool = False, seed: int | None = None) -> None:
        """Lose the power now: rewrite every tracked file to what was synced, delete the `-shm`s.

        With `torn`, a random subset (seeded by `seed`) of the 512-byte sectors of the unsynced
        writes survives instead of none. The power then stays off until `reset()`: close every
        connection on this VFS before opening the files again (see the module docstring).
        """
        with self._lock:
            self._running = False
            rng = random.Random(seed)
            for path in sorted(self._files):
                state = self._files[path]
                if not _restore(state, torn=torn, rng=rng):
                    del self._files[path]
                if state.main_db:
                    _remove_if_present(path + "-shm")

    def crash(self) -> None:
        """Kill the process now, as far as the disk can tell: every write so far stays.

        Nothing is undone (the operating system still has the unsynced writes), but from now
        until `reset()` no I/O through the VFS reaches the disk, exactly as after `power_loss()`:
        close the connections (ignoring their errors), then open the file again. A later
        `power_loss()` still drops what was never synced.
        """
        with self._lock:
            self._running = False

    # -- hooks used by _FaultFile and SQLite ---------------------------------------------------

    def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> apsw.VFSFile:
        with self._lock:
            if not self._running:
                raise _error(apsw.SQLITE_CANTOPEN)
            path = name.filename() if isinstance(name, apsw.URIFilename) else name
            existed_size = _size_or_none(path) if path is not None else None
            file = _FaultFile(self, self._base, name, flags)
            if path is None:
                return file
            state = self._files.get(path)
            if state is None or existed_size is None or _changed_elsewhere(state, file):
                state = _FileState(
                    path=path,
                    synced_size=existed_size or 0,
                    created=existed_size is None,
                    main_db=bool(flags[0] & apsw.SQLITE_OPEN_MAIN_DB),
                )
                self._files[path] = state
            state.handles += 1
            file.state = state
            return file

    def xDelete(self, filename: str, syncdir: bool) -> None:
        with self._lock:
            if not self._running:
                raise _error(apsw.SQLITE_IOERR_DELETE)
            size = _size_or_none(filename) or 0
            super().xDelete(filename, syncdir)
            self._files.pop(filename, None)
            if self._free_bytes is not None:
                self._free_bytes += size

    def _check_power(self, code: int) -> None:
        if not self._running:
            raise _error(code)

    def _trip(self, fault: _Fault | None, path: str) -> _Fault | None:
        """Count one matching operation against `fault`; return it if it fires now."""
        if fault is None or not fault.matches(path):
            return None
        if not fault.fired:
            fault.remaining -= 1
            if fault.remaining > 0:
                return None
            fault.fired = True
        return fault

    def _fire(self, fault: _Fault, *, kind: OpKind) -> apsw.Error:
        self.injected += 1
        if not fault.persistent:
            if kind == "write":
                self._write_fault = None
            else:
                self._sync_fault = None
        if fault.then == "power_loss":
            self.power_loss(torn=fault.torn, seed=fault.seed)
        elif fault.then == "crash":
            self.crash()
        return _error(fault.code)

    def _before_write(self, state: _FileState, growth: int) -> None:
        self._log.append(("write", state.path))
        fault = self._trip(self._write_fault, state.path)
        if fault is not None:
            raise self._fire(fault, kind="write")
        if self._free_bytes is not None and growth > self._free_bytes:
            self.injected += 1
            raise _error(apsw.SQLITE_FULL)

    def _before_sync(self, state: _FileState) -> None:
        self._log.append(("sync", state.path))
        fault = self._trip(self._sync_fault, state.path)
        if fault is not None:
            raise self._fire(fault, kind="sync")


class _FaultFile(apsw.VFSFile):
    """One open file of a FaultVFS: records unsynced changes and applies the armed faults."""

    def __init__(
        self,
        vfs: FaultVFS,
        base: str,
        name: str | apsw.URIFilename | None,
        flags: list[int],
    ) -> None:
        super().__init__(base, name, flags)
        self.vfs = vfs
        self.state: _FileState | None = None

    def xRead(self, amount: int, offset: int) -> bytes:
        self.vfs._check_power(apsw.SQLITE_IOERR_READ)
        return super().xRead(amount, offset)

    def xClose(self) -> None:
        state = self.state
        if state is not None:
            self.state = None
            with self.vfs._lock:
                state.handles -= 1
                if state.handles == 0:
                    # Remember how we left the file, so that a later open can tell whether
                    # something else (another VFS, a recovery) changed it in between.
                    state.closed_size = super().xFileSize()
                    state.closed_digest = _digest(self) if state.pending else None
        super().xClose()

    def xWrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        vfs = self.vfs
        with vfs._lock:
            vfs._check_power(apsw.SQLITE_IOERR_WRITE)
            state = self.state
            if state is None:
                super().xWrite(data, offset)
                return
            new = bytes(data)
            size = super().xFileSize()
            growth = max(0, offset + len(new) - size)
            vfs._before_write(state, growth)
            old = super().xRead(min(len(new), size - offset), offset) if offset < size else b""
            super().xWrite(new, offset)
            state.pending.append(_Write(offset, new, bytes(old)))
            if vfs._free_bytes is not None:
                vfs._free_bytes -= growth

    def xTruncate(self, newsize: int) -> None:
        vfs = self.vfs
        with vfs._lock:
            vfs._check_power(apsw.SQLITE_IOERR_TRUNCATE)
            state = self.state
            if state is None:
                super().xTruncate(newsize)
                return
            vfs._log.append(("truncate", state.path))
            size = super().xFileSize()
            old = super().xRead(size - newsize, newsize) if newsize < size else b""
            super().xTruncate(newsize)
            state.pending.append(_Truncate(newsize, bytes(old)))
            if vfs._free_bytes is not None:
                vfs._free_bytes += len(old)

    def xSync(self, flags: int) -> None:
        vfs = self.vfs
        with vfs._lock:
            vfs._check_power(apsw.SQLITE_IOERR_FSYNC)
            state = self.state
            if state is None:
                super().xSync(flags)
                return
            vfs._before_sync(state)
            super().xSync(flags)
            state.pending.clear()
            state.synced_size = super().xFileSize()
            state.created = False


def _changed_elsewhere(state: _FileState, file: apsw.VFSFile) -> bool:
    """True if a file nobody had open through the VFS was changed since it was last closed.

    Its unsynced changes and synced size then describe another file: the caller starts over,
    taking what is on disk as durable (the VFS cannot know what the other writer synced).
    """
    if state.handles > 0 or state.closed_size is None:
        return False
    if apsw.VFSFile.xFileSize(file) != state.closed_size:
        return True
    return state.closed_digest is not None and _digest(file) != state.closed_digest


def _digest(file: apsw.VFSFile) -> bytes:
    """A hash of the whole file, read through the open handle (never a new descriptor)."""
    size = apsw.VFSFile.xFileSize(file)
    return hashlib.blake2b(apsw.VFSFile.xRead(file, size, 0) if size else b"").digest()


def _positive(n: int) -> int:
    if n < 1:
        raise ValueError(f"n counts from 1 (the next operation), got {n}")
    return n
