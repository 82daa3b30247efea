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

A recorded session is a workload too (``journal.testing.replay_torture.replay``): the agent that
made it replays it against the recording's scripted model, its tool calls writing the ledger::

    verdict = crash_harness.kill_at("tool.after_run", workload=replay("case.jsonl", "my_agent:agent"))

Without pytest, ``Harness(directory)`` offers the same methods. ``Harness.points()`` lists the
crash points a clean run of the workload reaches, to parametrize over all of them.

This module runs the trials (``Harness``) and their child processes (``run_child``); the commit
witness is ``journal.testing.witness``'s, ``judge`` and ``Verdict`` are ``journal.testing.verdict``'s
(importable from here too).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from journal.engine import open as open_journal
from journal.errors import SessionNotFound
from journal.testing.ledger import Ledger
from journal.testing.verdict import SESSION, WORKLOAD, Verdict, Workload, _last_line, judge, load_workload
from journal.testing.witness import CommitWitness, read_witness

__all__ = [
    "CHILD_SPEC",
    "DEFAULT_TIMEOUT_S",
    "SESSION",
    "TIMED_OUT",
    "WORKLOAD",
    "CommitWitness",
    "Harness",
    "Verdict",
    "Workload",
    "judge",
    "load_workload",
    "read_witness",
    "run_child",
]

DEFAULT_TIMEOUT_S = 120.0
_READY = "journal-harness-ready"
CHILD_SPEC = "JOURNAL_CHILD_SPEC"  # the environment variable a child reads its spec from
TIMED_OUT = -1000
"""The return code ``run_child`` reports for a child it had to kill because it hung."""


def _workload_name(workload: str | Workload) -> str:
    if isinstance(workload, str):
        return workload
    child = getattr(workload, "child_name", None)  # a workload object that names its child's entry
    if isinstance(child, str):
        return child
    name = f"{workload.__module__}:{workload.__qualname__}"
    if "<" in name or workload.__module__ == "__main__":
        raise ValueError(f"the child cannot import {name}: give the workload as 'module:function'")
    return name


# -- the harness ----------------------------------------------------------------------------------


@attrs.define
class Harness:
    """Kill trials in a directory of your choice: each trial gets a fresh subdirectory.

    ``workload`` (``"module:function"``), ``session_id`` and ``durability`` are defaults that
    each method may override.
    """

    directory: Path = attrs.field(converter=Path)
    workload: str | Workload = WORKLOAD
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
        workload = options.get("workload", self.workload)
        _workload_name(workload)  # refused here if the child could not import it
        # A workload object (``journal.testing.replay_torture.replay``) says its own session.
        default_session = getattr(workload, "session_id", None) if "session_id" not in options else None
        return {
            "workload": workload,
            "environment": dict(getattr(workload, "environment", dict)()),
            "session_id": options.get("session_id", default_session or self.session_id),
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
                "workload": _workload_name(settings["workload"]),
                "session_id": settings["session_id"],
                "durability": settings["durability"],
                "checkpoint_pages": settings["checkpoint_pages"],
            },
            crash_at=crash_at,
            environment=settings["environment"],
            kill_after_s=kill_after_s,
            timeout_s=settings["timeout_s"],
        )


def run_child(
    spec: Mapping[str, Any],
    *,
    crash_at: str | None = None,
    kill_after_s: float | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    environment: Mapping[str, str] | None = None,
) -> tuple[int, str, str]:
    """Run one child (see ``_child_main``); returns ``(returncode, stdout, stderr)``.

    ``crash_at`` arms a crash point (``JOURNAL_CRASH_AT``); ``kill_after_s`` sends SIGKILL that
    long after the child reports its journal open. A child still running after ``timeout_s`` is
    killed and reported with the return code ``TIMED_OUT``. ``environment``: variables the child
    gets besides this process's (a workload object's configuration).
    """
    env = dict(os.environ)
    env.update(environment or {})
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
