"""The commit witness: which crash points a run reached and what it had committed at each.

A process killed at a crash point cannot say what it committed; the witness says it for it, from
outside the journal. ``CommitWitness`` observes ``journal.crash`` in the process that writes;
``read_witness`` reads back the file a child's witness appended to. The judge
(``journal.testing.verdict``) holds a restarted journal to the highest counts seen.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from journal import crash
from journal.engine import Journal
from journal.errors import JournalError


class CommitWitness:
    """Records every crash point reached and, after each commit, every session's event count.

    ``install()`` observes ``journal.crash`` for the life of the context, so an armed crash
    point still fires, after the record is made. With a ``sink`` path each record is appended to
    that file as one JSON line (no fsync: it only has to survive a process kill, and the kernel
    keeps what was written). One witness per process at a time.
    """

    def __init__(self, journal: Journal, *, sink: str | os.PathLike[str] | None = None) -> None:
        self.journal = journal
        self.points: list[str] = []
        self.snapshots: list[dict[str, int]] = []
        self._sink = None if sink is None else os.fspath(sink)
        self._fd: int | None = None

    @contextlib.contextmanager
    def install(self) -> Iterator[CommitWitness]:
        if self._sink is not None:
            self._fd = os.open(self._sink, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            with crash.observing(self._record):
                yield self
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _record(self, name: str) -> None:
        self.points.append(name)
        entry: dict[str, Any] = {"point": name}
        if name.endswith(".after_commit"):
            try:
                counts = {s.id: s.count for s in self.journal.sessions()}
            except JournalError:
                counts = None  # a read failed under a fault: claim nothing rather than guess
            if counts is not None:
                self.snapshots.append(counts)
                entry["counts"] = counts
        if self._fd is not None:
            os.write(self._fd, (json.dumps(entry, sort_keys=True) + "\n").encode())

    @property
    def committed(self) -> dict[str, int]:
        """The highest event count seen committed, per session."""
        return _highest(self.snapshots)


def read_witness(path: str | os.PathLike[str]) -> tuple[list[str], list[dict[str, int]]]:
    """The points and snapshots a child's witness file holds (a line torn by the kill is ignored)."""
    points: list[str] = []
    snapshots: list[dict[str, int]] = []
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return points, snapshots
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        points.append(entry["point"])
        if "counts" in entry:
            snapshots.append(entry["counts"])
    return points, snapshots


def _highest(snapshots: Sequence[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for counts in snapshots:
        for session_id, count in counts.items():
            out[session_id] = max(out.get(session_id, 0), count)
    return out
