"""What the parts need from a store: the interface a second backend (DESIGN §16) implements.

A part never sees a driver: it runs SQL through a ``Database`` handle inside a transaction the
``Store`` opens, and gets the library's own errors (a key conflict is ``UniqueViolation``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from journal.codec import lone_surrogate as _lone_surrogate
from journal.errors import InvalidArgument, SchemaViolation
from journal.model import Durability, WriteOutcome


class UniqueViolation(SchemaViolation):
    """A statement hit a unique or primary key: the first write won (callers re-read it)."""


def lone_surrogate(exc: UnicodeEncodeError) -> InvalidArgument:
    """A string the driver cannot encode (a lone surrogate), refused as the caller's bad
    argument: nothing of the statement was sent. The parts check each key and id first
    (``journal.codec.check_text``, the same refusal naming the argument); this is the net
    under them, for both stores and every path (a transaction, a lone statement, a batch)."""
    return _lone_surrogate("argument", exc.object if isinstance(exc.object, str) else "")


def outcome_after_failed_commit(store: Store, present: Callable[[Database], bool] | None) -> WriteOutcome:
    """What is known of a write whose COMMIT failed: ``present`` if re-reading finds it, else
    ``unknown`` (a re-read that fails too tells nothing either)."""
    if present is not None:
        try:
            with store.read() as db:
                if present(db):
                    return WriteOutcome.PRESENT
        except Exception:
            pass
    return WriteOutcome.UNKNOWN


class Database(Protocol):
    """The handle a transaction's body gets. Its SQL is SQLite's; a backend of another dialect
    translates the few constructs that differ (``journal.store.postgres``)."""

    next_seqs: dict[str, int]  # the seq each session appended to gets next, once committed
    dialect: str  # "sqlite" or "postgresql"
    previews_sql: str  # the viewer's cut read of a page of events (journal.preview), in this dialect
    previews_at_sql: str  # the same cut read, of the events at a JSON array of seqs (journal.transcript)
    change_token_sql: str  # a value that differs after a commit by another connection (journal.preview)
    # Recovery's set-based read of a batch's open work (journal.recovery_batch); None: this backend
    # recovers session by session through the planner.
    open_work_sql: str | None

    def execute(self, sql: str, bindings: Any = None) -> Iterable[tuple[Any, ...]]: ...
    def executemany(self, sql: str, rows: Any) -> Any: ...
    def one(self, sql: str, bindings: Any = None) -> tuple[Any, ...] | None: ...
    def value(self, sql: str, bindings: Any = None) -> Any: ...
    def changes(self) -> int: ...
    def lock_session(self, session_id: str) -> None:
        """Inside a write scoped to sessions (``Store.write(sessions=...)``): take one more
        session, found by the write itself (a claim's). SQLite's writes are whole-file: no-op."""

    @property
    def in_transaction(self) -> bool: ...


class Batch(Protocol):
    """One transaction that many writes share (``Store.batch``): the async face's writer."""

    @property
    def broken(self) -> bool: ...


class Store(Protocol):
    """One connection to one journal: transactions, and the file's upkeep."""

    path: str
    dialect: str  # "sqlite" or "postgresql": the few statements that differ ask it
    durability: Durability
    readonly: bool
    next_seqs: dict[str, int]

    # ``sessions``: the write changes the rows of these sessions only (``()``: of the sessions it
    # takes with ``Database.lock_session``). A backend whose writers run at once (PostgreSQL)
    # then serialises it only with the writes of the same sessions; ``None`` (the default) is a
    # write of the whole journal, serialised with every other, as every write is on SQLite.
    def write(
        self,
        operation: str,
        *,
        present: Callable[[Database], bool] | None = None,
        synced: bool = False,
        commit: bool = True,
        sessions: Sequence[str] | None = None,
    ) -> AbstractContextManager[Database]: ...
    def write_one(
        self,
        operation: str,
        sql: str,
        bindings: Any,
        *,
        present: Callable[[Database], bool] | None = None,
        sessions: Sequence[str] | None = None,
    ) -> int | None: ...
    def batch(self, operation: str, *, synced: bool = False) -> AbstractContextManager[Batch]: ...
    def read(self) -> AbstractContextManager[Database]: ...
    def integrity_check(self) -> list[str]: ...
    def size_bytes(self) -> int: ...
    def checkpoint(self) -> None: ...
    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...
