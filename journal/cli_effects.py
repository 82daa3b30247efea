"""The operator path on the command line: ``journal indeterminate`` and ``journal resolve``.

Registered on ``journal.cli.main`` by ``journal/cli.py``; they use its shared options, so import
``journal.cli`` (not this module) to get the command line.
"""

from __future__ import annotations

import attrs
import click

from journal.cli import _emit_json, _emit_nl, _open, db_option, output_options
from journal.model import OperatorOutcome
from journal.render import echo


@click.command()
@db_option
@click.argument("session", required=False)
@output_options
def indeterminate(db: str, session: str | None, as_json: bool, as_nl: bool) -> None:
    """List the tool calls awaiting an operator (read-only): Unsafe calls that may have run."""
    with _open(db, readonly=True) as j:
        calls = j.indeterminate(session)
    items = [attrs.asdict(call) for call in calls]
    if as_json:
        _emit_json({"indeterminate": items})
    elif as_nl:
        _emit_nl(items)
    elif not calls:
        echo("no tool call is awaiting an operator")
    else:
        for call in calls:
            data = (call.notification or {}).get("data", {})
            reason = f"  ({data['reason']})" if "reason" in data else ""
            echo(f"{call.session_id}  {call.call_id}  {call.name}  dispatched at seq {call.dispatch_seq}{reason}")


@click.command()
@db_option
@click.argument("session")
@click.argument("call")
@click.option("--outcome", required=True, type=click.Choice([o.value for o in OperatorOutcome]),
              help="What the operator found: the call ran, or it did not run.")  # fmt: skip
@click.option("--note", default=None, help="A note kept with the resolution.")
@output_options
def resolve(db: str, session: str, call: str, outcome: str, note: str | None, as_json: bool, as_nl: bool) -> None:
    """Resolve an indeterminate tool call: record what the operator found (ran / did_not_run)."""
    with _open(db) as j:
        event = j.resolve(session, call, outcome=outcome, note=note)
    if as_json:
        _emit_json(event.to_dict())
    elif as_nl:
        _emit_nl([event.to_dict()])
    else:
        echo(f"resolved {session} {call}: {outcome} (seq {event.seq})")
