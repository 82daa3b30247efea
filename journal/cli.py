"""The ``journal`` command: a thin shell over the library (DESIGN §10).

Every read command takes ``--json`` (one JSON document) or ``--nl`` (one JSON object a line);
their fields are documented in docs/cli.md and are a stable contract. Logs and progress go to
stderr. Every failure is one line, ``journal: ...`` on stderr, with exit status 1 (2 for a usage
error), never a traceback. Text for people goes through ``journal.render.echo`` and JSON through
``journal.escape.dumps``, so stored content never reaches the terminal raw (G14).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import click

import journal
from journal import render, transfer
from journal.errors import CorruptJournal, JournalError, NotAJournal
from journal.escape import dumps, escape
from journal.render import echo
from journal.store import SQLITE_HEADER

DB_HELP = "The journal file (or set JOURNAL_DB)."
_SEQ_MAX = 2**63 - 1  # seqs are SQLite integers


def _emit_json(document: Any) -> None:
    click.echo(dumps(document, indent=2))


def _emit_nl(items: Iterable[Any]) -> None:
    for item in items:
        click.echo(dumps(item))


def output_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` and ``--nl``, shared by every read command."""
    fn = click.option("--nl", "as_nl", is_flag=True, help="One JSON object a line.")(fn)
    fn = click.option("--json", "as_json", is_flag=True, help="One JSON document.")(fn)
    return fn


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--db", envvar="JOURNAL_DB", required=True, type=click.Path(dir_okay=False), help=DB_HELP)(fn)


def _fail(message: str, code: int) -> click.exceptions.Exit:
    """Print one escaped ``journal: ...`` line on stderr; the caller raises what this returns."""
    echo(f"journal: {message}", err=True)
    return click.exceptions.Exit(code)


@contextlib.contextmanager
def _one_line_failures() -> Iterator[None]:
    """Turn every failure into one line on stderr and an exit status: 1, or 2 for usage."""
    try:
        yield
    except click.exceptions.Exit:
        raise
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: a bare `journal` shows its help
            raise
        command = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        raise _fail(f"{exc.format_message()}{command}", exc.exit_code) from None
    except click.ClickException as exc:
        raise _fail(exc.format_message(), exc.exit_code) from None
    except click.Abort:
        raise _fail("aborted", 1) from None
    except JournalError as exc:
        raise _fail(str(exc), 1) from None
    except UnicodeEncodeError as exc:  # an argument that was not UTF-8 (Python keeps its bytes as surrogates)
        raise _fail(f"{exc.encoding} cannot encode {exc.object[exc.start : exc.end]!r} in {exc.object!r}", 1) from None
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename is not None else ""
        raise _fail(f"{exc.strerror or exc}{where}", 1) from None
    except Exception as exc:  # the contract: one line, never a traceback, even for a bug
        raise _fail(f"unexpected {type(exc).__name__}: {exc}", 1) from None


class _Group(click.Group):
    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        with _one_line_failures():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _one_line_failures():
            return super().invoke(ctx)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agent-journal")
def main() -> None:
    """An AI agent's sessions in one crash-safe SQLite file."""


def _open(db: str, *, create: bool = False, **kwargs: Any) -> journal.Journal:
    """Open the journal; only ``create`` lets a path that does not exist become a new one."""
    if not create and not os.path.exists(db):
        # Checked here so that a mistyped path never leaves an empty journal (or -wal) behind.
        raise click.ClickException(f"no such journal: {db}")
    return journal.open(db, **kwargs)


class _Seconds(click.ParamType):
    """A polling interval: finite, above zero, at most an hour (NaN and inf are refused)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        seconds = click.FLOAT.convert(value, param, ctx)
        if not (math.isfinite(seconds) and 0 < seconds <= 3600):
            self.fail(f"{value!r} is not a number of seconds in (0, 3600]", param, ctx)
        return seconds


@main.command()
@db_option
@click.option("--durability", type=click.Choice(["full", "normal"]), default="full", show_default=True)
def init(db: str, durability: str) -> None:
    """Create a journal file (or check that an existing one is a journal)."""
    with _open(db, create=True, durability=durability) as j:
        echo(f"journal ready: {j.path}")


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
            echo(f"{s.id}  {s.count:>6} events{parent}")


@main.command()
@db_option
@click.argument("session")
@click.argument("type")
@click.argument("data")
@click.option("--create", is_flag=True, help="Create the session (and the journal file) if it does not exist.")
def append(db: str, session: str, type: str, data: str, create: bool) -> None:
    """Append one event (DATA is a JSON object) and print it as stored."""
    try:
        parsed = transfer.parse_json(data)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="DATA") from None
    with _open(db, create=create) as j:
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
@click.option("--since", type=click.IntRange(0, _SEQ_MAX), default=None,
              help="Only events with seq >= SINCE (log view).")  # fmt: skip
@output_options
def show(db: str, session: str, view: str, since: int | None, as_json: bool, as_nl: bool) -> None:
    """Show a session: its log with turns, steps, dispatches and risk markers."""
    if since is not None and view != "log":
        raise click.UsageError(f"--since applies to the log view only, not --view {view}")
    with _open(db, readonly=True) as j:
        info = j.session(session)
        missing: list[dict[str, Any]] = []
        if view == "log":
            found = j.events(session, since=since)
            items = [e.to_dict() for e in found]
            lines = lambda: render.transcript(found)  # noqa: E731
        elif view == "messages":
            messages = j.messages(session)
            items = [m.to_dict() for m in messages]
            lines = lambda: render.messages(messages)  # noqa: E731
        else:
            shaped = j.provider_view(session)
            items = [m.to_dict() for m in shaped.messages]
            missing = [{"assistant_seq": m.assistant_seq, "tool_call_id": m.tool_call_id, "name": m.name} for m in shaped.missing]
            lines = lambda: render.messages(shaped.messages, missing=shaped.missing)  # noqa: E731
    if as_json:
        document = {"session": info.to_dict(), "view": view, "items": items}
        if view == "provider":
            document["missing"] = missing
        _emit_json(document)
    elif as_nl:
        _emit_nl(items)
    else:
        parent = f", fork of {info.parent_id}" if info.parent_id else ""
        echo(f"session {info.id} ({info.count} events{parent})", *lines())


@main.command()
@db_option
@click.argument("session")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events as they are appended.")
@click.option("-n", "--lines", type=click.IntRange(0, _SEQ_MAX), default=10, show_default=True,
              help="How many recent events first.")  # fmt: skip
@click.option("--nl", "as_nl", is_flag=True, help="One JSON object a line.")
@click.option("--interval", type=_Seconds(), default=0.2, show_default=True, help="Polling interval in seconds.")
def tail(db: str, session: str, follow: bool, lines: int, as_nl: bool, interval: float) -> None:
    """Print a session's latest events; with -f, follow new ones from another process."""
    with _open(db, readonly=True) as j:
        since = max(j.count(session) - lines, 0)
        while True:
            for event in j.events(session, since=since):
                if as_nl:
                    _emit_nl([event.to_dict()])
                else:
                    echo(*render.transcript([event]))
                since = event.seq + 1
            if not follow:
                return
            time.sleep(interval)


def _boundary(at: str) -> int | str:
    """``--at``: ``last`` or a seq (digits only); anything else is a usage error."""
    if at == "last":
        return at
    if not re.fullmatch(r"[0-9]{1,19}", at) or int(at) > _SEQ_MAX:
        raise click.BadParameter(f"give a seq (an integer >= 0) or 'last', not {at!r}", param_hint="--at")
    return int(at)


@main.command()
@db_option
@click.argument("session")
@click.option("--at", default="last", show_default=True, help="The seq of the last event to inherit, or 'last'.")
@click.option("--id", "fork_id", default=None, help="The new session's id (generated if omitted).")
@output_options
def fork(db: str, session: str, at: str, fork_id: str | None, as_json: bool, as_nl: bool) -> None:
    """Fork a session: a new one inheriting its events up to --at."""
    boundary = _boundary(at)
    with _open(db) as j:
        created = j.fork(session, boundary, id=fork_id)
    if as_json:
        _emit_json(created.to_dict())
    elif as_nl:
        _emit_nl([created.to_dict()])
    else:
        echo(created.id)


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
        echo(*render.scan_report(report))


def _held_line(session_id: str, owner: str) -> str:
    return f"{session_id}: turn held by live process {owner}; skipped (use --force)"


def _recovered(result: Any) -> str:
    if result.live_owner:
        return _held_line(result.session_id, result.live_owner)
    return f"{result.session_id}: appended {len(result.appended)} event(s)"


@main.command()
@db_option
@click.argument("session", required=False)
@click.option("--dry-run", is_flag=True, help="Show the plan (with risks) and write nothing.")
@click.option("--force", is_flag=True, help="Also close turns whose owner process is still alive.")
@output_options
def recover(db: str, session: str | None, dry_run: bool, force: bool, as_json: bool, as_nl: bool) -> None:
    """Close what a crash left open, by appending (close policy)."""
    with _open(db, readonly=dry_run) as j:
        report = j.scan()
        targets = [session] if session else report.sessions
        if dry_run:
            held = {} if force else {t.session_id: t.owner for t in report.open_turns if t.held}
            plans = {sid: [] if sid in held else j.plan(sid) for sid in targets}
            document = [
                {"session_id": sid, "repairs": [{"type": r.type, "data": r.data} for r in repairs],
                 "live_owner": held.get(sid)}
                for sid, repairs in plans.items()
            ]  # fmt: skip
            lines = [
                line
                for sid, repairs in plans.items()
                for line in ([_held_line(sid, held[sid])] if sid in held else render.plan(sid, repairs))
            ]
        else:
            results = j.recover(session, force=force)
            document = [r.to_dict() for r in results]
            lines = [_recovered(r) for r in results]
    if as_json:
        _emit_json({"dry_run": dry_run, "sessions": document})
    elif as_nl:
        _emit_nl(document)
    else:
        echo(*(lines or ["nothing to recover"]))


@main.command()
@db_option
@click.option("--session", "session_id", default=None, help="Only this session's submissions.")
@click.option("--id", "submission_id", default=None, help="Only the submission with this id.")
@click.option("--state", type=click.Choice(["queued", "running", "completed", "failed"]), default=None)
@output_options
def submissions(db: str, session_id: str | None, submission_id: str | None, state: str | None, as_json: bool, as_nl: bool) -> None:
    """List submissions (the durable input queue), oldest first."""
    with _open(db, readonly=True) as j:
        if session_id is not None:
            j.session(session_id)  # an unknown session is an error, not an empty list
        if submission_id is not None:
            one = j.submission(submission_id)  # SubmissionNotFound names the id
            found = [one] if session_id in (None, one.session_id) and state in (None, one.state.value) else []
        else:
            found = j.submissions(session_id, state=state)
    if as_json:
        _emit_json({"submissions": [s.to_dict() for s in found]})
    elif as_nl:
        _emit_nl(s.to_dict() for s in found)
    else:
        for sub in found:
            lease = f" lease {sub.lease_owner}" if sub.lease_owner else ""
            outcome = f" ({sub.outcome})" if sub.outcome else ""
            echo(f"{sub.id}  {sub.session_id}  {sub.state.value:<9} attempt {sub.attempt}/{sub.max_attempts}{lease}{outcome}")


@main.command()
@db_option
@click.option("--dry-run", is_flag=True, help="Decide and show, then roll everything back.")
@click.option("--context-window", type=click.IntRange(1, _SEQ_MAX), default=200_000, show_default=True,
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
        echo("nothing to reconcile")
    else:
        for d in decisions:
            mode = f" ({d.resume_mode.value})" if d.resume_mode else ""
            reason = f": {d.reason}" if d.reason else ""
            echo(f"{d.submission_id}  {d.action}{mode}{reason}  [{d.state}, {len(d.appended)} event(s)]")


def _damaged(exc: JournalError) -> bool:
    """Whether an error opening or reading the file means it is damaged (what check reports)."""
    return isinstance(exc, CorruptJournal) or (isinstance(exc, NotAJournal) and exc.reason.startswith("unreadable"))


def _verify(db: str, session: str | None) -> tuple[list[str], list[Any]]:
    """SQLite's integrity check and the derived-state check; damage is reported, not raised."""
    integrity: list[str] = []
    disagreements: list[Any] = []
    try:
        with _open(db, readonly=True) as j:
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
    if as_json:
        _emit_json({"ok": ok, "integrity": integrity, "disagreements": items})
    elif as_nl:
        _emit_nl(items)
    else:
        echo(*[f"integrity: {line}" for line in integrity], *[str(d) for d in disagreements])
        echo("ok" if ok else "PROBLEMS FOUND")
    if not ok:
        raise click.exceptions.Exit(1)


def _journal_files(db: str) -> list[os.stat_result]:
    """The journal and its side files as they stand (an export must never write over them)."""
    found = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            found.append(os.stat(db + suffix))
    return found


def _export_target(path: str, db: str) -> IO[str]:
    """``path`` opened for an export: created 0600, never through a symlink, never over a journal.

    The checks read the opened file itself, so what is checked is what gets truncated."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        info = os.fstat(fd)
        if any(os.path.samestat(info, other) for other in _journal_files(db)):
            raise click.ClickException(f"export: {path} is the journal being read (or one of its files)")
        if stat.S_ISREG(info.st_mode):
            if os.pread(fd, len(SQLITE_HEADER), 0) == SQLITE_HEADER:
                raise click.ClickException(f"export: {path} is an SQLite database; it is left untouched")
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "w", encoding="utf-8", newline="\n")


@main.command()
@db_option
@click.argument("sessions_", metavar="[SESSION]...", nargs=-1)
@click.option("-o", "--output", default="-", type=click.Path(dir_okay=False, allow_dash=True),
              help="Where to write (default stdout); created 0600; never over a journal.")  # fmt: skip
def export(db: str, sessions_: tuple[str, ...], output: str) -> None:
    """Write sessions as JSON lines: a {"session": ...} line, then one {"event": ...} per event."""
    with _open(db, readonly=True) as j:
        ids = list(sessions_) or None
        lines = transfer.export_lines(j, ids)
        if output == "-":
            for line in lines:
                click.echo(line)
            return
        for sid in ids or ():
            j.session(sid)  # an unknown session fails before the output file is touched
        with _export_target(output, db) as out:
            for line in lines:
                out.write(line + "\n")


@main.command(name="import")
@db_option
@click.argument("source", type=click.File("rb"))
def import_(db: str, source: IO[bytes]) -> None:
    """Read sessions written by ``journal export`` (each session in one transaction)."""
    with _open(db, create=True) as j:
        imported = transfer.import_lines(j, source)
    echo(f"imported {imported} session(s)")


@main.command()
@db_option
@click.argument("session")
@click.option("--copy-forks", is_flag=True, help="Give forks that read through it their own copy first.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(db: str, session: str, copy_forks: bool, yes: bool) -> None:
    """Erase a session and everything derived from it (the one exception to append-only)."""
    with _open(db) as j:
        j.session(session)  # an unknown session fails before the question is asked
        if not yes:
            click.confirm(escape(f"Erase session {session} and all its events for good?"), abort=True, err=True)
        result = j.purge(session, copy_forks=copy_forks)
    copied = f"; forks given their own copy: {', '.join(result.forks_copied)}" if result.forks_copied else ""
    echo(f"purged {result.session_id}: {result.events_deleted} event(s){copied}")


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
    if as_json:
        _emit_json(document)
    elif as_nl:
        _emit_nl([document])
    else:
        echo(*[f"{key:>14}: {value}" for key, value in document.items()])


@main.command()
@click.option("--db", envvar="JOURNAL_DB", default=None, type=click.Path(dir_okay=False),
              help="Where to write the demo journal (default: a new temporary directory).")  # fmt: skip
def demo(db: str | None) -> None:
    """Run a real agent session in a child process, kill it mid-tool-call, then scan and recover."""
    from journal.demo import run_demo

    run_demo(db)


if __name__ == "__main__":
    # `python -m journal.cli` runs this file as __main__; the commands registered below import
    # journal.cli by name, so run that module's group, which has all of them.
    from journal.cli import main as _main

    _main()
else:
    # The operator path's commands live beside the effect classes; they reuse the options above.
    from journal.cli_effects import indeterminate, resolve
    from journal.torture import torture

    main.add_command(indeterminate)
    main.add_command(resolve)
    main.add_command(torture)
