"""The file and its sessions: ``init``, ``sessions``, ``fork``, ``purge``, ``stats``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

import click

from journal import Journal, Session
from journal.cli.app import main
from journal.cli.options import SEQ_MAX, db_option, open_journal
from journal.cli.output import output, output_options
from journal.cli.render import cut_id, echo
from journal.codec import MAX_DEPTH, parse_json, too_deep
from journal.errors import InvalidEvent
from journal.escape import dumps, escape
from journal.store.target import is_dsn


@main.command()
@db_option
@click.option("--durability", type=click.Choice(["full", "normal"]), default="full", show_default=True,
              help="How this command's writes are synced: full survives power loss, normal a crash.")  # fmt: skip
def init(db: str, durability: str) -> None:
    """Create a journal file (or check that an existing one is a journal that can be written)."""
    with open_journal(db, create=True, durability=durability) as j:
        if not is_dsn(db):
            _check_writable(j.path)
        echo(f"journal ready: {j.path}")


def _check_writable(path: str) -> None:
    """Refuse to call a journal ready that this process cannot write: opening one only reads
    it, so a read-only (or immutable) file, or its ``-wal`` or ``-shm``, would fail only at the
    first write."""
    for name in (path, path + "-wal", path + "-shm"):
        if os.path.exists(name) and not os.access(name, os.W_OK):
            raise click.ClickException(f"{path} is a journal, but it cannot be written: {name} is read-only")


# Sessions read per query: a file of 100,000 sessions is listed without holding them all.
PAGE = 1000


@main.command()
@db_option
@click.option(
    "--meta",
    "metas",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only sessions whose meta has KEY equal to VALUE (a JSON scalar, else the text). Repeatable.",
)
@click.option("--prefix", default=None, help="Only sessions whose id starts with this.")
@output_options
def sessions(db: str, metas: tuple[str, ...], prefix: str | None, as_json: bool, as_nl: bool) -> None:
    """List the sessions, oldest first."""
    meta = _meta_filter(metas)
    with open_journal(db, readonly=True) as j:
        if as_json:
            _print_json_pages("sessions", ([s.to_dict() for s in page] for page in _pages(j, meta, prefix)))
        else:
            found = (s for page in _pages(j, meta, prefix) for s in page)  # only the chosen form consumes it
            output(None, (s.to_dict() for s in found), map(_session_line, found), as_json=False, as_nl=as_nl)


def _meta_filter(metas: tuple[str, ...]) -> dict[str, Any] | None:
    """``--meta KEY=VALUE`` options as ``sessions(meta=...)``: VALUE read as a JSON string,
    number or boolean when it is one (``n=3``, ``vip=true``, ``name="3"``), else as text."""
    if not metas:
        return None
    out: dict[str, Any] = {}
    for item in metas:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, not {item!r}", param_hint="--meta")
        if too_deep(text):  # not a scalar, and no text worth matching either: say so
            raise click.BadParameter(f"{key}: nests deeper than the limit of {MAX_DEPTH} levels", param_hint="--meta")
        try:
            value = parse_json(text, "--meta")
        except InvalidEvent:
            value = text
        out[key] = value if isinstance(value, (str, int, float, bool)) else text
    return out


def _pages(j: Journal, meta: dict[str, Any] | None = None, prefix: str | None = None) -> Iterator[list[Session]]:
    """Every session (of the filter), oldest first, a page (one query) at a time."""
    after: Session | None = None
    while True:
        page = j.sessions(
            limit=PAGE, after=after, meta=meta, prefix=prefix
        )  # after a Session: even one purged meanwhile
        if page:
            yield page
        if len(page) < PAGE:
            return
        after = page[-1]


def _print_json_pages(key: str, pages: Iterable[list[dict[str, Any]]]) -> None:
    """Print ``{key: [items...]}`` a page at a time, byte for byte as ``print_json`` prints it whole.

    ``output`` needs the whole document, which 100,000 sessions should not be. ``dumps(page,
    indent=2)`` lays a page's items out one level shallower than the document does: its
    brackets cut off and two spaces put after each newline, it is the document's text for them
    (every raw newline is the layout's: json escapes those in strings)."""
    opened = False
    for items in pages:
        text = dumps(items, indent=2)  # "[\n  {...},\n  {...}\n]"
        head = ",\n  " if opened else "{\n  " + dumps(key) + ": [\n  "
        click.echo(head + text[2:-2].replace("\n", "\n  "), nl=False)
        opened = True
    click.echo("\n  ]\n}" if opened else dumps({key: []}, indent=2))


def _session_line(s: Session) -> str:
    parent = f"  fork of {cut_id(s.parent_id)} at {s.seed_length - 1}" if s.parent_id else ""
    return f"{cut_id(s.id)}  {s.count:>6} events{parent}"


def _boundary(at: str) -> int | str:
    """``--at``: ``last`` or a seq (digits only); anything else is a usage error."""
    if at == "last":
        return at
    if not re.fullmatch(r"[0-9]{1,19}", at) or int(at) > SEQ_MAX:
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
    with open_journal(db) as j:
        created = j.fork(session, boundary, id=fork_id)
    output(created.to_dict(), [created.to_dict()], [created.id], as_json=as_json, as_nl=as_nl)


@main.command()
@db_option
@click.argument("session")
@click.option("--copy-forks", is_flag=True, help="Give forks that read through it their own copy first.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(db: str, session: str, copy_forks: bool, yes: bool) -> None:
    """Erase a session and everything derived from it (the one exception to append-only)."""
    with open_journal(db) as j:
        j.session(session)  # an unknown session fails before the question is asked
        if not yes:
            click.confirm(escape(f"Erase session {cut_id(session)} and all its events for good?"), abort=True, err=True)
        result = j.purge(session, copy_forks=copy_forks)
    more = len(result.forks_copied) - 5
    forks = [cut_id(f) for f in result.forks_copied[:5]] + [f"{more} more"] * (more > 0)
    copied = f"; forks given their own copy: {', '.join(forks)}" if forks else ""
    echo(f"purged {cut_id(result.session_id)}: {result.events_deleted} event(s){copied}")


@main.command()
@db_option
@output_options
def stats(db: str, as_json: bool, as_nl: bool) -> None:
    """Counts: sessions, events, open turns, unresolved calls, size on disk."""
    with open_journal(db, readonly=True) as j:
        totals = j.session_totals()  # counted in SQL: no Session is built
        report = j.scan()
        size = j.size_bytes()
    counts = {"sessions": totals.sessions, "forks": totals.forks, "events": totals.events}
    document = {
        **counts,
        "open_turns": len(report.open_turns),
        "pending_calls": len(report.pending_calls),
        "indeterminate": len(report.indeterminate),
        "bytes": size,
    }
    lines = [f"{key:>14}: {value}" for key, value in document.items()]
    output(document, [document], lines, as_json=as_json, as_nl=as_nl)


@main.command()
@db_option
@click.argument("session", required=False)
@output_options
def tools(db: str, session: str | None, as_json: bool, as_nl: bool) -> None:
    """Per tool: calls, results, p50/p95 ms from dispatch to result, errors, may have run, indeterminate."""
    with open_journal(db, readonly=True) as j:
        stats = j.tool_stats(session)
    rows = [t.to_dict() for t in stats]
    document = {"session_id": session, "tools": rows}

    def ms(value: int | None) -> str:
        return "-" if value is None else str(value)

    lines = [
        f"{cut_id(t.name)}: {t.calls} call(s), {t.results} result(s), p50 {ms(t.p50_ms)} ms, p95 {ms(t.p95_ms)} ms, "
        f"{t.errors} error(s), {t.may_have_run} may have run, {t.did_not_run} did not run, "
        f"{t.indeterminate} indeterminate"
        for t in stats
    ] or ["no tool calls"]
    output(document, rows, lines, as_json=as_json, as_nl=as_nl)
