"""What the parts need from a store: the interface a second backend (DESIGN §16) implements.

A part never sees a driver: it runs SQL through a ``Database`` handle inside a transaction the
``Store`` opens, and gets the library's own errors (a key conflict is ``UniqueViolation``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from journal.errors import SchemaViolation
from journal.model import Durability


class UniqueViolation(SchemaViolation):
    """A statement hit a unique or primary key: the first write won (callers re-read it)."""


class Database(Protocol):
    """The handle a transaction's body gets. Its SQL is SQLite's; a backend of another dialect
    translates the few constructs that differ (``journal.store.postgres``)."""

    next_seqs: dict[str, int]  # the seq each session appended to gets next, once committed
    dialect: str  # "sqlite" or "postgresql"

    def execute(self, sql: str, bindings: Any = None) -> Iterable[tuple[Any, ...]]: ...
    def executemany(self, sql: str, rows: Any) -> Any: ...
    def one(self, sql: str, bindings: Any = None) -> tuple[Any, ...] | None: ...
    def value(self, sql: str, bindings: Any = None) -> Any: ...
    def changes(self) -> int: ...

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

    def write(
        self,
        operation: str,
        *,
        present: Callable[[Database], bool] | None = None,
        synced: bool = False,
        commit: bool = True,
    ) -> AbstractContextManager[Database]: ...
    def write_one(
        self, operation: str, sql: str, bindings: Any, *, present: Callable[[Database], bool] | None = None
    ) -> int | None: ...
    def batch(self, operation: str, *, synced: bool = False) -> AbstractContextManager[Batch]: ...
    def read(self) -> AbstractContextManager[Database]: ...
    def integrity_check(self) -> list[str]: ...
    def checkpoint(self) -> None: ...
    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...
