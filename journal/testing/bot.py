"""A single-process bot over submissions, with a scripted fake model and ledger tools.

The worker claims submissions, drives each through the live loop, and resumes honestly after a
crash: it reads the log (the provider view), never its own memory, to decide what the model
does next. The fake model is deterministic: for an input it first streams a short preface and
asks for two tools, then, once every call has a result (real or synthetic), streams its answer.
It never asks for a call again once the log holds any result for it, so a call whose result
says "MAY have run" is not re-run.

Run a worker in a child process with ``python -m journal.testing.bot DB LEDGER [OWNER]``.
"""

from __future__ import annotations

import sys
from typing import Any

from journal import crash
from journal.claims import Claim
from journal.engine import Journal
from journal.pure.view import provider_view
from journal.testing.ledger import Ledger


def model(events: list[Any], submission_id: str) -> dict[str, Any]:
    """The fake model's next answer for a submission, from the log alone."""
    view = provider_view(events)
    asked = any(m.role == "assistant" and m.tool_calls for m in view.messages)
    if not asked:
        calls = [
            {"id": f"{submission_id}-a", "name": "charge_card", "arguments": {"cents": 1200}},
            {"id": f"{submission_id}-b", "name": "send_email", "arguments": {"to": "user@example.com"}},
        ]
        return {"chunks": ["Let me ", "do that."], "tool_calls": calls}
    return {"chunks": ["All ", "done."], "tool_calls": []}


def run_tool(ledger: Ledger, call: dict[str, Any]) -> str:
    crash.reached("tool.before_run")
    ledger.record(call=call["id"], tool=call["name"], arguments=call["arguments"])
    crash.reached("tool.after_run")
    return f"{call['name']} ok"


def drive(journal: Journal, claim: Claim, ledger: Ledger) -> None:
    """Run one claimed submission's turn to its end."""
    turn = claim.turn
    sub_id = claim.submission.id
    if turn.step_number is not None:
        turn.step_end(outcome="error")  # a step the crashed attempt left open
    while True:
        events = [e for e in journal.events(turn.session_id) if e.seq >= turn.start_seq]
        answer = model(events, sub_id)
        with turn.step():
            stream_key = f"{sub_id}:{claim.attempt}:{turn.step_number}"
            turn.provider_started(stream_key=stream_key)
            for index, chunk in enumerate(answer["chunks"]):
                turn.save_chunk(index, chunk)
            calls = answer["tool_calls"]
            turn.assistant("".join(answer["chunks"]), tool_calls=calls or None)
            for call in calls:
                with turn.dispatch(call["id"]) as dispatch:
                    dispatch.result(run_tool(ledger, call), name=call["name"])
        if not calls:
            claim.complete()
            return


def work(journal: Journal, ledger: Ledger, *, owner: str | None = None) -> int:
    """Claim and drive submissions until none is runnable; returns how many were driven."""
    driven = 0
    while (claim := journal.claim(owner=owner)) is not None:
        drive(journal, claim, ledger)
        driven += 1
    return driven


def main(argv: list[str]) -> int:
    from journal.engine import open as open_journal

    with open_journal(argv[0]) as journal:
        work(journal, Ledger(argv[1]), owner=argv[2] if len(argv) > 2 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
