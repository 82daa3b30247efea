"""The operator path: ``indeterminate`` lists what may have run, ``resolve`` records what did."""

from __future__ import annotations

import attrs
import click

from journal import IndeterminateCall, OperatorOutcome
from journal.cli import render
from journal.cli.app import main
from journal.cli.options import db_option, open_journal
from journal.cli.output import output, output_options


@main.command()
@db_option
@click.argument("session", required=False)
@output_options
def indeterminate(db: str, session: str | None, as_json: bool, as_nl: bool) -> None:
    """List the tool calls awaiting an operator (read-only): Unsafe calls that may have run."""
    with open_journal(db, readonly=True) as j:
        calls = j.indeterminate(session)
    items = [attrs.asdict(call) for call in calls]
    lines = [_call_line(call) for call in calls] or ["no tool call is awaiting an operator"]
    output({"indeterminate": items}, items, lines, as_json=as_json, as_nl=as_nl)


def _call_line(call: IndeterminateCall) -> str:
    data = (call.notification or {}).get("data", {})
    reason = f"  ({render.cut(data['reason'])})" if isinstance(data, dict) and "reason" in data else ""
    ids = f"{render.cut_id(call.session_id)}  {render.cut_id(call.call_id)}  {render.cut_name(call.name)}"
    return f"{ids}  dispatched at seq {call.dispatch_seq}{reason}"


@main.command()
@db_option
@click.argument("session")
@click.argument("call")
@click.option("--outcome", required=True, type=click.Choice([o.value for o in OperatorOutcome]),
              help="What the operator found: the call ran, or it did not run.")  # fmt: skip
@click.option("--note", default=None, help="A note kept with the resolution.")
@output_options
def resolve(db: str, session: str, call: str, outcome: str, note: str | None, as_json: bool, as_nl: bool) -> None:
    """Resolve an indeterminate tool call: record what the operator found (ran / did_not_run)."""
    with open_journal(db) as j:
        event = j.resolve(session, call, outcome=outcome, note=note)
    lines = [f"resolved {render.cut_id(session)} {render.cut_id(call)}: {outcome} (seq {event.seq})"]
    output(event.to_dict(), [event.to_dict()], lines, as_json=as_json, as_nl=as_nl)
