"""A session's log: ``append``, ``show``, ``tail``; its keyed state: ``state``."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import click

import journal
from journal.cli import render
from journal.cli.app import main
from journal.cli.options import SEQ_MAX, Seconds, db_option, open_journal
from journal.cli.output import output, output_options, print_json
from journal.codec import Codec, parse_json
from journal.log import checked_append


@main.command()
@db_option
@click.argument("session")
@click.argument("type")
@click.argument("data")
@click.option("--create", is_flag=True, help="Create the session (and the journal file) if it does not exist.")
def append(db: str, session: str, type: str, data: str, create: bool) -> None:
    """Append one event (DATA is a JSON object) and print it as stored."""
    try:
        parsed = parse_json(data, "DATA")
    except journal.InvalidEvent as exc:  # not JSON, or nested past the codec's limit
        raise click.BadParameter(exc.problem, param_hint="DATA") from None
    if create:  # an event the append would refuse creates neither the journal nor the session
        checked_append(type, parsed, Codec())
    with open_journal(db, create=create) as j:
        if create:
            try:
                j.session(session)
            except journal.SessionNotFound:
                j.create_session(session)
        event = j.append(session, type, parsed)
    print_json(event.to_dict())  # always JSON: what was stored, for a script to read


@main.command()
@db_option
@click.argument("session")
@click.option("--view", type=click.Choice(["log", "messages", "provider"]), default="log", show_default=True,
              help="log: every event; messages: the folded transcript; provider: what a model is sent.")  # fmt: skip
@click.option("--since", type=click.IntRange(0, SEQ_MAX), default=None,
              help="Only events with seq >= SINCE (log view).")  # fmt: skip
@click.option("--tail", type=click.IntRange(0, SEQ_MAX), default=None,
              help="Only the last N items of the view: events, messages, or what a model is sent.")  # fmt: skip
@output_options
def show(db: str, session: str, view: str, since: int | None, tail: int | None, as_json: bool, as_nl: bool) -> None:
    """Show a session: its log with turns, steps, dispatches and risk markers."""
    if since is not None and view != "log":
        raise click.UsageError(f"--since applies to the log view only, not --view {view}")
    with open_journal(db, readonly=True) as j:
        info = j.session(session)
        document: dict[str, Any] = {"session": info.to_dict(), "view": view}
        if view == "log":
            found = j.events(session, since=_log_start(info.count, since, tail))
            if tail is not None:  # events appended since the count was read are past it
                found = found[max(len(found) - tail, 0) :]
            document["items"] = [e.to_dict() for e in found]
            render_lines = partial(render.transcript, found)
        elif view == "messages":
            messages = j.messages(session, tail=tail)
            document["items"] = [m.to_dict() for m in messages]
            render_lines = partial(render.messages, messages)
        else:
            shaped = j.provider_view(session, tail=tail)
            document["items"] = [m.to_dict() for m in shaped.messages]
            document["missing"] = [
                {"assistant_seq": m.assistant_seq, "tool_call_id": m.tool_call_id, "name": m.name}
                for m in shaped.missing
            ]
            render_lines = partial(render.messages, shaped.messages, missing=shaped.missing)
    parent = f", fork of {render.cut_id(info.parent_id)}" if info.parent_id else ""
    header = f"session {render.cut_id(info.id)} ({info.count} events{parent})"
    output(document, document["items"], _rendered(render_lines, header), as_json=as_json, as_nl=as_nl)


def _log_start(count: int, since: int | None, tail: int | None) -> int:
    """The first seq the log view shows: from ``since``, and among the last ``tail`` events."""
    start = since or 0
    return start if tail is None else max(start, count - tail)


@main.command()
@db_option
@click.argument("session")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events as they are appended.")
@click.option("-n", "--lines", type=click.IntRange(0, SEQ_MAX), default=10, show_default=True,
              help="How many recent events first.")  # fmt: skip
@click.option("--nl", "as_nl", is_flag=True, help="One JSON object a line.")
@click.option("--interval", type=Seconds(), default=0.2, show_default=True, help="Polling interval in seconds.")
def tail(db: str, session: str, follow: bool, lines: int, as_nl: bool, interval: float) -> None:
    """Print a session's latest events; with -f, follow new ones from another process."""
    with open_journal(db, readonly=True) as j:
        since = max(j.count(session) - lines, 0)
        while True:
            for event in j.events(session, since=since):
                # Each event is printed as it is read, rendered on its own (so not indented by its turn).
                text = _rendered(partial(render.transcript, [event]))
                output(None, [event.to_dict()], text, as_json=False, as_nl=as_nl)
                since = event.seq + 1
            if not follow:
                return
            time.sleep(interval)


def _rendered(render_lines: Callable[[], Iterable[str]], *first: str) -> Iterator[str]:
    """``first``, then ``render_lines()``: stored content is rendered only when text is printed."""
    yield from first
    yield from render_lines()


@main.command()
@db_option
@click.argument("session")
@click.option("--as-of", "as_of", type=click.IntRange(0, SEQ_MAX), default=None,
              help="The state as it stood right after the event with this seq.")  # fmt: skip
@output_options
def state(db: str, session: str, as_of: int | None, as_json: bool, as_nl: bool) -> None:
    """Show a session's keyed state: the latest value of each key (or as of a seq)."""
    with open_journal(db, readonly=True) as j:
        values = j.state(session, as_of=as_of)
    items = [{"key": key, **_state_value(value)} for key, value in values.items()]
    document = {"session_id": session, "as_of": as_of, "state": items}
    lines = (f"{render.cut(key, render.NAME_WIDTH)}  {render.state_value(value)}" for key, value in values.items())
    output(document, items, lines, as_json=as_json, as_nl=as_nl)


def _state_value(value: Any) -> dict[str, Any]:
    """A state value as the CLI's JSON gives it: ``{"json": value}`` or ``{"bytes": base64}``."""
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    return {"json": value}
