"""A crash campaign whose verdict should be a table of zeros (DESIGN §9); ``journal torture`` runs it.

Every trial runs the campaign's agent (``agent_workload``: the scripted session of
``journal.testing.workload``, then a fork that redoes a turn differently, then a batch append),
stops it by one fault, restarts as an agent would (open, scan, recover, recover again, resume to
completion) and judges the file against the commit witness and the side-effect ledger
(``journal.testing.harness.judge``). The fault kinds:

- ``kill_at_point``: SIGKILL at a crash point, cycling through every (point, occurrence) that a
  clean run reaches (each point at least once before any repeats);
- ``kill_at_random``: SIGKILL after a random delay within the run;
- ``kill_in_recovery``: a kill that leaves a turn open, then the recovery itself killed at
  ``recover.before_commit`` or ``recover.after_commit``;
- ``power_loss`` / ``torn_power_loss``: the fault VFS cuts the power at a random write or sync
  index (torn: a random subset of the unsynced sectors reaches the disk);
- ``io_error``: a transient or persistent I/O error at a random write or sync index, then the
  process closes, crashes, or heals and carries on with the same handle;
- ``disk_full``: the disk fills after a random number of bytes.

Kill trials run the agent in a child process (about 0.2 s each); storage-fault trials run it in
the worker process through the fault VFS. Trials run on ``--jobs`` worker processes, started
with ``spawn``: a script that calls ``campaign()`` must do so under ``if __name__ ==
"__main__":``.

On PostgreSQL (DESIGN §16; ``campaign(database=...)``, ``journal torture --db postgresql://...``)
the client-kill kinds run against that database, a schema per trial, and with a server of the
campaign's own (``journal torture --postgres``) the kind ``server_crash`` crashes the server while
the agent runs: ``journal.testing.pgtorture`` says how, and why those trials run last, alone.

This module runs the campaign (``campaign``; the trials on a pool of worker processes). The agent,
its profile and the plan are ``journal.testing.torture_plan``'s, one trial is
``journal.testing.torture_trial``'s and the report ``journal.testing.torture_report``'s; their
public names are importable from here too.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from journal.testing.pgtorture import Postgres
from journal.testing.torture_plan import (
    AGENT_WORKLOAD,
    ALL_KINDS,
    CHECKPOINT_CHOICES,
    FORK_SUFFIX,
    FORK_TURN,
    KILL_KINDS,
    KINDS,
    PG_SERVER_WEIGHTS,
    PG_WEIGHTS,
    POWER_KINDS,
    RECOVERY_POINTS,
    SERVER_CRASH,
    SESSION,
    WEIGHTS,
    Profile,
    Trial,
    agent_workload,
    allocate,
    plan,
    profile,
)
from journal.testing.torture_report import FAILURES, _postgres_fields, render, report_lines, summarize
from journal.testing.torture_trial import run_trial

if TYPE_CHECKING:
    from journal.testing.pgserver import PgServer

__all__ = [
    "AGENT_WORKLOAD",
    "ALL_KINDS",
    "CHECKPOINT_CHOICES",
    "FAILURES",
    "FORK_SUFFIX",
    "FORK_TURN",
    "KILL_KINDS",
    "KINDS",
    "PG_SERVER_WEIGHTS",
    "PG_WEIGHTS",
    "POWER_KINDS",
    "RECOVERY_POINTS",
    "SERVER_CRASH",
    "SESSION",
    "WEIGHTS",
    "Profile",
    "Trial",
    "agent_workload",
    "allocate",
    "campaign",
    "plan",
    "postgres_campaign",
    "profile",
    "render",
    "report_lines",
    "run_trial",
    "summarize",
]

# -- the campaign ---------------------------------------------------------------------------------


def campaign(
    trials: int,
    *,
    seed: int = 1,
    durability: str = "full",
    jobs: int = 2,
    workdir: str | os.PathLike[str] | None = None,
    progress: Callable[[int], None] | None = None,
    database: str | None = None,
    server: PgServer | None = None,
) -> dict[str, Any]:
    """Run a campaign and return its report (the ``--json`` document).

    With ``database`` (a ``postgresql://`` DSN) it runs on that PostgreSQL database, the
    client-kill kinds only; with ``server`` (a ``PgServer`` this campaign may crash; by default
    on a new database of it) the ``server_crash`` kind too. The server is left running."""
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="journal-torture-", dir=workdir))
    pg = None
    weights: Mapping[str, float] = WEIGHTS
    try:
        if server is not None and database is None:
            database = server.create_database()
        if database is not None:
            pg = Postgres(database)
            weights = PG_SERVER_WEIGHTS if server is not None else PG_WEIGHTS
        prof = profile(durability, Path(tempfile.mkdtemp(dir=root)), pg=pg)
        planned = plan(trials, seed, prof, weights=weights)
        outcomes = list(_execute(planned, prof, root, jobs, progress, pg, server))
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    report = summarize(outcomes, prof, seed=seed)
    if pg is not None:
        report.update(_postgres_fields(outcomes, pg, weights))
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["jobs"] = jobs
    if report["failed_trials"]:
        report["workdir"] = str(root)  # the failing trials' files are kept for inspection
    else:
        shutil.rmtree(root, ignore_errors=True)
    return report


def postgres_campaign(trials: int, **options: Any) -> dict[str, Any]:
    """``campaign`` on a throwaway PostgreSQL server of its own (``PgServer``, fsync on), the
    ``server_crash`` kind included (``journal torture --postgres``).

    The server is removed afterwards, unless a trial failed: then it is stopped and kept, with
    the failing trials' schemas, and the report names its directory (``server_dir``; start it
    with ``pg_ctl -D <server_dir> start``)."""
    from journal.testing.pgserver import PgServer

    server = PgServer(fsync=True)
    report = None
    try:
        report = campaign(trials, server=server, **options)
    finally:
        if report is not None and report["failed_trials"]:
            server.stop()
            report["server_dir"] = str(server.data)
        else:
            server.close()
    return report


def _execute(
    planned: list[Trial],
    prof: Profile,
    root: Path,
    jobs: int,
    progress: Callable[[int], None] | None,
    pg: Postgres | None = None,
    server: PgServer | None = None,
) -> Iterable[dict[str, Any]]:
    """Run the trials; ``server_crash`` trials last, one at a time, in this process (see
    ``journal.testing.pgtorture``: nothing else may run while the server is down)."""
    pooled = [trial for trial in planned if trial.kind != SERVER_CRASH]
    if jobs <= 1:
        for trial in pooled:
            yield run_trial(trial, prof, str(root), pg)
            if progress:
                progress(1)
    else:
        context = multiprocessing.get_context("spawn")  # no inherited SQLite state in the workers
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = [pool.submit(run_trial, trial, prof, str(root), pg) for trial in pooled]
            for future in concurrent.futures.as_completed(futures):
                yield future.result()
                if progress:
                    progress(1)
    for trial in planned:
        if trial.kind == SERVER_CRASH:
            yield run_trial(trial, prof, str(root), pg, server)
            if progress:
                progress(1)
