"""After a crash: ``scan``, ``recover``, ``check``."""

from __future__ import annotations

from typing import Any

import click

from journal import (
    CorruptJournal,
    JournalError,
    JournalIOError,
    NotAJournal,
    RecoveryPlan,
    RecoveryResult,
    SchemaTooNew,
)
from journal.cli import render
from journal.cli.app import main
from journal.cli.options import db_option, open_journal
from journal.cli.output import output, output_options


@main.command()
@db_option
@output_options
def scan(db: str, as_json: bool, as_nl: bool) -> None:
    """List all unfinished work (read-only): open turns, unresolved calls, stale submissions."""
    with open_journal(db, readonly=True) as j:
        report = j.scan()
    document = report.to_dict()
    items = ({"kind": kind, **item} for kind, found in document.items() for item in found)
    output(document, items, render.scan_report(report), as_json=as_json, as_nl=as_nl)


@main.command()
@db_option
@click.argument("session", required=False)
@click.option("--dry-run", is_flag=True, help="Show the plan (with risks) and write nothing.")
@click.option("--force", is_flag=True, help="Also close turns whose owner process is still alive.")
@output_options
def recover(db: str, session: str | None, dry_run: bool, force: bool, as_json: bool, as_nl: bool) -> None:
    """Close what a crash left open, by appending (close policy)."""
    with open_journal(db, readonly=dry_run) as j:
        done: list[RecoveryPlan] | list[RecoveryResult]
        done = (
            j.plan_recovery(session, force=force)
            if dry_run
            else j.recover(session, force=force, on_progress=_Progress())
        )
    sessions = [d.to_dict() for d in done]
    lines = [line for d in done for line in _recovery_lines(d)] or ["nothing to recover"]
    output({"dry_run": dry_run, "sessions": sessions}, sessions, lines, as_json=as_json, as_nl=as_nl)


class _Progress:
    """Progress on stderr when recovery takes more than one batch (stdout stays the contract):
    a line after each batch, from the first one that falls short of the total."""

    def __init__(self) -> None:
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if done < total or self.shown:
            self.shown = True
            click.echo(f"journal: recovered {done}/{total} sessions", err=True)


def _recovery_lines(done: RecoveryPlan | RecoveryResult) -> list[str]:
    """One session's plan (with the risk of each repair) or what was appended to it."""
    if done.live_owner:
        held = f"turn held by live process {render.cut_id(done.live_owner)}"
        return [f"{render.cut_id(done.session_id)}: {held}; skipped (use --force)"]
    if isinstance(done, RecoveryPlan):
        return render.plan(done.session_id, done.repairs)
    return [f"{render.cut_id(done.session_id)}: appended {done.count} event(s)"]


# What reading a damaged file can raise besides the library's own errors: a text column whose
# bytes are not UTF-8 (the driver's decode), data that is not JSON or nests past the parser
# (json.loads), a value of the wrong kind where the schema's CHECK no longer holds.
_UNDECODABLE = (UnicodeDecodeError, ValueError, RecursionError, TypeError, KeyError, IndexError, OverflowError)


def _damaged(exc: BaseException) -> bool:
    """Whether an error opening or reading the file says it is damaged (what check reports,
    rather than fails on): a file whose header or pages were overwritten may read as another
    file, a newer schema, an I/O error or bytes no decoder takes."""
    if isinstance(exc, JournalError):  # the caller's own mistakes (a bad or unknown id) are raised
        return isinstance(exc, (CorruptJournal, NotAJournal, SchemaTooNew, JournalIOError))
    return isinstance(exc, _UNDECODABLE)


def _problem(exc: BaseException) -> str:
    """One line saying what reading the file ran into."""
    if isinstance(exc, JournalError):
        # This is ``journal check``: a message pointing to it points to itself.
        return str(exc).removesuffix("; `journal check` lists the damage")
    detail = "nests too deep to decode" if isinstance(exc, RecursionError) else f"{type(exc).__name__}: {exc}"
    return f"the file holds data that cannot be read back ({detail})"


def _verify(db: str, session: str | None) -> tuple[list[str], list[Any]]:
    """SQLite's integrity check and the derived-state check; damage is reported, not raised:
    whatever bytes the damage left, ``check`` gives its report (``ok`` false, the problems)."""
    integrity: list[str] = []
    disagreements: list[Any] = []
    try:
        with open_journal(db, readonly=True) as j:
            integrity = j.integrity_check()
            disagreements = j.check(session)
    except (JournalError, *_UNDECODABLE) as exc:
        if not _damaged(exc):
            raise
        integrity = [line for line in integrity if line != "ok"] + [_problem(exc)]
    return integrity, disagreements


@main.command()
@db_option
@click.argument("session", required=False)
@output_options
def check(db: str, session: str | None, as_json: bool, as_nl: bool) -> None:
    """Verify the file: SQLite's integrity check, and the derived state against the log."""
    integrity, disagreements = _verify(db, session)
    ok = integrity == ["ok"] and not disagreements
    items = [{"session_id": d.session_id, "table": d.table, "key": d.key, "field": d.field,
              "stored": d.stored, "derived": d.derived} for d in disagreements]  # fmt: skip
    lines = [f"integrity: {line}" for line in integrity] + [str(d) for d in disagreements]
    lines.append("ok" if ok else "PROBLEMS FOUND")
    output({"ok": ok, "integrity": integrity, "disagreements": items}, items, lines, as_json=as_json, as_nl=as_nl)
    if not ok:
        raise click.exceptions.Exit(1)
