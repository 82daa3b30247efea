"""The kill harness: run an agent in a child process, kill it, restart, and judge the journal.

A trial runs a *workload* (your agent, or the shipped scripted one) in a fresh Python process,
kills it with SIGKILL at a named crash point (``JOURNAL_CRASH_AT``) or after a delay, then does
what a restarted agent does: open the file, ``scan()``, ``recover()``, and run the workload
again to completion. Every step is checked against two witnesses outside the journal:

- the **commit witness**: at every ``*.after_commit`` crash point the child appends the event
  count of every session to a side file, so the parent knows what was committed before the kill
  (a process kill must lose none of it, in either durability mode);
- the **ledger**: the tools' side effects, one fsynced line each (``journal.testing.Ledger``).

The result is a ``Verdict``: events lost, ``integrity_check``, ``check()`` disagreements, whether
a second ``recover()`` appended anything, tool calls answered twice, side effects repeated (even
after the resumed run), side effects with no durable dispatch, and side effects that recovery
said "did not run". ``verdict.ok`` is true when all are zero; ``verdict.problems`` says what not.

A workload is a callable ``run(journal, session_id, ledger)``, named ``"module:function"`` so the
child can import it. It plays the agent's session on the given ``Journal``; every tool records
its side effect with ``ledger.record(session=session_id, call=<tool call id>, ...)``; called
again on the same session after recovery it must carry on from what the log shows (not redo a
turn the log already has), as ``journal.testing.workload.run`` does.

With pytest (the ``crash_harness`` fixture comes from ``journal.testing.plugin``)::

    import pytest

    @pytest.mark.parametrize("point", ["dispatch.after_commit", "tool.after_run", "put_result.before_commit"])
    def test_my_agent_survives_a_kill(crash_harness, point):
        verdict = crash_harness.kill_at(point, workload="my_agent.testing:run")
        assert verdict.killed, "the workload never reached the point"
        assert verdict.ok, verdict.problems

    def test_my_agent_survives_a_kill_at_a_random_moment(crash_harness):
        assert crash_harness.kill_after(0.01, workload="my_agent.testing:run").ok

Without pytest, ``Harness(directory)`` offers the same methods. ``Harness.points()`` lists the
crash points a clean run of the workload reaches, to parametrize over all of them.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from journal import crash
from journal.engine import Journal
from journal.engine import open as open_journal
from journal.errors import JournalError, SessionNotFound
from journal.testing.ledger import Ledger

WORKLOAD = "journal.testing.workload:run"
"""The shipped workload: a scripted agent session whose tools write to the ledger."""

SESSION = "agent"
DEFAULT_TIMEOUT_S = 120.0
_READY = "journal-harness-ready"
CHILD_SPEC = "JOURNAL_CHILD_SPEC"  # the environment variable a child reads its spec from
TIMED_OUT = -1000
"""The return code ``run_child`` reports for a child it had to kill because it hung."""

Workload = Callable[[Journal, str, Ledger], Any]


def load_workload(name: str | Workload) -> Workload:
    """The callable named ``"package.module:function"`` (a callable is returned as it is)."""
    if callable(name):
        return name
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"a workload is named 'module:function', not {name!r}")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{name} is not callable")
    workload: Workload = target  # what the name says it is
    return workload


def _workload_name(workload: str | Workload) -> str:
    if isinstance(workload, str):
        return workload
    name = f"{workload.__module__}:{workload.__qualname__}"
    if "<" in name or workload.__module__ == "__main__":
        raise ValueError(f"the child cannot import {name}: give the workload as 'module:function'")
    return name


# -- the commit witness ---------------------------------------------------------------------------


class CommitWitness:
    """Records every crash point reached and, after each commit, every session's event count.

    ``install()`` observes ``journal.crash`` for the life of the context, so an armed crash
    point still fires, after the record is made. With a ``sink`` path each record is appended to
    that file as one JSON line (no fsync: it only has to survive a process kill, and the kernel
    keeps what was written). One witness per process at a time.
    """

    def __init__(self, journal: Journal, *, sink: str | os.PathLike[str] | None = None) -> None:
        self.journal = journal
        self.points: list[str] = []
        self.snapshots: list[dict[str, int]] = []
        self._sink = None if sink is None else os.fspath(sink)
        self._fd: int | None = None

    @contextlib.contextmanager
    def install(self) -> Iterator[CommitWitness]:
        if self._sink is not None:
            self._fd = os.open(self._sink, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            with crash.observing(self._record):
                yield self
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _record(self, name: str) -> None:
        self.points.append(name)
        entry: dict[str, Any] = {"point": name}
        if name.endswith(".after_commit"):
            try:
                counts = {s.id: s.count for s in self.journal.sessions()}
            except JournalError:
                counts = None  # a read failed under a fault: claim nothing rather than guess
            if counts is not None:
                self.snapshots.append(counts)
                entry["counts"] = counts
        if self._fd is not None:
            os.write(self._fd, (json.dumps(entry, sort_keys=True) + "\n").encode())

    @property
    def committed(self) -> dict[str, int]:
        """The highest event count seen committed, per session."""
        return _highest(self.snapshots)


def read_witness(path: str | os.PathLike[str]) -> tuple[list[str], list[dict[str, int]]]:
    """The points and snapshots a child's witness file holds (a line torn by the kill is ignored)."""
    points: list[str] = []
    snapshots: list[dict[str, int]] = []
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return points, snapshots
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        points.append(entry["point"])
        if "counts" in entry:
            snapshots.append(entry["counts"])
    return points, snapshots


def _highest(snapshots: Sequence[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for counts in snapshots:
        for session_id, count in counts.items():
            out[session_id] = max(out.get(session_id, 0), count)
    return out


# -- the verdict ----------------------------------------------------------------------------------


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class Verdict:
    """What one trial found. ``ok`` when nothing is wrong; ``problems`` lists what is.

    ``tail_lost`` and the ``allowed_*`` fields list what went wrong but is not guaranteed
    against in the trial's setting: a power cut under ``durability="normal"`` may drop recent
    commits, and with them the dispatch records of tools that ran, so those tools may run
    again. They are reported, never counted as problems (``allowed`` says them in words).
    """

    how: str
    """How the workload was stopped: ``"crash point dispatch.after_commit:1"``, ``"SIGKILL after 0.012 s"``, ..."""
    killed: bool
    """The workload died as intended (False: it finished, or failed, first)."""
    path: str
    committed: int
    """Events the witness saw committed before the stop (over all sessions)."""
    found: int
    """Events found on restart, before recovery."""
    lost: int
    """Committed events missing on restart (a guarantee: zero)."""
    tail_lost: int = 0
    """Committed events missing after a power cut under ``normal`` (allowed, if only a tail)."""
    diverged: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """Sessions whose log on restart is not a prefix of the expected one (when one is given)."""
    integrity: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """``integrity_check`` messages other than ``ok`` (on restart, and after the resumed run)."""
    disagreements: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """``check()`` disagreements (after recovery, and after the resumed run)."""
    open_turns: int = 0
    """Open turns the restart scan found."""
    recovered: int = 0
    """Events the first ``recover()`` appended."""
    second_recovery: int = 0
    """Events a second ``recover()`` appended (a guarantee: zero)."""
    unfinished: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """Open turns or dispatched calls without a result left after recovery or the resumed run."""
    answered_twice: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """``session/call`` ids with more than one ``tool_result``."""
    repeated_effects: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """``session/call`` ids whose side effect the ledger holds more than once."""
    unrecorded_effects: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """Side effects (ledger) whose call has no ``tool_call`` dispatch in the journal (G6)."""
    denied_effects: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """Side effects (ledger) whose call recovery answered with risk ``tool_not_started``."""
    resumed: bool = False
    """The workload ran to completion after recovery."""
    resume_error: str | None = None
    """What the resumed run raised, if it failed."""
    reopen_error: str | None = None
    """What ``journal.open`` raised on restart, if the file could not be reopened at all."""
    errors: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """What failed in the harness's own machinery: a child that crashed or hung."""
    allowed_repeated: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """Side effects repeated after a power cut under ``normal`` (allowed: the dispatch was lost)."""
    allowed_unrecorded: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """Side effects whose dispatch a power cut under ``normal`` took away (allowed)."""
    allowed_denied: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """Side effects recovery called "did not run" after a power cut under ``normal`` took their
    dispatch (allowed)."""
    recovery_killed: bool | None = None
    """Whether the recovery run in a child died at its crash point (None: there was none)."""

    @property
    def problems(self) -> list[str]:
        out = []
        if self.lost:
            out.append(f"{self.lost} committed event(s) lost")
        out += [f"log diverged from the expected prefix: {s}" for s in self.diverged]
        out += [f"integrity_check: {m}" for m in self.integrity]
        out += [f"check(): {d}" for d in self.disagreements]
        if self.second_recovery:
            out.append(f"a second recover() appended {self.second_recovery} event(s)")
        out += [f"left unfinished: {u}" for u in self.unfinished]
        out += [f"tool call answered twice: {c}" for c in self.answered_twice]
        out += [f"side effect repeated: {c}" for c in self.repeated_effects]
        out += [f"side effect without a durable dispatch: {c}" for c in self.unrecorded_effects]
        out += [f"side effect that recovery said did not run: {c}" for c in self.denied_effects]
        if self.reopen_error is not None:
            out.append(f"the journal could not be reopened: {self.reopen_error}")
        elif not self.resumed:
            out.append(f"the resumed run failed: {self.resume_error}")
        out += list(self.errors)
        return out

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def allowed(self) -> list[str]:
        out = (
            [f"{self.tail_lost} committed event(s) lost to a power cut under normal durability"]
            if self.tail_lost
            else []
        )
        out += [f"side effect repeated after a power cut under normal durability: {c}" for c in self.allowed_repeated]
        out += [f"side effect whose dispatch a power cut took: {c}" for c in self.allowed_unrecorded]
        out += [
            f"side effect recovery said did not run, its dispatch lost to a power cut: {c}" for c in self.allowed_denied
        ]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "ok": self.ok, "problems": self.problems, "allowed": self.allowed}


# -- judging a file after a stop ------------------------------------------------------------------


def judge(
    path: str | os.PathLike[str],
    *,
    ledger: Ledger,
    snapshots: Sequence[Mapping[str, int]],
    workload: str | Workload = WORKLOAD,
    session_id: str = SESSION,
    durability: str = "full",
    how: str = "",
    killed: bool = True,
    power_lost: bool = False,
    expected: Mapping[str, Sequence[tuple[str, Any]]] | None = None,
    errors: Sequence[str] = (),
) -> Verdict:
    """Restart on ``path`` as an agent would (open, scan, recover twice, resume) and check it all.

    ``snapshots`` are the witness's per-commit event counts. With ``power_lost`` under
    ``durability="normal"`` a missing tail of commits is allowed (``tail_lost``), and so are the
    effects of losing the dispatch records in it. ``expected`` maps a session to the
    ``(type, data)`` pairs of a clean run: the log found on restart must be a prefix of it.
    """
    run = load_workload(workload)
    committed = _highest(snapshots)
    problems: dict[str, list[str]] = {"integrity": [], "disagreements": [], "unfinished": []}
    tolerant = power_lost and durability == "normal"
    try:
        opened = open_journal(path, durability=durability)
    except JournalError as exc:
        return Verdict(
            how=how, killed=killed, path=os.fspath(path), committed=sum(committed.values()), found=0, lost=0,
            reopen_error=f"{type(exc).__name__}: {exc}", errors=errors,
        )  # fmt: skip
    resume_error = None
    with opened as j:
        problems["integrity"] += [m for m in j.integrity_check() if m != "ok"]
        found = {s.id: s.count for s in j.sessions()}
        missing = sum(max(0, n - found.get(sid, 0)) for sid, n in committed.items())
        lost, tail_lost = (0, missing) if tolerant else (missing, 0)
        if tolerant and missing and not _is_tail(found, snapshots):
            lost, tail_lost = missing, 0
        diverged = _diverged(j, expected) if expected else []
        report = j.scan()
        recovered = sum(len(r.appended) for r in j.recover())
        second = sum(len(r.appended) for r in j.recover())
        problems["unfinished"] += _unfinished(j, "after recovery")
        problems["disagreements"] += [str(d) for d in j.check()]
        try:
            try:
                j.session(session_id)
            except SessionNotFound:
                j.create_session(session_id)
            run(j, session_id, ledger)
            resumed = True
        except Exception:
            resumed = False
            resume_error = _last_line(traceback.format_exc())
        problems["integrity"] += [m for m in j.integrity_check() if m != "ok"]
        problems["disagreements"] += [str(d) for d in j.check()]
        problems["unfinished"] += _unfinished(j, "after the resumed run")
        logs = {s.id: j.events(s.id) for s in j.sessions()}
    effects = _effects(ledger, logs)
    allowed: dict[str, list[str]] = {key: [] for key in effects}
    if tolerant:
        allowed, effects = effects, allowed
    return Verdict(
        how=how,
        killed=killed,
        path=os.fspath(path),
        committed=sum(committed.values()),
        found=sum(found.values()),
        lost=lost,
        tail_lost=tail_lost,
        diverged=diverged,
        integrity=problems["integrity"],
        disagreements=problems["disagreements"],
        open_turns=len(report.open_turns),
        recovered=recovered,
        second_recovery=second,
        unfinished=problems["unfinished"],
        answered_twice=_answered_twice(logs),
        repeated_effects=effects["repeated"],
        unrecorded_effects=effects["unrecorded"],
        denied_effects=effects["denied"],
        resumed=resumed,
        resume_error=resume_error,
        errors=errors,
        allowed_repeated=allowed["repeated"],
        allowed_unrecorded=allowed["unrecorded"],
        allowed_denied=allowed["denied"],
    )


def _is_tail(found: Mapping[str, int], snapshots: Sequence[Mapping[str, int]]) -> bool:
    """Whether ``found`` is what some prefix of the commits left (plus, at most, the next one)."""
    states: list[Mapping[str, int]] = [{}, *snapshots]
    for k, state in enumerate(states):
        after = states[k + 1] if k + 1 < len(states) else None
        at_least = all(found.get(s, 0) >= n for s, n in state.items())
        at_most = after is None or all(n <= after.get(s, 0) for s, n in found.items() if n)
        if at_least and at_most:
            return True
    return False


def _diverged(j: Journal, expected: Mapping[str, Sequence[tuple[str, Any]]]) -> list[str]:
    out = []
    for sid, clean in expected.items():
        try:
            events = j.events(sid)
        except SessionNotFound:
            continue
        got = [(e.type, e.data) for e in events]
        if got != [tuple(x) for x in clean[: len(got)]] or len(got) > len(clean):
            out.append(f"{sid} ({len(got)} events)")
    return out


def _unfinished(j: Journal, when: str) -> list[str]:
    report = j.scan()
    out = [f"turn at {t.session_id}:{t.start_seq} still open {when}" for t in report.open_turns]
    out += [f"call {c.session_id}/{c.call_id} dispatched without a result {when}" for c in report.pending_calls]
    return out


def _answered_twice(logs: Mapping[str, Sequence[Any]]) -> list[str]:
    out = []
    for sid, events in logs.items():
        counts = Counter(e.data.get("tool_call_id") for e in events if e.type == "tool_result")
        out += [f"{sid}/{call}" for call, n in counts.items() if n > 1]
    return out


def _effects(ledger: Ledger, logs: Mapping[str, Sequence[Any]]) -> dict[str, list[str]]:
    """The ledger against the journal: repeated, unrecorded (no dispatch) and denied effects."""
    entries = [e for e in ledger.entries() if "call" in e]
    seen = Counter((e.get("session"), e["call"]) for e in entries)
    repeated = [f"{s}/{c}" if s is not None else str(c) for (s, c), n in seen.items() if n > 1]
    dispatched: set[tuple[str, str]] = set()
    denied_calls: set[tuple[str, str]] = set()
    for sid, events in logs.items():
        for e in events:
            if e.type == "tool_call":
                dispatched.add((sid, e.data.get("id")))
            elif e.type == "tool_result":
                meta = e.data.get("metadata")
                if isinstance(meta, dict) and meta.get("synthetic") and meta.get("risk") == "tool_not_started":
                    denied_calls.add((sid, e.data.get("tool_call_id")))
    unrecorded, denied = [], []
    for session, call in seen:
        label = f"{session}/{call}" if session is not None else str(call)
        sessions = [session] if session is not None else list(logs)
        if not any((sid, call) in dispatched for sid in sessions):
            unrecorded.append(label)
        if any((sid, call) in denied_calls for sid in sessions):
            denied.append(label)
    return {"repeated": repeated, "unrecorded": unrecorded, "denied": denied}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


# -- the harness ----------------------------------------------------------------------------------


@attrs.define
class Harness:
    """Kill trials in a directory of your choice: each trial gets a fresh subdirectory.

    ``workload`` (``"module:function"``), ``session_id`` and ``durability`` are defaults that
    each method may override.
    """

    directory: Path = attrs.field(converter=Path)
    workload: str = WORKLOAD
    session_id: str = SESSION
    durability: str = "full"
    checkpoint_pages: int | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    _trials: int = attrs.field(default=0, init=False)

    def run(self, **options: Any) -> Verdict:
        """A trial with no kill: the workload runs to completion, then everything is checked."""
        return self._trial(None, None, "no kill", **options)

    def kill_at(self, point: str, n: int = 1, *, recovery_kill_at: str | None = None, **options: Any) -> Verdict:
        """Kill the workload the ``n``-th time it reaches crash point ``point``.

        With ``recovery_kill_at`` (say ``"recover.after_commit"``), the first recovery runs in a
        child too and is killed there; the parent then recovers again.
        """
        if n < 1:
            raise ValueError("n counts from 1")
        return self._trial(
            f"{point}:{n}", None, f"crash point {point}:{n}", recovery_kill_at=recovery_kill_at, **options
        )

    def kill_after(self, seconds: float, *, recovery_kill_at: str | None = None, **options: Any) -> Verdict:
        """Kill the workload (SIGKILL) ``seconds`` after it starts (after its journal is open)."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        return self._trial(
            None, seconds, f"SIGKILL after {seconds:.4f} s", recovery_kill_at=recovery_kill_at, **options
        )

    def points(self, **options: Any) -> list[str]:
        """The crash points a clean run of the workload reaches, in first-reached order."""
        return list(dict.fromkeys(name for name, _ in self.trace(**options)))

    def trace(self, **options: Any) -> list[tuple[str, int]]:
        """Every crash point a clean run reaches, as ``(point, occurrence)`` in order."""
        trial = self._new_trial_dir()
        settings = self._settings(options)
        code, _, err = self._child(trial, settings, mode="run", crash_at=None, kill_after_s=None)
        if code != 0:
            raise RuntimeError(f"the workload failed on a clean run: {_last_line(err)}")
        seen: Counter[str] = Counter()
        out = []
        for name in read_witness(trial / "witness")[0]:
            seen[name] += 1
            out.append((name, seen[name]))
        return out

    # -- internals ---------------------------------------------------------------------------

    def _settings(self, options: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(options) - {"workload", "session_id", "durability", "checkpoint_pages", "timeout_s", "expected"}
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        return {
            "workload": _workload_name(options.get("workload", self.workload)),
            "session_id": options.get("session_id", self.session_id),
            "durability": options.get("durability", self.durability),
            "checkpoint_pages": options.get("checkpoint_pages", self.checkpoint_pages),
            "timeout_s": options.get("timeout_s", self.timeout_s),
            "expected": options.get("expected"),
        }

    def _new_trial_dir(self) -> Path:
        self._trials += 1
        trial = self.directory / f"trial-{self._trials}"
        trial.mkdir(parents=True, exist_ok=False)
        return trial

    def _trial(
        self,
        crash_at: str | None,
        kill_after_s: float | None,
        how: str,
        *,
        recovery_kill_at: str | None = None,
        **options: Any,
    ) -> Verdict:
        settings = self._settings(options)
        trial = self._new_trial_dir()
        errors: list[str] = []
        code, _, err = self._child(trial, settings, mode="run", crash_at=crash_at, kill_after_s=kill_after_s)
        killed = code == -signal.SIGKILL
        intended_kill = crash_at is not None or kill_after_s is not None
        if code not in (0, -signal.SIGKILL) or (killed and not intended_kill):
            errors.append(f"the workload's process exited with status {code}: {_last_line(err)}")
        recovery_killed = None
        if recovery_kill_at is not None:
            how += f", then recovery killed at {recovery_kill_at}"
            rcode, _, rerr = self._child(trial, settings, mode="recover", crash_at=recovery_kill_at, kill_after_s=None)
            recovery_killed = rcode == -signal.SIGKILL
            if rcode not in (0, -signal.SIGKILL):
                errors.append(f"the recovery process exited with status {rcode}: {_last_line(rerr)}")
        verdict = judge(
            trial / "journal.db",
            ledger=Ledger(trial / "ledger"),
            snapshots=read_witness(trial / "witness")[1],
            workload=settings["workload"],
            session_id=settings["session_id"],
            durability=settings["durability"],
            how=how,
            killed=killed,
            expected=settings["expected"],
            errors=errors,
        )
        return attrs.evolve(verdict, recovery_killed=recovery_killed)

    def _child(
        self,
        trial: Path,
        settings: Mapping[str, Any],
        *,
        mode: str,
        crash_at: str | None,
        kill_after_s: float | None,
    ) -> tuple[int, str, str]:
        return run_child(
            {
                "mode": mode,
                "path": str(trial / "journal.db"),
                "ledger": str(trial / "ledger"),
                "witness": str(trial / "witness"),
                "workload": settings["workload"],
                "session_id": settings["session_id"],
                "durability": settings["durability"],
                "checkpoint_pages": settings["checkpoint_pages"],
            },
            crash_at=crash_at,
            kill_after_s=kill_after_s,
            timeout_s=settings["timeout_s"],
        )


def run_child(
    spec: Mapping[str, Any],
    *,
    crash_at: str | None = None,
    kill_after_s: float | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tuple[int, str, str]:
    """Run one child (see ``_child_main``); returns ``(returncode, stdout, stderr)``.

    ``crash_at`` arms a crash point (``JOURNAL_CRASH_AT``); ``kill_after_s`` sends SIGKILL that
    long after the child reports its journal open. A child still running after ``timeout_s`` is
    killed and reported with the return code ``TIMED_OUT``.
    """
    env = dict(os.environ)
    env.pop("JOURNAL_CRASH_AT", None)
    # What this process can import (a test's workload module), the child can import too.
    paths = [os.path.abspath(p or os.curdir) for p in sys.path if os.path.isdir(p or os.curdir)]
    env["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([*paths, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    )
    if crash_at is not None:
        env["JOURNAL_CRASH_AT"] = crash_at
    # The spec in the environment (readable by this user alone), not argv: it names the database,
    # and a DSN's password must not be in a command line every user of the machine can read (`ps`).
    env[CHILD_SPEC] = json.dumps(dict(spec))
    code = (
        "import os, sys; from journal.testing.harness import _child_main; "
        "sys.exit(_child_main(os.environ['JOURNAL_CHILD_SPEC']))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout_s
    try:
        if kill_after_s is not None:
            assert proc.stdout is not None
            ready = proc.stdout.readline()  # EOF (a child that failed early) ends the wait too
            if ready.strip() == _READY:
                try:
                    proc.wait(timeout=kill_after_s)  # a child that finishes first is not killed
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return TIMED_OUT, out, err + f"\ntimed out after {timeout_s} s"
    return proc.returncode, out, err


def _child_main(argument: str) -> int:
    """The child's side of a trial: open the journal, install the witness, run the workload.

    ``mode`` ``"run"`` runs the workload on the session (creating it if needed); ``"recover"``
    runs ``recover()``. Crash points are armed by ``JOURNAL_CRASH_AT`` (read at import).
    """
    spec = json.loads(argument)
    run = load_workload(spec["workload"])
    opened = open_journal(spec["path"], durability=spec["durability"], checkpoint_pages=spec.get("checkpoint_pages"))
    with opened as j, CommitWitness(j, sink=spec["witness"]).install():
        print(_READY, flush=True)
        if spec["mode"] == "recover":
            j.recover()
        else:
            try:
                j.session(spec["session_id"])
            except SessionNotFound:
                j.create_session(spec["session_id"])
            run(j, spec["session_id"], Ledger(spec["ledger"]))
    return 0
