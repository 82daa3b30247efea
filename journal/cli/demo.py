"""``journal demo``: the story a newcomer should see, with a real crash.

A child process runs a scripted agent session whose tools leave real side effects in a ledger
file; it is killed with SIGKILL in the middle of a tool call (after the tool's side effect,
before its result was written). The parent then runs the restart scan, shows the recovery plan
with the risk of each synthetic result, recovers, checks the file, and lets the agent carry on.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import uuid

import click

import journal
from journal.cli import render
from journal.cli.app import main
from journal.cli.render import echo
from journal.escape import escape
from journal.store.target import is_dsn, redact

CRASH_AT = "tool.after_run:2"  # the second tool call: delete_file, after its side effect


@main.command()
@click.option("--db", envvar="JOURNAL_DB", default=None, type=click.Path(dir_okay=False),
              help="Where to write the demo journal (default: a new temporary directory).")  # fmt: skip
def demo(db: str | None) -> None:
    """Run a real agent session in a child process, kill it mid-tool-call, then scan and recover."""
    run_demo(db)


def _heading(text: str) -> None:
    echo("")
    click.secho(escape(f"== {text}"), bold=True)


def _refuse_unsafe_ledger(path: str) -> None:
    """Refuse a ledger path that is a symlink or not a regular file (checked before any write)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise click.ClickException(f"demo: the ledger {path} is not a regular file (a symlink is never followed)")


def _create_ledger(path: str) -> None:
    """Create the ledger 0600 (or keep the existing file), never through a symlink.

    The child appends to it by name; this makes sure the name is a file of ours first."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        os.close(os.open(path, flags, 0o600))
    except OSError as exc:
        raise click.ClickException(f"demo: cannot use {path} as the ledger: {exc.strerror}") from None


def _child(db: str, session_id: str, ledger: str, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("JOURNAL_CRASH_AT", None)
    if crash_at:
        env["JOURNAL_CRASH_AT"] = crash_at
    return subprocess.run(
        # The database on stdin, not argv: every user of the machine can read a command line.
        [sys.executable, "-m", "journal.testing.workload", "-", session_id, ledger],
        input=db + "\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_demo(db: str | None) -> None:
    """Tell the story in seven steps, on ``db`` (or a new temporary directory's file)."""
    if db is None:
        db = os.path.join(tempfile.mkdtemp(prefix="journal-demo-"), "demo.db")
    # Beside the file; for a database, in a directory of its own (a DSN is no file's name: it
    # may hold a password).
    ledger_path = (
        os.path.join(tempfile.mkdtemp(prefix="journal-demo-"), "demo.ledger") if is_dsn(db) else db + ".ledger"
    )
    session_id = f"demo-{uuid.uuid4().hex[:8]}"
    _refuse_unsafe_ledger(ledger_path)
    with journal.open(db):
        pass  # a place that cannot hold a journal fails here, in one line, before the child runs
    _create_ledger(ledger_path)
    echo(f"journal file: {redact(db)}", f"side-effect ledger (the witness outside the journal): {ledger_path}")

    _heading("1. An agent runs in a child process and is killed mid-tool-call")
    echo(
        f"The child runs session {session_id}; it is armed with JOURNAL_CRASH_AT={CRASH_AT}:",
        "it dies by SIGKILL right after delete_file's side effect, before its result is written.",
    )
    done = _child(db, session_id, ledger_path, CRASH_AT)
    if done.returncode != -signal.SIGKILL:
        _child_failed(done)
    echo("child killed by SIGKILL (no cleanup, no flush, like kill -9 or a crash).")

    with journal.open(db) as j:
        _heading("2. Restart scan (read-only; its cost grows with the unfinished work, not the file)")
        echo(*render.scan_report(j.scan()))

        _heading("3. Recovery plan (what recovery will append; nothing is deleted)")
        echo(*render.plan(session_id, j.plan(session_id)))

        _heading("4. Recover")
        for result in j.recover(session_id):
            echo(f"appended {len(result.appended)} event(s) to {result.session_id}")
        echo("scan after recovery: " + "; ".join(render.scan_report(j.scan())))

        _heading("5. What really happened (the ledger) vs what the journal says")
        for entry in _entries(ledger_path, session_id):
            echo(f"side effect: {entry['tool']} [{entry['call']}] {entry['arguments']}")
        echo(
            "delete_file [t1-rm] really ran; its result was lost in the crash, so the journal says it",
            "MAY have run (verify before retrying). append_note [t1-log] was never dispatched: the",
            "journal says it did not run, and the ledger agrees. Nothing is re-run automatically.",
        )

        _heading("6. The session's log after recovery")
        echo(*render.transcript(j.events(session_id)))

    _heading("7. The agent carries on (a fresh process continues with the next turns)")
    again = _child(db, session_id, ledger_path, None)
    if again.returncode != 0:
        _child_failed(again)
    with journal.open(db) as j:
        events = j.events(session_id)
        turns = [e for e in events if e.type == "turn_end"]
        echo(
            f"{len(events)} events, {len(turns)} turns: "
            + ", ".join(f"turn {e.data.get('turn')} {e.data['reason']}" for e in turns)
        )
        problems = j.check(session_id)
        integrity = j.integrity_check()
        echo(f"journal check: integrity {integrity[0]}, derived state {'agrees' if not problems else problems}")
        entries = _entries(ledger_path, session_id)
        repeated = len(entries) - len({e.get("call") for e in entries})
        echo(f"side effects: {len(entries)}, repeated: {repeated}")
    echo("", f"Look around: journal show {session_id} --db {redact(db)}")


def _entries(ledger_path: str, session_id: str) -> list[dict[str, object]]:
    """This run's side effects (a ledger beside a reused --db also holds earlier runs')."""
    from journal.testing.ledger import Ledger  # here: journal.testing is not worth loading for every command

    return [e for e in Ledger(ledger_path).entries() if e.get("session") == session_id]


def _child_failed(done: subprocess.CompletedProcess[str]) -> None:
    """Stop the demo: the child's stderr, each line escaped, then one ``journal:`` line."""
    echo(*done.stderr.splitlines(), err=True)
    raise click.ClickException(f"demo: the agent's child process exited with status {done.returncode}")
