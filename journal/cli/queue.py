"""The durable input queue: ``submissions``, ``reconcile``."""

from __future__ import annotations

import click

from journal import Decision, Submission
from journal.cli import render
from journal.cli.app import main
from journal.cli.options import SEQ_MAX, db_option, open_journal
from journal.cli.output import output, output_options


@main.command()
@db_option
@click.option("--session", "session_id", default=None, help="Only this session's submissions.")
@click.option("--id", "submission_id", default=None, help="Only the submission with this id.")
@click.option("--state", type=click.Choice(["queued", "running", "completed", "failed"]), default=None,
              help="Only the submissions in this state.")  # fmt: skip
@output_options
def submissions(
    db: str, session_id: str | None, submission_id: str | None, state: str | None, as_json: bool, as_nl: bool
) -> None:
    """List submissions (the durable input queue), oldest first."""
    with open_journal(db, readonly=True) as j:
        if session_id is not None:
            j.session(session_id)  # an unknown session is an error, not an empty list
        if submission_id is not None:
            one = j.submission(submission_id)  # SubmissionNotFound names the id
            found = [one] if session_id in (None, one.session_id) and state in (None, one.state.value) else []
        else:
            found = j.submissions(session_id, state=state)
    items = [s.to_dict() for s in found]
    output({"submissions": items}, items, map(_submission_line, found), as_json=as_json, as_nl=as_nl)


def _submission_line(sub: Submission) -> str:
    lease = f" lease {render.cut_id(sub.lease_owner)}" if sub.lease_owner else ""
    outcome = f" ({render.cut(sub.outcome)})" if sub.outcome else ""
    return (
        f"{render.cut_id(sub.id)}  {render.cut_id(sub.session_id)}  {sub.state.value:<9} "
        f"attempt {sub.attempt}/{sub.max_attempts}{lease}{outcome}"
    )


@main.command()
@db_option
@click.option("--dry-run", is_flag=True, help="Decide and show, then roll everything back.")
@click.option("--context-window", type=click.IntRange(1, SEQ_MAX), default=200_000, show_default=True,
              help="The model's context window, for overflow detection.")  # fmt: skip
@output_options
def reconcile(db: str, dry_run: bool, context_window: int, as_json: bool, as_nl: bool) -> None:
    """Settle, fail, requeue or resume every submission whose lease expired or whose owner died."""
    with open_journal(db) as j:
        decisions = j.reconcile(dry_run=dry_run, context_window=context_window)
    items = [d.to_dict() for d in decisions]
    lines = [_decision_line(d) for d in decisions] or ["nothing to reconcile"]
    output({"dry_run": dry_run, "decisions": items}, items, lines, as_json=as_json, as_nl=as_nl)


def _decision_line(d: Decision) -> str:
    mode = f" ({d.resume_mode.value})" if d.resume_mode else ""
    reason = f": {render.cut(d.reason)}" if d.reason else ""
    return f"{render.cut_id(d.submission_id)}  {d.action}{mode}{reason}  [{d.state}, {len(d.appended)} event(s)]"
