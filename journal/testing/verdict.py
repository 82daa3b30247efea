"""The verdict of a trial: restart on a stopped journal as an agent would, and check everything.

``judge`` opens the file, scans, recovers (twice: the second must append nothing), resumes the
workload to completion, and holds what it finds to the commit witness's snapshots
(``journal.testing.witness``) and to the ledger of side effects; ``Verdict`` is what it found.
A workload is named ``"module:function"`` (``load_workload``), so a child process can import it.
"""

from __future__ import annotations

import importlib
import os
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from journal.engine import Journal
from journal.engine import open as open_journal
from journal.errors import JournalError, SessionNotFound
from journal.testing.ledger import Ledger
from journal.testing.witness import _highest

WORKLOAD = "journal.testing.workload:run"
"""The shipped workload: a scripted agent session whose tools write to the ledger."""

SESSION = "agent"

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
