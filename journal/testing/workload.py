"""A scripted agent session with real side effects: the workload of crash tests and the demo.

``run(journal, session_id, ledger)`` plays a fixed conversation through the live loop (turns,
steps, a model that asks for tools, dispatches, results), where each tool writes to the ledger.
The workload is deterministic, so a run killed anywhere can be compared with a clean one, and
idempotent to resume: it skips the turns the log already holds.

Tool crash points (``tool.before_run``, ``tool.after_run``) sit around each tool's side effect;
arm them like the engine's own (``JOURNAL_CRASH_AT=tool.after_run:2``).

Run it in a child process with ``python -m journal.testing.workload DB SESSION LEDGER`` (``DB``
``-``: read it from stdin's first line, so a DSN's password is not in the command line).
"""

from __future__ import annotations

import sys
from typing import Any

from journal import crash
from journal.engine import Journal
from journal.testing.ledger import Ledger

# Each turn: the user's input, then the model's steps. A step with tool calls is followed by the
# model's next step; the last step of a turn answers in text.
SCRIPT: list[dict[str, Any]] = [
    {
        "user": "List my files and delete the temporary one.",
        "steps": [
            [{"id": "t1-ls", "name": "list_files", "arguments": {"path": "/home"}}],
            [
                {"id": "t1-rm", "name": "delete_file", "arguments": {"path": "/home/tmp.txt"}},
                {"id": "t1-log", "name": "append_note", "arguments": {"text": "deleted tmp.txt"}},
            ],
            "Done: tmp.txt is gone.",
        ],
    },
    {
        "user": "Pay the electricity bill.",
        "steps": [
            [{"id": "t2-pay", "name": "pay_invoice", "arguments": {"invoice": "EL-2026-11", "cents": 4200}}],
            "Paid 42.00 for EL-2026-11.",
        ],
    },
    {
        "user": "Thanks!",
        "steps": ["You are welcome."],
    },
]


def tool_output(name: str, arguments: dict[str, Any]) -> str:
    return f"{name} ok: {sorted(arguments.items())}"


def run_tool(ledger: Ledger, session_id: str, call: dict[str, Any]) -> str:
    """The tool itself: its side effect is one ledger entry."""
    crash.reached("tool.before_run")
    ledger.record(session=session_id, call=call["id"], tool=call["name"], arguments=call["arguments"])
    crash.reached("tool.after_run")
    return tool_output(call["name"], call["arguments"])


def run(journal: Journal, session_id: str, ledger: Ledger, *, script: list[dict[str, Any]] = SCRIPT) -> None:
    """Play the script from the start of the session (turns already in the log are skipped)."""
    done_turns = sum(1 for e in journal.events(session_id) if e.type == "turn_start")
    for spec in script[done_turns:]:
        with journal.turn(session_id) as turn:
            journal.append(session_id, "user_message", {"content": spec["user"]})
            for step_number, step in enumerate(spec["steps"], start=1):
                with turn.step():
                    turn.provider_started(stream_key=f"{session_id}:{turn.turn}:{step_number}")
                    if isinstance(step, str):
                        turn.save_chunk(0, step)
                        turn.assistant(step, stop_reason="stop")
                        continue
                    turn.assistant("", tool_calls=step, stop_reason="tool_use")
                    for call in step:
                        with turn.dispatch(call["id"]) as dispatch:
                            dispatch.result(run_tool(ledger, session_id, call), name=call["name"])


def main(argv: list[str]) -> int:
    from journal.engine import open as open_journal

    path, session_id, ledger_path = argv[:3]
    if path == "-":  # the database on stdin: a DSN (it may hold a password) never in argv, which `ps` shows
        path = sys.stdin.readline().rstrip("\n")
    durability = argv[3] if len(argv) > 3 else "full"
    with open_journal(path, durability=durability) as journal:
        try:
            journal.session(session_id)
        except LookupError:
            journal.create_session(session_id)
        run(journal, session_id, Ledger(ledger_path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
