"""The crash campaign's agent and its plan: what a clean run of the agent reaches, and the trials.

``agent_workload`` is the agent every trial runs; ``profile`` runs it once, cleanly, and measures
it (the crash points it reaches, the clean log, the writes and syncs a run makes); ``plan`` draws
the campaign's trials from that profile, deterministically from the seed. The fault kinds and
their weights are named here; ``journal.testing.torture`` says what each does.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from journal import Journal, SessionNotFound
from journal import open as open_journal
from journal.testing import workload as _scripted
from journal.testing.faultvfs import FaultVFS
from journal.testing.ledger import Ledger
from journal.testing.pgtorture import Postgres
from journal.testing.witness import CommitWitness

SESSION = "agent"
AGENT_WORKLOAD = "journal.testing.torture:agent_workload"
FORK_SUFFIX = ".retry"
IMPORTED_SUFFIX = ".imported"
IMPORTED_TURNS = 12  # 84 events the trigger derives from: the plan's threshold on SQLite (84) and PostgreSQL (28)
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
    imported_id = session_id + IMPORTED_SUFFIX
    try:
        journal.session(imported_id)
    except SessionNotFound:
        journal.create_session(imported_id)
    if not journal.count(imported_id):  # one batch: all of it is there, or none
        journal.append_many(imported_id, imported_history())


def imported_history(turns: int = IMPORTED_TURNS) -> list[tuple[str, dict[str, Any]]]:
    """Finished turns brought in from elsewhere as one ``append_many``: enough turn, step and
    call events that their derived state is planned for the batch on either backend
    (``journal.derived_batch``), so the campaign's crashes fall inside that path too."""
    items: list[tuple[str, dict[str, Any]]] = []
    for t in range(1, turns + 1):
        call = {"id": f"imported-{t}", "name": "lookup", "arguments": {"q": t}}
        items += [
            ("user_message", {"content": f"question {t}"}),
            ("turn_start", {"turn": t}),
            ("step_start", {"turn": t, "step": 1}),
            ("assistant_message", {"content": "", "tool_calls": [call], "stop_reason": "tool_use"}),
            ("tool_call", {"id": call["id"], "name": call["name"]}),
            ("tool_result", {"tool_call_id": call["id"], "content": f"answer {t}"}),
            ("step_end", {"turn": t, "step": 1, "outcome": "ok"}),
            ("turn_end", {"turn": t, "steps": 1, "reason": "complete"}),
        ]
    return [*items, ("x.imported", {"turns": turns})]


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
