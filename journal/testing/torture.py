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
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import random
import shutil
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from journal import CorruptJournal, DiskFull, Journal, JournalError, JournalIOError, SessionNotFound, crash
from journal import open as open_journal
from journal.escape import escape
from journal.store.target import redact, secrets
from journal.testing import workload as _scripted
from journal.testing.faultvfs import FaultVFS
from journal.testing.harness import CommitWitness, Harness, Verdict, judge
from journal.testing.ledger import Ledger
from journal.testing.pgtorture import Postgres, _ServerHarness

if TYPE_CHECKING:
    from journal.testing.pgserver import PgServer

SESSION = "agent"
AGENT_WORKLOAD = "journal.testing.torture:agent_workload"
FORK_SUFFIX = ".retry"
FORK_TURN: dict[str, Any] = {
    "user": "Actually, do not delete anything: email me the list instead.",
    "steps": [
        [{"id": "f1-mail", "name": "send_email", "arguments": {"to": "me@example.com", "subject": "files"}}],
        "Sent you the list.",
    ],
}
KINDS = (
    "kill_at_point",
    "kill_at_random",
    "kill_in_recovery",
    "power_loss",
    "torn_power_loss",
    "io_error",
    "disk_full",
)
KILL_KINDS = frozenset(KINDS[:3])
POWER_KINDS = frozenset(("power_loss", "torn_power_loss"))
WEIGHTS = {
    "kill_at_point": 0.42,
    "kill_at_random": 0.18,
    "kill_in_recovery": 0.10,
    "power_loss": 0.10,
    "torn_power_loss": 0.10,
    "io_error": 0.07,
    "disk_full": 0.03,
}
SERVER_CRASH = "server_crash"
# On PostgreSQL: the client-kill kinds (``--db``), and with a server of the campaign's own
# (``--postgres``) the server crash too. Crash points get most trials: each must be visited.
PG_WEIGHTS = {"kill_at_point": 0.60, "kill_at_random": 0.25, "kill_in_recovery": 0.15}
PG_SERVER_WEIGHTS = {"kill_at_point": 0.55, "kill_at_random": 0.20, "kill_in_recovery": 0.10, SERVER_CRASH: 0.15}
ALL_KINDS = (*KINDS, SERVER_CRASH)
RECOVERY_POINTS = ("recover.before_commit", "recover.after_commit")
CHECKPOINT_CHOICES = (None, 8, 64)
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
# The counters that must be zero; their order is the table's.
FAILURES = (
    ("committed_events_lost", "committed events lost"),
    ("integrity_failures", "integrity failures"),
    ("check_disagreements", "derived-state disagreements (check)"),
    ("non_idempotent_recoveries", "non-idempotent recoveries"),
    ("tool_calls_answered_twice", "tool calls answered twice"),
    ("side_effects_repeated", "side effects repeated"),
    ("side_effects_without_dispatch", "side effects without a durable dispatch"),
    ("side_effects_denied", "side effects recovery said did not run"),
    ("left_unfinished", "work left unfinished after recovery"),
    ("reopen_failures", "files that could not be reopened"),
    ("resume_failures", "resumed runs that failed"),
    ("untyped_errors", "untyped errors (not JournalError)"),
    ("wrong_outcomes", "JournalIOError outcomes contradicted"),
    ("harness_errors", "harness errors"),
)


def agent_workload(journal: Journal, session_id: str, ledger: Ledger) -> None:
    """The campaign's agent: the scripted session, a fork that redoes turn 1's request another
    way (a desktop's "edit and regenerate"), and a summary written as one batch. Resumable:
    every part is skipped when the log shows it was done."""
    _scripted.run(journal, session_id, ledger)
    fork_id = session_id + FORK_SUFFIX
    try:
        journal.session(fork_id)
    except SessionNotFound:
        first_end = next(e.seq for e in journal.events(session_id) if e.type == "turn_end")
        journal.fork(session_id, first_end, id=fork_id)
    _scripted.run(journal, fork_id, ledger, script=[_scripted.SCRIPT[0], FORK_TURN])
    if not any(e.type == "x.archived" for e in journal.events(session_id)):
        journal.append_many(
            session_id,
            [("x.summary", {"turns": len(_scripted.SCRIPT), "fork": fork_id}), ("x.archived", {"by": "agent"})],
        )


# -- the profile of a clean run -------------------------------------------------------------------


@attrs.frozen
class Profile:
    """What a clean run of the agent looks like, measured once per campaign."""

    durability: str
    trace: tuple[tuple[str, int], ...]
    """Every crash point reached, as (point, occurrence), in order."""
    open_turn: tuple[tuple[str, int], ...]
    """The (point, occurrence) pairs where a kill leaves a turn open."""
    expected: dict[str, list[Any]]
    """Per session, the clean log as [type, data] pairs."""
    duration_s: float
    io: dict[str, dict[str, int]]
    """Per checkpoint setting (its str), the writes, syncs and bytes a run through the fault VFS makes."""

    @property
    def points(self) -> list[str]:
        return list(dict.fromkeys(p for p, _ in self.trace))


def profile(durability: str, directory: Path, *, pg: Postgres | None = None) -> Profile:
    """Run the agent once in this process, cleanly, and measure it (with ``pg``: on that
    PostgreSQL database, in a schema of its own, dropped afterwards; no storage-fault counts)."""
    if pg is None:
        return _profile(durability, directory, directory / "trace.db", io_counts=True)
    schema = pg.schema("profile")
    dsn = pg.create(schema)
    try:
        return _profile(durability, directory, dsn, io_counts=False)
    finally:
        pg.drop(schema)


def _profile(durability: str, directory: Path, path: str | Path, *, io_counts: bool) -> Profile:
    ledger = Ledger(directory / "trace.ledger")
    with open_journal(path, durability=durability) as j:
        witness = CommitWitness(j)
        started = time.perf_counter()
        with witness.install():
            j.create_session(SESSION)
            agent_workload(j, SESSION, ledger)
        duration = time.perf_counter() - started
        expected = {s.id: [[e.type, e.data] for e in j.events(s.id)] for s in j.sessions()}
    seen: Counter[str] = Counter()
    trace, open_turn, turn_open = [], [], False
    for name in witness.points:
        seen[name] += 1
        turn_open = {"turn_start.after_commit": True, "turn_end.after_commit": False}.get(name, turn_open)
        trace.append((name, seen[name]))
        if turn_open:
            open_turn.append((name, seen[name]))
    io = {}
    for pages in CHECKPOINT_CHOICES if io_counts else ():
        io[str(pages)] = _count_io(directory / f"io-{pages}", durability, pages)
    return Profile(durability, tuple(trace), tuple(open_turn), expected, duration, io)


def _count_io(directory: Path, durability: str, pages: int | None) -> dict[str, int]:
    directory.mkdir()
    path = directory / "journal.db"
    with FaultVFS(f"torture-count-{os.getpid()}-{pages}-{time.monotonic_ns()}") as fvs:
        j = open_journal(path, durability=durability, vfs=fvs.name, checkpoint_pages=pages)
        try:
            j.create_session(SESSION)
            agent_workload(j, SESSION, Ledger(directory / "ledger"))
            counts = {"writes": fvs.writes, "syncs": fvs.syncs}
            counts["bytes"] = sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())
        finally:
            j.close()
    return counts


# -- planning -------------------------------------------------------------------------------------


@attrs.frozen
class Trial:
    """One trial of the campaign: its kind and the parameters drawn for it."""

    index: int
    kind: str
    durability: str
    seed: int
    point: str | None = None
    delay_s: float | None = None
    recovery_point: str | None = None
    op: str | None = None
    at: int | None = None
    persistent: bool = False
    then: str | None = None
    after_bytes: int | None = None
    checkpoint_pages: int | None = None

    def describe(self) -> str:
        if self.kind == "kill_at_point":
            return f"kill at {self.point}"
        if self.kind == "kill_at_random":
            return f"kill after {self.delay_s:.4f} s"
        if self.kind == "kill_in_recovery":
            return f"kill at {self.point}, then recovery killed at {self.recovery_point}"
        if self.kind == SERVER_CRASH:
            return f"server stopped (immediate) {self.delay_s:.4f} s into the run, then started"
        pages = f", checkpoint_pages={self.checkpoint_pages}"
        if self.kind in POWER_KINDS:
            return f"{self.kind.replace('_', ' ')} at {self.op} {self.at} (seed {self.seed}{pages})"
        if self.kind == "io_error":
            how = "persistent" if self.persistent else "transient"
            return f"{how} I/O error at {self.op} {self.at}, then {self.then}{pages}"
        return f"disk full after {self.after_bytes} bytes, then {self.then}{pages}"


def allocate(trials: int, weights: Mapping[str, float] = WEIGHTS) -> dict[str, int]:
    """How many trials of each kind (``weights``, which sum to 1; largest remainder; every kind
    once if possible)."""
    kinds = tuple(weights)
    raw = {kind: weights[kind] * trials for kind in kinds}
    counts = {kind: int(value) for kind, value in raw.items()}
    for kind in sorted(kinds, key=lambda k: raw[k] - counts[k], reverse=True)[: trials - sum(counts.values())]:
        counts[kind] += 1
    if trials >= len(kinds):
        for kind in kinds:
            if counts[kind] == 0:
                donor = max(counts, key=counts.__getitem__)
                counts[donor] -= 1
                counts[kind] += 1
    return counts


def plan(trials: int, seed: int, prof: Profile, *, weights: Mapping[str, float] = WEIGHTS) -> list[Trial]:
    """The campaign's trials of the kinds ``weights`` names, drawn deterministically from ``seed``."""
    rng = random.Random(seed)
    counts = dict.fromkeys(ALL_KINDS, 0) | allocate(trials, weights)
    out: list[Trial] = []

    def add(kind: str, **fields: Any) -> None:
        out.append(Trial(len(out), kind, prof.durability, rng.randrange(2**31), **fields))

    for name, n in _point_cycle(prof, counts["kill_at_point"], rng):
        add("kill_at_point", point=f"{name}:{n}")
    for _ in range(counts["kill_at_random"]):
        add("kill_at_random", delay_s=round(rng.uniform(0, 1.25 * prof.duration_s), 5))
    for k in range(counts["kill_in_recovery"]):
        name, n = rng.choice(prof.open_turn)
        add("kill_in_recovery", point=f"{name}:{n}", recovery_point=RECOVERY_POINTS[k % 2])
    for kind in ("power_loss", "torn_power_loss", "io_error"):
        for _ in range(counts[kind]):
            pages = rng.choice(CHECKPOINT_CHOICES)
            io = prof.io[str(pages)]
            index = rng.randint(1, io["writes"] + io["syncs"])
            op, at = ("write", index) if index <= io["writes"] else ("sync", index - io["writes"])
            extra: dict[str, Any] = {}
            if kind == "io_error":
                extra = {"persistent": rng.random() < 0.5, "then": rng.choice(("close", "crash", "continue"))}
            add(kind, op=op, at=at, checkpoint_pages=pages, **extra)
    for _ in range(counts["disk_full"]):
        pages = rng.choice(CHECKPOINT_CHOICES)
        after = rng.randint(0, prof.io[str(pages)]["bytes"])
        add("disk_full", after_bytes=after, then=rng.choice(("close", "continue")), checkpoint_pages=pages)
    for _ in range(counts[SERVER_CRASH]):
        add(SERVER_CRASH, delay_s=round(rng.uniform(0, prof.duration_s), 5))
    return out


def _point_cycle(prof: Profile, count: int, rng: random.Random) -> Iterable[tuple[str, int]]:
    """Every point once (at a random occurrence), then every (point, occurrence) over and over."""
    by_point: dict[str, list[tuple[str, int]]] = {}
    for pair in prof.trace:
        by_point.setdefault(pair[0], []).append(pair)
    first = [rng.choice(pairs) for pairs in by_point.values()]
    rng.shuffle(first)
    chosen = first[:count]
    while len(chosen) < count:
        cycle = list(prof.trace)
        rng.shuffle(cycle)
        chosen += cycle[: count - len(chosen)]
    return chosen


# -- running one trial ----------------------------------------------------------------------------


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


def _postgres_fields(outcomes: list[dict[str, Any]], pg: Postgres, weights: Mapping[str, float]) -> dict[str, Any]:
    """What a PostgreSQL campaign's report adds: where it ran, which kinds ran, the server crashes."""
    return {
        "backend": "postgresql",
        "database": pg.redacted(pg.database),
        "kinds": list(weights),
        "kinds_not_run": [kind for kind in ALL_KINDS if kind not in weights],
        "server_crashes": sum(o.get("server_crashes", 0) for o in outcomes),
        "server_crashes_mid_run": sum(1 for o in outcomes if o.get("server_crashed_mid_run")),
        "agent_errors": dict(sorted(Counter(o["agent_error"] for o in outcomes if "agent_error" in o).items())),
        "schemas_kept": [o["schema"] for o in outcomes if o["failed"] and "schema" in o],
    }


def summarize(outcomes: list[dict[str, Any]], prof: Profile, *, seed: int) -> dict[str, Any]:
    """The report of a campaign from its trials' outcomes."""
    outcomes = sorted(outcomes, key=lambda o: o["trial"]["index"])
    verdicts = [o["verdict"] for o in outcomes]

    def total(field: str) -> int:
        return sum(v.get(field, 0) for v in verdicts)

    def trials_with(field: str) -> int:
        return sum(1 for v in verdicts if v.get(field))

    def items(field: str) -> int:
        return sum(len(v.get(field, ())) for v in verdicts)

    reachable = prof.points + list(RECOVERY_POINTS)
    covered = {p for o in outcomes for p in o["covered"]}
    named = list(crash.POINTS) + list(crash.TOOL_POINTS)
    counts = {
        "committed_events_lost": total("lost"),
        "integrity_failures": trials_with("integrity"),
        "check_disagreements": trials_with("disagreements"),
        "non_idempotent_recoveries": sum(1 for v in verdicts if v.get("second_recovery")),
        "tool_calls_answered_twice": items("answered_twice"),
        "side_effects_repeated": items("repeated_effects"),
        "side_effects_without_dispatch": items("unrecorded_effects"),
        "side_effects_denied": items("denied_effects"),
        "left_unfinished": trials_with("unfinished"),
        "reopen_failures": sum(1 for v in verdicts if v.get("reopen_error")),
        "resume_failures": sum(
            1 for v in verdicts if "resumed" in v and not v["resumed"] and not v.get("reopen_error")
        ),
        "untyped_errors": sum(len(o["untyped_errors"]) for o in outcomes),
        "wrong_outcomes": sum(len(o["wrong_outcomes"]) for o in outcomes),
        "harness_errors": sum(1 for v in verdicts if v.get("harness_error") or v.get("errors")),
    }
    failed = [o for o in outcomes if o["failed"]]
    library_errors: Counter[str] = Counter()
    for o in outcomes:
        library_errors.update(o["library_errors"])
    return {
        "durability": prof.durability,
        "seed": seed,
        "trials": len(outcomes),
        "by_kind": dict(Counter(o["trial"]["kind"] for o in outcomes)),
        "kill_trials": sum(1 for o in outcomes if o["trial"]["kind"] in KILL_KINDS),
        "killed": sum(1 for o in outcomes if o["trial"]["kind"] in KILL_KINDS and o["verdict"].get("killed")),
        "power_loss_trials": sum(1 for o in outcomes if o["trial"]["kind"] in POWER_KINDS),
        "crash_points_reached": reachable,
        "crash_points_covered": sorted(covered & set(reachable)),
        "crash_points_not_reached": [p for p in named if p not in reachable],
        **counts,
        "normal_power_loss": {
            "trials_losing_commits": trials_with("tail_lost"),
            "committed_events_lost": total("tail_lost"),
            "trials_repeating_side_effects": trials_with("allowed_repeated"),
            "side_effects_repeated": items("allowed_repeated"),
            "side_effects_without_dispatch": items("allowed_unrecorded"),
            "side_effects_denied": items("allowed_denied"),
        },
        "library_errors": dict(sorted(library_errors.items())),
        "recovered_events": total("recovered"),
        "ok": not any(counts.values()),
        "failed_trials": len(failed),
        "failures": [
            {
                "index": o["trial"]["index"],
                "kind": o["trial"]["kind"],
                "trial": o["describe"],
                "path": o["path"],
                "problems": o["verdict"].get("problems", []) + o["wrong_outcomes"] + o["untyped_errors"],
                **({"schema": o["schema"]} if "schema" in o else {}),
            }
            for o in failed[:20]
        ],
    }


def render(report: dict[str, Any]) -> str:
    """The report as a table for people (``report_lines`` joined)."""
    return "\n".join(report_lines(report))


def report_lines(report: dict[str, Any]) -> list[str]:
    """The report as a table for people, one escaped line each."""
    on_postgres = report.get("backend") == "postgresql"
    kinds = ", ".join(f"{kind} {report['by_kind'].get(kind, 0)}" for kind in report.get("kinds", KINDS))
    rows = [
        ("trials", f"{report['trials']}  ({kinds})"),
        ("kill trials / killed", f"{report['kill_trials']} / {report['killed']}"),
        ("crash points covered",
         f"{len(report['crash_points_covered'])} of {len(report['crash_points_reached'])} the workload reaches"),
    ]  # fmt: skip
    if SERVER_CRASH in report.get("kinds", ()):
        died = ", ".join(f"{n} {error}" for error, n in report["agent_errors"].items()) or "none"
        rows += [
            ("server crashes", f"{report['server_crashes']} ({report['server_crashes_mid_run']} while the agent ran)"),
            ("  agents that died of them", died),
        ]
    rows += [(label, str(report[key])) for key, label in FAILURES]
    if report["durability"] == "normal":
        lost = report["normal_power_loss"]
        rows += [
            (f"allowed under normal, after a {'server crash' if on_postgres else 'power cut'}:", ""),
            (
                "  commits lost (a tail)",
                f"{lost['committed_events_lost']} events in {lost['trials_losing_commits']} trials",
            ),
            (
                "  side effects repeated",
                f"{lost['side_effects_repeated']} in {lost['trials_repeating_side_effects']} trials",
            ),
            ("  side effects without a dispatch", str(lost["side_effects_without_dispatch"])),
            ("  side effects said not to have run", str(lost["side_effects_denied"])),
        ]
    width = max(len(label) for label, _ in rows)
    where = f" on PostgreSQL ({report['database']})" if on_postgres else ""
    settings = f"durability {report['durability']}, seed {report['seed']}, {report['elapsed_s']} s"
    lines = [f"journal torture{where}: {settings}"]
    lines += [f"  {label:<{width}}  {value}" for label, value in rows]
    if report["crash_points_not_reached"]:
        lines.append(f"  not reached by the workload: {', '.join(report['crash_points_not_reached'])}")
    not_run = report.get("kinds_not_run") or []
    if any(kind != SERVER_CRASH for kind in not_run):
        storage = ", ".join(kind for kind in not_run if kind != SERVER_CRASH)
        lines.append(f"  not run on PostgreSQL (they need SQLite's fault VFS): {storage}")
    if SERVER_CRASH in not_run:
        lines.append("  not run: server_crash (it needs a server of the campaign's own: --postgres)")
    for failure in report["failures"]:
        kept = f" [schema {failure['schema']} kept]" if "schema" in failure else ""
        lines.append(f"  FAILED trial {failure['index']} ({failure['trial']}){kept}: {'; '.join(failure['problems'])}")
    if report.get("workdir"):
        lines.append(f"  the failing trials' files are kept in {report['workdir']}")
    if report.get("server_dir"):
        lines.append(f"  the server, with the failing trials' schemas, is kept (stopped) in {report['server_dir']}")
    lines.append("  ok: every counter is zero" if report["ok"] else "  PROBLEMS FOUND")
    # Problems quote errors and paths: each line is escaped whole, so none can forge another (G14).
    return [escape(redact(line)) for line in lines]
