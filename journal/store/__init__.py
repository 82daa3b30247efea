"""The store: the only code that talks to a database driver (DESIGN §12).

``SqliteStore`` (apsw) is today's backend; the parts see only the ``Store`` and ``Database``
interfaces of ``journal.store.base``, and the library's own errors.
"""

from journal.store.base import INSERT_EVENT, Database, EventRow, Store, UniqueViolation
from journal.store.sqlite import (
    APPLICATION_ID,
    DEFAULT_BUSY_TIMEOUT_MS,
    MIGRATIONS,
    SCHEMA_VERSION,
    SQLITE_HEADER,
    SqliteDatabase,
    SqliteStore,
    schema_sql,
    schema_statements,
)
from journal.store.statements import Statements

__all__ = [
    "APPLICATION_ID",
    "DEFAULT_BUSY_TIMEOUT_MS",
    "INSERT_EVENT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SQLITE_HEADER",
    "Database",
    "EventRow",
    "SqliteDatabase",
    "SqliteStore",
    "Statements",
    "Store",
    "UniqueViolation",
    "schema_sql",
    "schema_statements",
]
