"""What the commands share besides their output: ``--db``, opening the journal, argument types."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import click

import journal
from journal.store.target import is_dsn, malformed_dsn

DB_HELP = "The journal file, or a PostgreSQL DSN: postgresql://... or host=... dbname=... (or set JOURNAL_DB)."
SEQ_MAX = 2**63 - 1  # seqs are SQLite integers


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--db PATH`` (or ``JOURNAL_DB``), required."""
    return click.option("--db", envvar="JOURNAL_DB", required=True, type=click.Path(dir_okay=False), help=DB_HELP)(fn)


def open_journal(db: str, *, create: bool = False, **kwargs: Any) -> journal.Journal:
    """Open the journal; only ``create`` lets a path that does not exist become a new one (or,
    for a DSN, a database without a journal get one). A text that starts like a DSN but is not
    one is refused by ``journal.open`` (never a file, never quoted: it may hold a password)."""
    if is_dsn(db) or malformed_dsn(db) is not None:
        if not create:
            try:
                journal.open(db, readonly=True).close()
            except journal.NotAJournal as exc:  # no journal in the database yet, or another application's
                empty = exc.reason.startswith("no journal in this database")
                raise click.ClickException(f"no such journal: {exc}" if empty else str(exc)) from exc
        return journal.open(db, **kwargs)
    if not create and not os.path.exists(db):
        # Checked here so that a mistyped path never leaves an empty journal (or -wal) behind.
        raise click.ClickException(f"no such journal: {db}")
    return journal.open(db, **kwargs)


# ParamType is generic in recent click only: ParamType[float] would fail to import on click 8.1.
class Seconds(click.ParamType):  # type: ignore[type-arg]
    """A polling interval: finite, above zero, at most an hour (NaN and inf are refused)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        seconds = click.FLOAT.convert(value, param, ctx)
        if not (math.isfinite(seconds) and 0 < seconds <= 3600):
            self.fail(f"{value!r} is not a number of seconds in (0, 3600]", param, ctx)
        return seconds
