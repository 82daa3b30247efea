"""The disk under the fault VFS: what each named file holds durably, and how a power loss rewrites it.

Pure bookkeeping over the files' bytes, through ``os`` (no driver): `FaultVFS`
(``journal.testing.faultvfs``, whose docstring says what is modelled) records each unsynced
write and truncate here as it passes, and calls `_restore` on every tracked file when the power
goes.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

SECTOR_SIZE = 512
"""The unit a torn write keeps or loses whole: the smallest sector a drive writes atomically."""


@dataclass
class _Write:
    """An unsynced write: where, what, and the bytes it replaced (shorter past the old end)."""

    offset: int
    data: bytes
    old: bytes


@dataclass
class _Truncate:
    """An unsynced truncate: the new size and the bytes it cut away (empty when it grew)."""

    size: int
    old: bytes


@dataclass
class _FileState:
    """What the VFS knows about one named file: its durable size and its unsynced changes."""

    path: str
    synced_size: int
    created: bool
    main_db: bool
    pending: list[_Write | _Truncate] = field(default_factory=list)
    handles: int = 0
    closed_size: int | None = None
    closed_digest: bytes | None = None


def _restore(state: _FileState, *, torn: bool, rng: random.Random) -> bool:
    """Rewrite one file on disk to its synced content (plus torn survivors); False if it is gone."""
    if _size_or_none(state.path) is None:
        return False
    fd = os.open(state.path, os.O_RDWR)
    try:
        for op in reversed(state.pending):
            start = op.offset if isinstance(op, _Write) else op.size
            if op.old:
                os.pwrite(fd, op.old, start)
        os.ftruncate(fd, state.synced_size)
        if torn:
            for op in state.pending:
                _replay_torn(fd, op, rng)
        survived = bool(torn and state.pending) or not state.created
    finally:
        os.close(fd)
    if not survived:
        os.remove(state.path)
        return False
    state.pending.clear()
    state.synced_size = os.path.getsize(state.path)
    state.created = False
    return True


def _replay_torn(fd: int, op: _Write | _Truncate, rng: random.Random) -> None:
    """Lay back the sectors of one unsynced change that happened to reach the platter."""
    if isinstance(op, _Truncate):
        if rng.random() < 0.5:
            os.ftruncate(fd, op.size)
        return
    end = op.offset + len(op.data)
    pos = op.offset
    while pos < end:
        sector_end = min(end, (pos // SECTOR_SIZE + 1) * SECTOR_SIZE)
        if rng.random() < 0.5:
            os.pwrite(fd, op.data[pos - op.offset : sector_end - op.offset], pos)
        pos = sector_end


def _size_or_none(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return None


def _remove_if_present(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
