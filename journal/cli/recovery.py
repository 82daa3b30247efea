"""After a crash: ``scan``, ``recover``, ``check``."""

from __future__ import annotations

from typing import Any

import click

from journal import CorruptJournal, JournalError, NotAJournal, RecoveryPlan, RecoveryResult
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
        done = j.plan_recovery(session, force=force) if dry_run else j.recover(session, force=force, on_progress=_Progress())
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
        return [f"{done.session_id}: turn held by live process {done.live_owner}; skipped (use --force)"]
    if isinstance(done, RecoveryPlan):
        return render.plan(done.session_id, done.repairs)
    return [f"{done.session_id}: appended {len(done.appended)} event(s)"]


def _damaged(exc: JournalError) -> bool:
    """Whether an error opening or reading the file means it is damaged (what check reports)."""
    return isinstance(exc, CorruptJournal) or (isinstance(exc, NotAJournal) and exc.reason.startswith("unreadable"))


def _verify(db: str, session: str | None) -> tuple[list[str], list[Any]]:
    """SQLite's integrity check and the derived-state check; damage is reported, not raised."""
    integrity: list[str] = []
    disagreements: list[Any] = []
    try:
        with open_journal(db, readonly=True) as j:
            integrity = j.integrity_check()
            disagreements = j.check(session)
    except JournalError as exc:
        if not _damaged(exc):
            raise
        integrity = [line for line in integrity if line != "ok"] + [str(exc)]
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
