"""The ``journal`` command: a thin shell over the library (DESIGN §10).

Every read command takes ``--json`` (one JSON document) or ``--nl`` (one JSON object a line);
their fields are documented in docs/cli.md and are a stable contract. Logs and progress go to
stderr. A library error becomes a one-line message and exit status 1, never a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import click

import journal
from journal import render
from journal.errors import JournalError

DB_HELP = "The journal file (or set JOURNAL_DB)."


def _emit_json(document: Any) -> None:
    click.echo(json.dumps(document, ensure_ascii=False, indent=2, default=str))


def _emit_nl(items: Iterable[Any]) -> None:
    for item in items:
        click.echo(json.dumps(item, ensure_ascii=False, default=str))


def output_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` and ``--nl``, shared by every read command."""
    fn = click.option("--nl", "as_nl", is_flag=True, help="One JSON object a line.")(fn)
    fn = click.option("--json", "as_json", is_flag=True, help="One JSON document.")(fn)
    return fn


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--db", envvar="JOURNAL_DB", required=True, type=click.Path(dir_okay=False), help=DB_HELP)(fn)


def _fail_on_library_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except JournalError as exc:
            click.echo(f"journal: {exc}", err=True)
            sys.exit(1)

    return wrapper


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except JournalError as exc:
            click.echo(f"journal: {exc}", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agent-journal")
def main() -> None:
    """An AI agent's sessions in one crash-safe SQLite file."""


def _open(db: str, **kwargs: Any) -> journal.Journal:
    return journal.open(db, **kwargs)


@main.command()
@db_option
@click.option("--durability", type=click.Choice(["full", "normal"]), default="full", show_default=True)
def init(db: str, durability: str) -> None:
    """Create a journal file (or check that an existing one is a journal)."""
    with _open(db, durability=durability) as j:
        click.echo(f"journal ready: {j.path}")


@main.command()
@db_option
@output_options
def sessions(db: str, as_json: bool, as_nl: bool) -> None:
    """List the sessions, oldest first."""
    with _open(db, readonly=True) as j:
        found = j.sessions()
    if as_json:
        _emit_json({"sessions": [s.to_dict() for s in found]})
    elif as_nl:
        _emit_nl(s.to_dict() for s in found)
    else:
        for s in found:
            parent = f"  fork of {s.parent_id} at {s.seed_length - 1}" if s.parent_id else ""
            click.echo(f"{s.id}  {s.count:>6} events{parent}")


@main.command()
@db_option
@click.argument("session")
@click.argument("type")
@click.argument("data")
@click.option("--create", is_flag=True, help="Create the session if it does not exist.")
def append(db: str, session: str, type: str, data: str, create: bool) -> None:
    """Append one event (DATA is a JSON object) and print it as stored."""
    try:
        parsed = json.loads(data)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="DATA") from None
    with _open(db) as j:
        if create:
            try:
                j.session(session)
            except journal.SessionNotFound:
                j.create_session(session)
        event = j.append(session, type, parsed)
    _emit_json(event.to_dict())


@main.command()
@db_option
@click.argument("session")
@click.option("--view", type=click.Choice(["log", "messages", "provider"]), default="log", show_default=True,
              help="log: every event; messages: the folded transcript; provider: what a model is sent.")  # fmt: skip
@click.option("--since", type=int, default=None, help="Only events with seq >= SINCE (log view).")
@output_options
def show(db: str, session: str, view: str, since: int | None, as_json: bool, as_nl: bool) -> None:
    """Show a session: its log with turns, steps, dispatches and risk markers."""
    with _open(db, readonly=True) as j:
        info = j.session(session)
        if view == "log":
            items = [e.to_dict() for e in j.events(session, since=since)]
            text = lambda: render.transcript(j.events(session, since=since))  # noqa: E731
        elif view == "messages":
            messages = j.messages(session)
            items = [m.to_dict() for m in messages]
            text = lambda: render.messages(messages)  # noqa: E731
        else:
            shaped = j.provider_view(session)
            items = [m.to_dict() for m in shaped.messages]
            missing = [{"assistant_seq": m.assistant_seq, "tool_call_id": m.tool_call_id, "name": m.name} for m in shaped.missing]
            text = lambda: render.messages(shaped.messages, missing=shaped.missing)  # noqa: E731
        if as_json:
            document = {"session": info.to_dict(), "view": view, "items": items}
            if view == "provider":
                document["missing"] = missing
            _emit_json(document)
        elif as_nl:
            _emit_nl(items)
        else:
            parent = f", fork of {info.parent_id}" if info.parent_id else ""
            click.echo(f"session {info.id} ({info.count} events{parent})")
            click.echo(text())


@main.command()
@db_option
@click.argument("session")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events as they are appended.")
@click.option("-n", "--lines", type=int, default=10, show_default=True, help="How many recent events first.")
@click.option("--nl", "as_nl", is_flag=True, help="One JSON object a line.")
@click.option("--interval", type=float, default=0.2, show_default=True, help="Polling interval in seconds.")
def tail(db: str, session: str, follow: bool, lines: int, as_nl: bool, interval: float) -> None:
    """Print a session's latest events; with -f, follow new ones from another process."""
    with _open(db, readonly=True) as j:
        since = max(j.count(session) - lines, 0)
        while True:
            for event in j.events(session, since=since):
                if as_nl:
                    click.echo(json.dumps(event.to_dict(), ensure_ascii=False))
                else:
                    click.echo(render.transcript([event]))
                since = event.seq + 1
            if not follow:
                return
            time.sleep(interval)


@main.command()
@db_option
@click.argument("session")
@click.option("--at", default="last", show_default=True, help="The seq of the last event to inherit, or 'last'.")
@click.option("--id", "fork_id", default=None, help="The new session's id (generated if omitted).")
@output_options
def fork(db: str, session: str, at: str, fork_id: str | None, as_json: bool, as_nl: bool) -> None:
    """Fork a session: a new one inheriting its events up to --at."""
    boundary: int | str = at
    if at != "last":
        try:
            boundary = int(at)
        except ValueError:
            raise click.BadParameter("give a seq or 'last'", param_hint="--at") from None
    with _open(db) as j:
        created = j.fork(session, boundary, id=fork_id)
    if as_json or as_nl:
        click.echo(json.dumps(created.to_dict(), ensure_ascii=False, indent=2 if as_json else None))
    else:
        click.echo(created.id)


@main.command()
@db_option
@output_options
def scan(db: str, as_json: bool, as_nl: bool) -> None:
    """List all unfinished work (read-only): open turns, unresolved calls, stale submissions."""
    with _open(db, readonly=True) as j:
        report = j.scan()
    if as_json:
        _emit_json(report.to_dict())
    elif as_nl:
        document = report.to_dict()
        _emit_nl({"kind": kind, **item} for kind, items in document.items() for item in items)
    else:
        click.echo(render.scan_report(report))


@main.command()
@db_option
@click.argument("session", required=False)
@click.option("--dry-run", is_flag=True, help="Show the plan (with risks) and write nothing.")
@output_options
def recover(db: str, session: str | None, dry_run: bool, as_json: bool, as_nl: bool) -> None:
    """Close what a crash left open, by appending (close policy)."""
    with _open(db, readonly=dry_run) as j:
        targets = [session] if session else j.scan().sessions
        if dry_run:
            plans = {sid: j.plan(sid) for sid in targets}
            document = [
                {"session_id": sid, "repairs": [{"type": r.type, "data": r.data} for r in repairs]}
                for sid, repairs in plans.items()
            ]
            text = "\n".join(render.plan(sid, repairs) for sid, repairs in plans.items()) or "nothing to recover"
        else:
            results = j.recover(session)
            document = [r.to_dict() for r in results]
            text = "\n".join(
                f"{r.session_id}: appended {len(r.appended)} event(s)" for r in results
            ) or "nothing to recover"
    if as_json:
        _emit_json({"dry_run": dry_run, "sessions": document})
    elif as_nl:
        _emit_nl(document)
    else:
        click.echo(text)


@main.command()
@db_option
@click.option("--session", "session_id", default=None, help="Only this session's submissions.")
@click.option("--state", type=click.Choice(["queued", "running", "completed", "failed"]), default=None)
@output_options
def submissions(db: str, session_id: str | None, state: str | None, as_json: bool, as_nl: bool) -> None:
    """List submissions (the durable input queue), oldest first."""
    with _open(db, readonly=True) as j:
        found = j.submissions(session_id, state=state)
    if as_json:
        _emit_json({"submissions": [s.to_dict() for s in found]})
    elif as_nl:
        _emit_nl(s.to_dict() for s in found)
    else:
        for sub in found:
            lease = f" lease {sub.lease_owner}" if sub.lease_owner else ""
            outcome = f" ({sub.outcome})" if sub.outcome else ""
            click.echo(f"{sub.id}  {sub.session_id}  {sub.state.value:<9} attempt {sub.attempt}/{sub.max_attempts}{lease}{outcome}")


@main.command()
@db_option
@click.option("--dry-run", is_flag=True, help="Decide and show, then roll everything back.")
@click.option("--context-window", type=int, default=200_000, show_default=True,
              help="The model's context window, for overflow detection.")  # fmt: skip
@output_options
def reconcile(db: str, dry_run: bool, context_window: int, as_json: bool, as_nl: bool) -> None:
    """Settle, fail, requeue or resume every submission whose lease expired or whose owner died."""
    with _open(db) as j:
        decisions = j.reconcile(dry_run=dry_run, context_window=context_window)
    if as_json:
        _emit_json({"dry_run": dry_run, "decisions": [d.to_dict() for d in decisions]})
    elif as_nl:
        _emit_nl(d.to_dict() for d in decisions)
    elif not decisions:
        click.echo("nothing to reconcile")
    else:
        for d in decisions:
            mode = f" ({d.resume_mode.value})" if d.resume_mode else ""
            reason = f": {d.reason}" if d.reason else ""
            click.echo(f"{d.submission_id}  {d.action}{mode}{reason}  [{d.state}, {len(d.appended)} event(s)]")


@main.command()
@db_option
@click.argument("session", required=False)
@output_options
def check(db: str, session: str | None, as_json: bool, as_nl: bool) -> None:
    """Verify the file: SQLite's integrity check, and the derived state against the log."""
    with _open(db, readonly=True) as j:
        integrity = j.integrity_check()
        disagreements = j.check(session)
    ok = integrity == ["ok"] and not disagreements
    items = [{"session_id": d.session_id, "table": d.table, "key": d.key, "field": d.field,
              "stored": d.stored, "derived": d.derived} for d in disagreements]  # fmt: skip
    if as_json:
        _emit_json({"ok": ok, "integrity": integrity, "disagreements": items})
    elif as_nl:
        _emit_nl(items)
    else:
        click.echo("integrity: " + "; ".join(integrity))
        for d in disagreements:
            click.echo(str(d))
        click.echo("ok" if ok else "PROBLEMS FOUND")
    if not ok:
        sys.exit(1)


@main.command()
@db_option
@click.argument("sessions_", metavar="[SESSION]...", nargs=-1)
@click.option("-o", "--output", type=click.File("w"), default="-", help="Where to write (default stdout).")
def export(db: str, sessions_: tuple[str, ...], output: Any) -> None:
    """Write sessions as JSON lines: a {"session": ...} line, then one {"event": ...} per event."""
    with _open(db, readonly=True) as j:
        ids = list(sessions_) or [s.id for s in j.sessions()]
        for sid in ids:
            info = j.session(sid)
            output.write(json.dumps({"session": {"id": info.id, "meta": info.meta}}, ensure_ascii=False) + "\n")
            for event in j.events(sid):
                output.write(json.dumps({"event": event.to_dict()}, ensure_ascii=False) + "\n")


@main.command(name="import")
@db_option
@click.argument("source", type=click.File("r"))
def import_(db: str, source: Any) -> None:
    """Read sessions written by ``journal export`` (each session in one transaction)."""
    pending: dict[str, Any] | None = None
    events: list[tuple[str, dict[str, Any]]] = []
    imported = 0
    with _open(db) as j:

        def flush() -> None:
            nonlocal imported
            if pending is not None:
                j.create_session(pending["id"], meta=pending.get("meta"))
                j.append_many(pending["id"], events)
                imported += 1

        for number, line in enumerate(source, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            if "session" in record:
                flush()
                pending, events = record["session"], []
            elif "event" in record and pending is not None:
                event = record["event"]
                if event["seq"] != len(events):
                    raise click.ClickException(f"line {number}: seq {event['seq']} breaks the sequence")
                events.append((event["type"], event["data"]))
            else:
                raise click.ClickException(f"line {number}: expected a session or an event record")
        flush()
    click.echo(f"imported {imported} session(s)")


@main.command()
@db_option
@click.argument("session")
@click.option("--copy-forks", is_flag=True, help="Give forks that read through it their own copy first.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(db: str, session: str, copy_forks: bool, yes: bool) -> None:
    """Erase a session and everything derived from it (the one exception to append-only)."""
    if not yes:
        click.confirm(f"Erase session {session} and all its events for good?", abort=True, err=True)
    with _open(db) as j:
        result = j.purge(session, copy_forks=copy_forks)
    copied = f"; forks given their own copy: {', '.join(result.forks_copied)}" if result.forks_copied else ""
    click.echo(f"purged {result.session_id}: {result.events_deleted} event(s){copied}")


@main.command()
@db_option
@output_options
def stats(db: str, as_json: bool, as_nl: bool) -> None:
    """Counts: sessions, events, open turns, unresolved calls, file size."""
    with _open(db, readonly=True) as j:
        found = j.sessions()
        report = j.scan()
    size = sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))
    document = {
        "sessions": len(found),
        "forks": sum(1 for s in found if s.parent_id),
        "events": sum(s.count - s.seed_length for s in found),
        "open_turns": len(report.open_turns),
        "pending_calls": len(report.pending_calls),
        "indeterminate": len(report.indeterminate),
        "bytes": size,
    }
    if as_json or as_nl:
        click.echo(json.dumps(document, indent=2 if as_json else None))
    else:
        for key, value in document.items():
            click.echo(f"{key:>14}: {value}")


@main.command()
@click.option("--db", envvar="JOURNAL_DB", default=None, type=click.Path(dir_okay=False),
              help="Where to write the demo journal (default: a new temporary directory).")  # fmt: skip
def demo(db: str | None) -> None:
    """Run a real agent session in a child process, kill it mid-tool-call, then scan and recover."""
    from journal.demo import run_demo

    run_demo(db)


# The operator path's commands live beside the effect classes; they reuse the options above.
from journal.cli_effects import indeterminate, resolve  # noqa: E402

main.add_command(indeterminate)
main.add_command(resolve)

from journal.torture import torture  # noqa: E402

main.add_command(torture)
