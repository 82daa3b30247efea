"""One trial of the crash campaign: stop the agent by the trial's fault, restart, and judge the file.

``run_trial`` never raises: what went wrong is in the outcome it returns (the verdict's document,
the crash points covered, the typed and untyped errors the library raised). Kill trials run the
agent in a child process (``Harness``, or ``_ServerHarness`` on PostgreSQL); storage-fault
trials run it in this process through the fault VFS.
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from journal import CorruptJournal, DiskFull, Journal, JournalError, JournalIOError, SessionNotFound
from journal import open as open_journal
from journal.store.target import redact, secrets
from journal.testing.faultvfs import FaultVFS
from journal.testing.harness import Harness
from journal.testing.ledger import Ledger
from journal.testing.pgtorture import Postgres, _ServerHarness
from journal.testing.torture_plan import (
    AGENT_WORKLOAD,
    KILL_KINDS,
    POWER_KINDS,
    SERVER_CRASH,
    SESSION,
    Profile,
    Trial,
    agent_workload,
)
from journal.testing.verdict import Verdict, judge
from journal.testing.witness import CommitWitness

if TYPE_CHECKING:
    from journal.testing.pgserver import PgServer

# Operations whose commit appends at least one event: a wrong outcome shows in the event count.
_EVENT_WRITERS = frozenset(
    (
        "append",
        "append_many",
        "fork",
        "turn_start",
        "step_start",
        "assistant",
        "dispatch",
        "put_result",
        "step_end",
        "turn_end",
        "recover",
    )
)


def run_trial(
    trial: Trial, prof: Profile, root: str, pg: Postgres | None = None, server: PgServer | None = None
) -> dict[str, Any]:
    """Run one trial in this process (kill trials start a child); never raises.

    With ``pg`` the trial's journal is a new schema of that database (dropped if the trial
    passes); a ``server_crash`` trial also needs the ``server`` it stops and starts."""
    directory = Path(root) / f"trial-{trial.index:05d}"
    started = time.perf_counter()
    extra: dict[str, Any] = {"covered": [], "wrong_outcomes": [], "untyped_errors": [], "library_errors": {}}
    schema = dsn = None
    try:
        if pg is not None:
            name = pg.schema(f"{trial.index:05d}")
            dsn, schema = pg.create(name), name
        if trial.kind == SERVER_CRASH:
            if server is None or dsn is None:
                raise ValueError("a server_crash trial needs a PostgreSQL server of the campaign's own")
            verdict = _server_crash_trial(trial, directory, dsn, server, extra)
        elif trial.kind in KILL_KINDS:
            verdict = _kill_trial(trial, prof, directory, extra, dsn=dsn)
        else:
            verdict = _storage_trial(trial, prof, directory, extra)
        document = verdict.to_dict()
    except Exception:
        document = _harness_error(traceback.format_exc(limit=4))
    failed = bool(not document["ok"] or extra["wrong_outcomes"] or extra["untyped_errors"])
    if not failed:
        shutil.rmtree(directory, ignore_errors=True)
        if pg is not None and schema is not None and dsn is not None:
            try:
                pg.drop(schema)
            except Exception:
                document, failed = _harness_error(traceback.format_exc(limit=2)), True
    outcome = {
        "trial": attrs.asdict(trial),
        "describe": trial.describe(),
        "verdict": document,
        "failed": failed,
        "path": str(directory),
        "elapsed_s": time.perf_counter() - started,
        **extra,
    }
    if pg is not None and schema is not None:
        outcome["path"], outcome["schema"] = pg.redacted(dsn or pg.database), schema
    if pg is not None:  # verdicts and tracebacks quote the trial's DSN: the report never shows its password
        outcome = _redacted(outcome, secrets(pg.database))
    return outcome


def _redacted(value: Any, secret_values: tuple[str, ...]) -> Any:
    """``value`` (a trial's outcome) with every DSN password in its texts masked."""
    if isinstance(value, str):
        return redact(value, secret_values)
    if isinstance(value, dict):
        return {key: _redacted(item, secret_values) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_redacted(item, secret_values) for item in value)
    return value


def _harness_error(text: str) -> dict[str, Any]:
    return {"ok": False, "problems": ["harness error: " + text], "harness_error": True}


def _kill_trial(
    trial: Trial, prof: Profile, directory: Path, extra: dict[str, Any], *, dsn: str | None = None
) -> Verdict:
    harness: Harness | _ServerHarness
    if dsn is None:
        harness = Harness(directory, workload=AGENT_WORKLOAD, session_id=SESSION, durability=trial.durability)
    else:
        harness = _ServerHarness(
            directory, dsn, workload=AGENT_WORKLOAD, session_id=SESSION, durability=trial.durability
        )
    if trial.kind == "kill_at_random":
        assert trial.delay_s is not None
        return harness.kill_after(trial.delay_s, expected=prof.expected)
    assert trial.point is not None
    name, _, n = trial.point.rpartition(":")
    if trial.kind == "kill_at_point":
        verdict = harness.kill_at(name, int(n), expected=prof.expected)
    else:
        verdict = harness.kill_at(name, int(n), recovery_kill_at=trial.recovery_point)
    if verdict.killed:
        extra["covered"].append(name)
    if verdict.recovery_killed:
        extra["covered"].append(trial.recovery_point)
    return verdict


def _server_crash_trial(trial: Trial, directory: Path, dsn: str, server: PgServer, extra: dict[str, Any]) -> Verdict:
    """Crash the server while the agent runs, then judge the restart (``_ServerHarness.crash_server``)."""
    assert trial.delay_s is not None
    harness = _ServerHarness(directory, dsn, workload=AGENT_WORKLOAD, session_id=SESSION, durability=trial.durability)
    return harness.crash_server(server, delay_s=trial.delay_s, how=trial.describe(), extra=extra)


def _storage_trial(trial: Trial, prof: Profile, directory: Path, extra: dict[str, Any]) -> Verdict:
    directory.mkdir(parents=True)
    path, ledger = directory / "journal.db", Ledger(directory / "ledger")
    errors: list[str] = []
    failure: JournalError | None = None
    j: Journal | None = None
    witness: CommitWitness | None = None

    def attempt(body: Callable[[], None]) -> JournalError | None:
        try:
            body()
        except JournalError as exc:
            extra["library_errors"][type(exc).__name__] = extra["library_errors"].get(type(exc).__name__, 0) + 1
            if isinstance(exc, CorruptJournal):
                errors.append(f"the engine reported a corrupt file: {exc}")
            return exc
        except Exception as exc:
            extra["untyped_errors"].append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
        return None

    with FaultVFS(f"torture-{os.getpid()}-{trial.index}-{time.monotonic_ns()}") as fvs:
        _arm(fvs, trial)

        def run() -> None:
            nonlocal j, witness
            j = open_journal(path, durability=trial.durability, vfs=fvs.name, checkpoint_pages=trial.checkpoint_pages)
            witness = CommitWitness(j)
            with witness.install():
                _ensure_session(j)
                agent_workload(j, SESSION, ledger)

        failure = attempt(run)
        if trial.kind in POWER_KINDS and fvs.running:
            fvs.power_loss(torn=trial.kind == "torn_power_loss", seed=trial.seed)  # the run ended first
        fvs.heal()
        if trial.then == "continue" and j is not None and witness is not None:

            def carry_on() -> None:
                assert j is not None and witness is not None
                with witness.install():
                    j.recover()
                    _ensure_session(j)
                    agent_workload(j, SESSION, ledger)

            if attempt(carry_on) is not None:
                extra["library_errors"]["needed_reopen"] = 1
        if trial.then == "crash":
            fvs.crash()
        if j is not None:
            attempt(j.close)
    snapshots = witness.snapshots if witness is not None else []
    verdict = judge(
        path,
        ledger=ledger,
        snapshots=snapshots,
        workload=AGENT_WORKLOAD,
        session_id=SESSION,
        durability=trial.durability,
        how=trial.describe(),
        killed=failure is not None or trial.kind in POWER_KINDS,
        power_lost=trial.kind in POWER_KINDS,
        # After an I/O error the agent's own error handling writes on (a step closed with
        # outcome "error"), so only a power cut leaves a prefix of the clean log to compare.
        expected=prof.expected if trial.kind in POWER_KINDS else None,
        errors=errors,
    )
    if isinstance(failure, JournalIOError) and trial.kind not in POWER_KINDS and trial.then != "continue":
        extra["wrong_outcomes"] += _contradictions(failure, verdict)
    if trial.kind == "disk_full" and isinstance(failure, JournalIOError) and not isinstance(failure, DiskFull):
        extra["wrong_outcomes"].append(f"a full disk raised {type(failure).__name__}, not DiskFull: {failure}")
    return verdict


def _contradictions(failure: JournalIOError, verdict: Verdict) -> list[str]:
    """The failed write's ``outcome`` against what the reopened file holds beyond the witness."""
    wrote = verdict.found > verdict.committed
    if failure.outcome == "absent" and wrote:
        return [f"{failure.operation} raised outcome absent, but its write is in the file"]
    if failure.outcome == "present" and not wrote and failure.operation in _EVENT_WRITERS:
        return [f"{failure.operation} raised outcome present, but its write is not in the file"]
    return []


def _arm(fvs: FaultVFS, trial: Trial) -> None:
    if trial.kind in POWER_KINDS:
        torn = trial.kind == "torn_power_loss"
        assert trial.at is not None
        if trial.op == "write":
            fvs.power_loss_at_write(trial.at, torn=torn, seed=trial.seed)
        else:
            fvs.power_loss_at_sync(trial.at, torn=torn, seed=trial.seed)
    elif trial.kind == "io_error":
        assert trial.at is not None
        if trial.op == "write":
            fvs.fail_write(trial.at, persistent=trial.persistent)
        else:
            fvs.fail_sync(trial.at, persistent=trial.persistent)
    elif trial.kind == "disk_full":
        assert trial.after_bytes is not None
        fvs.disk_full(after_bytes=trial.after_bytes)


def _ensure_session(j: Journal) -> None:
    try:
        j.session(SESSION)
    except SessionNotFound:
        j.create_session(SESSION)
