"""``journal demo``: the story a newcomer should see, with a real crash.

A child process runs a scripted agent session whose tools leave real side effects in a ledger
file; it is killed with SIGKILL in the middle of a tool call (after the tool's side effect,
before its result was written). The parent then runs the restart scan, shows the recovery plan
with the risk of each synthetic result, recovers, checks the file, and lets the agent carry on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid

import click

import journal
from journal import render
from journal.testing.ledger import Ledger

CRASH_AT = "tool.after_run:2"  # the second tool call: delete_file, after its side effect


def _heading(text: str) -> None:
    click.echo("")
    click.secho(f"== {text}", bold=True)


def _child(db: str, session_id: str, ledger: str, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("JOURNAL_CRASH_AT", None)
    if crash_at:
        env["JOURNAL_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "journal.testing.workload", db, session_id, ledger],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_demo(db: str | None) -> None:
    if db is None:
        db = os.path.join(tempfile.mkdtemp(prefix="journal-demo-"), "demo.db")
    ledger_path = db + ".ledger"
    session_id = f"demo-{uuid.uuid4().hex[:8]}"
    click.echo(f"journal file: {db}")
    click.echo(f"side-effect ledger (the witness outside the journal): {ledger_path}")

    _heading("1. An agent runs in a child process and is killed mid-tool-call")
    click.echo(f"The child runs session {session_id}; it is armed with JOURNAL_CRASH_AT={CRASH_AT}:")
    click.echo("it dies by SIGKILL right after delete_file's side effect, before its result is written.")
    done = _child(db, session_id, ledger_path, CRASH_AT)
    if done.returncode == -signal.SIGKILL:
        click.echo("child killed by SIGKILL (no cleanup, no flush, like kill -9 or a crash).")
    else:
        click.echo(f"unexpected: the child exited with status {done.returncode}\n{done.stderr}", err=True)
        raise SystemExit(1)

    with journal.open(db) as j:
        _heading("2. Restart scan (read-only; its cost grows with the unfinished work, not the file)")
        click.echo(render.scan_report(j.scan()))

        _heading("3. Recovery plan (what recovery will append; nothing is deleted)")
        click.echo(render.plan(session_id, j.plan(session_id)))

        _heading("4. Recover")
        for result in j.recover(session_id):
            click.echo(f"appended {len(result.appended)} event(s) to {result.session_id}")
        click.echo(f"scan after recovery: {render.scan_report(j.scan())}")

        _heading("5. What really happened (the ledger) vs what the journal says")
        for entry in Ledger(ledger_path).entries():
            click.echo(f"side effect: {entry['tool']} [{entry['call']}] {entry['arguments']}")
        click.echo("delete_file [t1-rm] really ran; its result was lost in the crash, so the journal says it")
        click.echo("MAY have run (verify before retrying). append_note [t1-log] was never dispatched: the")
        click.echo("journal says it did not run, and the ledger agrees. Nothing is re-run automatically.")

        _heading("6. The session's log after recovery")
        click.echo(render.transcript(j.events(session_id)))

    _heading("7. The agent carries on (a fresh process continues with the next turns)")
    again = _child(db, session_id, ledger_path, None)
    if again.returncode != 0:
        click.echo(again.stderr, err=True)
        raise SystemExit(1)
    with journal.open(db) as j:
        events = j.events(session_id)
        turns = [e for e in events if e.type == "turn_end"]
        click.echo(f"{len(events)} events, {len(turns)} turns: " + ", ".join(f"turn {e.data.get('turn')} {e.data['reason']}" for e in turns))
        problems = j.check(session_id)
        integrity = j.integrity_check()
        click.echo(f"journal check: integrity {integrity[0]}, derived state {'agrees' if not problems else problems}")
        ledger = Ledger(ledger_path)
        repeated = ledger.repeated("call")
        click.echo(f"side effects: {len(ledger.entries())}, repeated: {len(repeated)}")
    click.echo("")
    click.echo(f"Look around: journal show {session_id} --db {db}")
