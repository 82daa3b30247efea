"""The crash campaign on PostgreSQL (``journal.testing.torture``): a schema per trial, server crashes.

On PostgreSQL (DESIGN §16; ``campaign(database=...)``, ``journal torture --db postgresql://...``)
the client-kill kinds run against that database, each trial in a schema of its own (so trials
never share a journal): the schema is dropped when the trial passes and kept, and named in the
report, when it fails. The profile of a clean run is measured there too. The storage-fault kinds
are not run: they need SQLite's fault VFS (the report lists the kinds that ran). With a server of
its own (``campaign(server=PgServer(...))``, ``journal torture --postgres``) the campaign adds
the kind ``server_crash``: while the agent runs in its child process, the server is stopped with
``pg_ctl stop -m immediate`` after a random delay and started again at once. The agent may
carry on over a new connection, or die of the typed error its lost connection raised
(``JournalIOError``; a commit in flight has outcome ``unknown``): that is the agent's crash, and
the restart is judged like any other trial's. The witness rules are ``judge``'s: only a commit
that returned counts as committed, so a commit whose outcome was unknown may or may not be
there. An error that escapes the agent untranslated (not a ``JournalError``, nor the driver error
one was raised from) is counted in ``untyped_errors``.

A server crash breaks every connection to the server, so no other trial may run while it is
down. The rule is the simplest that is correct: the client-kill trials run first, on the worker
processes, and the ``server_crash`` trials run after the pool has finished, one at a time, in the
campaign's own process (which owns the server).

The campaign (planning, running, the report) is ``journal.testing.torture``'s; this module is
what differs on a server: ``Postgres`` (the database and its schemas), ``_ServerHarness`` (the
kill harness for a journal named by a DSN, and the server crash) and what an agent died of. It
does not import the campaign, which passes it the workload to run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import traceback
import urllib.parse
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from journal import JournalError, JournalIOError
from journal.store.target import is_url_dsn, redact, secrets, split_password
from journal.testing.harness import _READY, CHILD_SPEC, DEFAULT_TIMEOUT_S, _child_main, run_child
from journal.testing.ledger import Ledger
from journal.testing.verdict import Verdict, judge
from journal.testing.witness import read_witness

if TYPE_CHECKING:
    from journal.testing.pgserver import PgServer


def _shown(dsn: str) -> str:
    """A DSN as ``repr()`` shows it: quoted, without its password."""
    return repr(redact(dsn))


@attrs.frozen
class Postgres:
    """Where a PostgreSQL campaign's journals go: a database, one schema per trial.

    ``prefix`` is drawn per campaign, so two campaigns on one database never meet."""

    database: str = attrs.field(repr=_shown)
    """The database's DSN (a ``postgresql://`` URL or libpq's keyword form), as given."""
    prefix: str = attrs.field(factory=lambda: f"torture_{uuid.uuid4().hex[:10]}_")

    def schema(self, name: str) -> str:
        return self.prefix + name

    def dsn(self, schema: str) -> str:
        """The database's DSN with ``schema`` first on the search path: the journal is there."""
        if not is_url_dsn(self.database):  # libpq's keyword form: a later keyword wins
            return f"{self.database} options='-csearch_path={schema}'"
        parts = urllib.parse.urlsplit(self.database)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        options = " ".join([value for key, value in query if key == "options"] + [f"-csearch_path={schema}"])
        query = [(key, value) for key, value in query if key != "options"] + [("options", options)]
        text = urllib.parse.urlencode(query, safe="/", quote_via=urllib.parse.quote)
        return urllib.parse.urlunsplit(parts._replace(query=text))

    def create(self, schema: str) -> str:
        """Create the empty schema; the DSN of the journal it will hold."""
        self._admin(f'CREATE SCHEMA "{schema}"', "schema creation")
        return self.dsn(schema)

    def drop(self, schema: str) -> None:
        self._admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', "schema removal")

    def redacted(self, dsn: str) -> str:
        """``dsn`` without its password, as reports show it."""
        return redact(dsn)

    def _admin(self, sql: str, what: str) -> None:
        """Run ``sql`` on the database with ``psql``: only the store talks to the driver."""
        env = dict(os.environ)  # libpq's PG* variables apply to psql as to the store
        target, password = split_password(self.database)
        if password is not None:  # through the environment, not the process list
            env["PGPASSWORD"] = password
        command = [_psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", target, "-c", sql]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            detail = done.stderr.strip() or f"psql exited with status {done.returncode}"
            raise JournalIOError(what, "unknown", f"{redact(self.database)}: {redact(detail, secrets(self.database))}")


def _psql() -> str:
    """The PostgreSQL client: on the PATH, or beside the server's binaries."""
    found = shutil.which("psql")
    if found is not None:
        return found
    from journal.testing.pgserver import PgUnavailable, bindir

    try:
        return str(bindir() / "psql")
    except PgUnavailable as exc:
        raise JournalIOError("schema creation", "absent", "a PostgreSQL campaign needs psql (the client)") from exc


@attrs.frozen
class _ServerHarness:
    """``Harness.kill_at`` and ``kill_after`` for a journal on a PostgreSQL database: the same
    child (``run_child``), witness and ``judge``; the journal is named by a DSN instead of a file
    of the trial's directory, which keeps the ledger and the witness. ``crash_server`` is the
    ``server_crash`` trial."""

    directory: Path
    dsn: str = attrs.field(repr=_shown)
    workload: str
    session_id: str
    durability: str

    def _judge(self, **verdict: Any) -> Verdict:
        """``judge`` of this trial's journal, with its ledger and witness."""
        return judge(
            self.dsn,
            ledger=Ledger(self.directory / "ledger"),
            snapshots=read_witness(self.directory / "witness")[1],
            workload=self.workload,
            session_id=self.session_id,
            durability=self.durability,
            **verdict,
        )

    def kill_at(
        self, point: str, n: int, *, expected: dict[str, list[Any]] | None = None, recovery_kill_at: str | None = None
    ) -> Verdict:
        return self._trial(f"{point}:{n}", None, recovery_kill_at, expected)

    def kill_after(self, seconds: float, *, expected: dict[str, list[Any]] | None = None) -> Verdict:
        return self._trial(None, seconds, None, expected)

    def _trial(
        self, crash_at: str | None, kill_after_s: float | None, recovery_kill_at: str | None, expected: Any
    ) -> Verdict:
        self.directory.mkdir(parents=True)
        spec = self._child_spec()
        errors: list[str] = []
        code, _, err = run_child(spec, crash_at=crash_at, kill_after_s=kill_after_s)
        if code not in (0, -signal.SIGKILL):
            errors.append(f"the workload's process exited with status {code}: {_last_line(err)}")
        recovery_killed = None
        if recovery_kill_at is not None:
            rcode, _, rerr = run_child({**spec, "mode": "recover"}, crash_at=recovery_kill_at)
            recovery_killed = rcode == -signal.SIGKILL
            if rcode not in (0, -signal.SIGKILL):
                errors.append(f"the recovery process exited with status {rcode}: {_last_line(rerr)}")
        how = f"crash point {crash_at}" if crash_at is not None else f"SIGKILL after {kill_after_s:.4f} s"
        verdict = self._judge(
            how=how if recovery_kill_at is None else f"{how}, then recovery killed at {recovery_kill_at}",
            killed=code == -signal.SIGKILL,
            expected=expected,
            errors=errors,
        )
        return attrs.evolve(verdict, recovery_killed=recovery_killed)

    def crash_server(self, server: PgServer, *, delay_s: float, how: str, extra: dict[str, Any]) -> Verdict:
        """Run the agent in a child; ``delay_s`` after its journal is open, crash the server
        (``pg_ctl stop -m immediate``) and start it again; then judge the restart (``how`` names
        the trial in the verdict; ``extra`` is the trial's outcome, which gains the server crash
        and what the agent died of).

        The agent may carry on over a new connection, finish before the crash, or die of the error
        its lost connection raised. Under ``normal`` (``synchronous_commit = off``) a server crash
        may drop the last commits, as a power cut may under SQLite: ``judge`` allows a lost tail.
        The agent's own error handling may write on after the failed write (a step closed with
        outcome ``error``), so the log is not compared with the clean run's, and the failed write's
        ``outcome`` is not checked against event counts (as after a storage trial's I/O error)."""
        self.directory.mkdir(parents=True)
        spec = self._child_spec()
        # The child's environment as ``run_child`` makes it: no crash point armed, this sys.path.
        env = {k: v for k, v in os.environ.items() if k != "JOURNAL_CRASH_AT"}
        paths = [os.path.abspath(p or os.curdir) for p in sys.path if os.path.isdir(p or os.curdir)]
        paths += filter(None, env.get("PYTHONPATH", "").split(os.pathsep))
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        # The spec (it holds the DSN) in the environment, never in a command line `ps` shows.
        env[CHILD_SPEC] = json.dumps(spec)
        code = (
            "import os, sys; from journal.testing.pgtorture import _agent_child; "
            "sys.exit(_agent_child(os.environ['JOURNAL_CHILD_SPEC']))"
        )
        errors: list[str] = []
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            if child.stdout.readline().strip() == _READY:  # EOF (a child that failed early) ends the wait too
                try:
                    child.wait(timeout=delay_s)  # a child that finishes first sees the crash after
                except subprocess.TimeoutExpired:
                    extra["server_crashed_mid_run"] = True
            try:
                server.stop("immediate")
            finally:
                server.start()  # whatever the stop did, the next trial needs the server up
            extra["server_crashes"] = 1
            out, err = child.communicate(timeout=DEFAULT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            errors.append(f"the workload's process hung for {DEFAULT_TIMEOUT_S} s after the server restarted")
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        if child.returncode == _DIED_OF_AN_ERROR:
            died_of = json.loads(out.strip().splitlines()[-1])
            if died_of["typed"]:
                extra["library_errors"][died_of["error"]] = extra["library_errors"].get(died_of["error"], 0) + 1
            outcome = f" ({died_of['outcome']})" if died_of["outcome"] is not None else ""
            extra["agent_error"] = died_of["error"] + outcome
            extra["untyped_errors"] += died_of["untyped"]
        elif child.returncode != 0 and not errors:
            errors.append(f"the workload's process exited with status {child.returncode}: {_last_line(err)}")
        return self._judge(
            how=how,
            killed=child.returncode != 0,
            power_lost=self.durability == "normal",
            errors=errors,
        )

    def _child_spec(self) -> dict[str, Any]:
        """What ``journal.testing.harness``'s child needs: the journal (here a DSN), the ledger and
        the witness (files in the trial's directory)."""
        return {
            "mode": "run",
            "path": self.dsn,
            "ledger": str(self.directory / "ledger"),
            "witness": str(self.directory / "witness"),
            "workload": self.workload,
            "session_id": self.session_id,
            "durability": self.durability,
            "checkpoint_pages": None,
        }


_DIED_OF_AN_ERROR = 3
"""The exit status of a ``server_crash`` trial's child that died of an exception (it says which on stdout)."""


def _agent_child(argument: str) -> int:
    """A ``server_crash`` trial's child: the harness's child (open, witness, agent) that, when
    the agent dies of an exception, prints what it died of as one JSON line (``_died_of``) and
    exits with status 3."""
    try:
        return _child_main(argument)
    except Exception as exc:
        print(json.dumps(_died_of(exc)), flush=True)
        return _DIED_OF_AN_ERROR


def _died_of(exc: BaseException) -> dict[str, Any]:
    """The error an agent died of (class name; whether it is a ``JournalError``) and every error
    in its chain that escaped the library untranslated: not a ``JournalError``, nor the driver
    error a ``JournalError`` was raised from (an error handler may have raised over one)."""
    untyped: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if not isinstance(current, JournalError):
            untyped.append(f"{type(current).__module__}.{type(current).__name__}: {current} ({_where(current)})")
            current = current.__context__
        elif current.__cause__ is not None and not isinstance(current.__cause__, JournalError):
            seen.add(id(current.__cause__))  # the translated driver error, then what it interrupted
            current = current.__cause__.__context__
            while current is not None and not isinstance(current, JournalError) and _in_driver(current):
                # The driver's own: an error psycopg raised and handled inside itself before it
                # raised the one the library translated (its pipeline, at a server crash). It
                # never reached the library's code, so it escaped nothing.
                seen.add(id(current))
                current = current.__context__
        elif current.__cause__ is not None:
            current = current.__cause__
        else:
            current = current.__context__
    return {
        "error": type(exc).__name__,
        "typed": isinstance(exc, JournalError),
        "operation": getattr(exc, "operation", None),
        "outcome": None if getattr(exc, "outcome", None) is None else str(exc.outcome),  # type: ignore[attr-defined]
        "untyped": untyped,
    }


def _in_driver(exc: BaseException) -> bool:
    """Whether ``exc`` was raised and caught inside psycopg alone (every frame it passed is the
    driver's own)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and all("psycopg" in f.filename for f in frames)


def _where(exc: BaseException) -> str:
    """The library's last frames an error passed through, innermost last: where to look."""
    every = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in every if f"{os.sep}journal{os.sep}" in f.filename]
    shown = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-4:]]
    if shown:
        return "raised at " + " > ".join(shown)
    # An error the driver raised and handled itself (the context of the one it raised): where.
    elsewhere = [f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno} {f.name}" for f in every[-3:]]
    return "raised outside the library" + (", at " + " > ".join(elsewhere) if elsewhere else "")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
