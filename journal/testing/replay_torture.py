"""A recorded session as a crash campaign for the agent that made it (``journal replay --torture``).

``replay(case, agent)`` makes a workload of a recording: the kill harness runs it in a child
process (``Harness.kill_at(point, workload=replay("case.jsonl", "my_agent:agent"))``, or the
``crash_harness`` fixture of the pytest plugin), where the agent plays the recording against its
scripted model, each tool call writing one fsynced ledger entry (the side effect the recording
says it had) between the crash points ``tool.before_run`` and ``tool.after_run``.

The documented recovery, which the harness runs after each kill: open the journal, ``scan()``,
``recover()`` (twice: the second must append nothing), then call the agent again with the turns
the log does not hold yet (those after the last ``turn_start``: a turn the kill interrupted is
closed by recovery, not played again). The resumed run's requests are not compared with the
recording (the interruption is in its history, not in the recording's); its tool calls are.

``campaign(workload, trials)`` kills the agent at every crash point a clean run of it reaches
(each point once before any repeats), at random moments and during recovery, and reports the
counters of ``journal torture`` (``journal.testing.torture_report``): nothing committed lost, no
side effect repeated or without a durable dispatch, no call answered twice, valid transcripts.
It runs on SQLite files.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import json
import multiprocessing
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from journal.engine import Journal
from journal.escape import escape
from journal.model import Event
from journal.testing.harness import Harness
from journal.testing.ledger import Ledger
from journal.testing.replay import Recording, load_agent, play
from journal.testing.replay_models import ReplayTools, ScriptedModel
from journal.testing.torture_plan import Profile, Trial, plan
from journal.testing.torture_report import report_lines, summarize

__all__ = ["REPLAY_SPEC", "WEIGHTS", "ReplayWorkload", "campaign", "from_environment", "replay", "report_text"]

REPLAY_SPEC = "JOURNAL_REPLAY_SPEC"
"""The environment variable a child reads its replay workload from (JSON)."""
WEIGHTS = {"kill_at_point": 0.75, "kill_at_random": 0.10, "kill_in_recovery": 0.15}


@attrs.frozen
class ReplayWorkload:
    """A recording played by an agent, as a kill harness workload ``run(journal, session_id, ledger)``."""

    case: str
    """A ``journal export`` file holding the recording."""
    agent: str
    """The agent, ``"module:function"`` (see ``journal.testing.replay``)."""
    session_id: str
    tools: str | dict[str, str] = "recorded"
    child_name: ClassVar[str] = "journal.testing.replay_torture:from_environment"

    def environment(self) -> dict[str, str]:
        """What a child process needs to run this workload (``from_environment`` reads it)."""
        return {REPLAY_SPEC: json.dumps(attrs.asdict(self))}

    def __call__(self, journal: Journal, session_id: str, ledger: Ledger) -> None:
        recording = _recording(self.case, checked=True)
        resumed = bool(journal.session(session_id).count)
        model = ScriptedModel(recording, journal=journal, session_id=session_id, check=not resumed)
        tools = ReplayTools(model, self.tools, ledger=ledger)
        play(journal, recording, load_agent(self.agent), model, tools, session_id=session_id)


_RECORDINGS: dict[str, Recording] = {}


def _recording(case: str, *, checked: bool = False) -> Recording:
    """The case's recording; ``checked``: the file was read by ``Recording.from_export`` (in the
    process that made the workload), so a child reads it as plain JSON lines, without the
    scratch journal whose writes would pass crash points of the agent's process."""
    if case not in _RECORDINGS:
        _RECORDINGS[case] = _read_checked(case) if checked else Recording.from_export(case)
    return _RECORDINGS[case]


def _read_checked(case: str) -> Recording:
    session: dict[str, Any] = {}
    events: list[Event] = []
    with open(case, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            if "session" in record:
                session = record["session"]
            elif "event" in record:
                e = record["event"]
                events.append(Event(e["session_id"], e["seq"], e["type"], e["data"], e["time_ms"], e.get("key")))
    return Recording.from_events(session["id"], events, meta=session.get("meta"))


def from_environment(journal: Journal, session_id: str, ledger: Ledger) -> None:
    """The child's entry: the workload ``REPLAY_SPEC`` describes."""
    fields = json.loads(os.environ[REPLAY_SPEC])
    ReplayWorkload(**fields)(journal, session_id, ledger)


_SAVED: list[str] = []


def replay(
    case: str | os.PathLike[str] | Recording, agent: str, *, tools: str | Mapping[str, str] = "recorded"
) -> ReplayWorkload:
    """The workload that replays ``case`` (an export file, or a ``Recording``, saved to a
    temporary file for the children) with ``agent`` (``"module:function"``)."""
    load_agent(agent)  # InvalidArgument now rather than in every child
    if isinstance(case, Recording):
        recording = case
        scratch = tempfile.mkdtemp(prefix="journal-replay-case-")
        _SAVED.append(scratch)
        path = os.path.join(scratch, "case.jsonl")
        recording.save(path)
    else:
        path = os.path.abspath(os.fspath(case))
        recording = _recording(path)
    policy = tools if isinstance(tools, str) else dict(tools)
    ReplayTools(ScriptedModel(recording), policy)  # the policy checked now
    return ReplayWorkload(path, agent, recording.session_id, policy)


@atexit.register
def _remove_saved() -> None:
    for scratch in _SAVED:
        shutil.rmtree(scratch, ignore_errors=True)


# -- the campaign ---------------------------------------------------------------------------------


def campaign(
    workload: ReplayWorkload,
    trials: int,
    *,
    seed: int = 1,
    durability: str = "full",
    jobs: int = 2,
    workdir: str | os.PathLike[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Kill the replayed agent ``trials`` times and return the report (``journal torture``'s
    fields, and ``replay``: the case, the agent, the session)."""
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="journal-replay-torture-", dir=workdir))
    try:
        prof = _profile(workload, durability, root / "profile")
        weights = dict(WEIGHTS) if prof.open_turn else {"kill_at_point": 0.85, "kill_at_random": 0.15}
        planned = plan(trials, seed, prof, weights=weights)
        outcomes = list(_execute(planned, workload, root, jobs, progress))
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    report = summarize(outcomes, prof, seed=seed)
    report["kinds"] = list(weights)  # the kill kinds only: the storage faults need the shipped workload's VFS runs
    report["replay"] = {"session_id": workload.session_id, "case": workload.case, "agent": workload.agent,
                        "tools": workload.tools}  # fmt: skip
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["jobs"] = jobs
    if report["failed_trials"]:
        report["workdir"] = str(root)
    else:
        shutil.rmtree(root, ignore_errors=True)
    return report


def report_text(report: dict[str, Any]) -> list[str]:
    """The campaign's table for people, each line escaped (``journal torture``'s, retitled)."""
    lines = report_lines(report)
    about = report["replay"]
    lines[0] = escape(
        f"journal replay --torture of {about['session_id']} with {about['agent']}: "
        f"durability {report['durability']}, seed {report['seed']}, {report['elapsed_s']} s"
    )
    return lines


def _profile(workload: ReplayWorkload, durability: str, directory: Path) -> Profile:
    """A clean run of the replayed agent in a child: the crash points it reaches, in order."""
    harness = Harness(directory, workload=workload, durability=durability)
    started = time.perf_counter()
    trace = harness.trace()
    duration = time.perf_counter() - started
    open_turn, turn_open = [], False
    for name, n in trace:
        turn_open = {"turn_start.after_commit": True, "turn_end.after_commit": False}.get(name, turn_open)
        if turn_open:
            open_turn.append((name, n))
    return Profile(durability, tuple(trace), tuple(open_turn), {}, duration, {})


def _execute(
    planned: list[Trial],
    workload: ReplayWorkload,
    root: Path,
    jobs: int,
    progress: Callable[[int], None] | None,
) -> list[dict[str, Any]]:
    out = []
    if jobs <= 1:
        for trial in planned:
            out.append(run_trial(trial, workload, str(root)))
            if progress:
                progress(1)
        return out
    # Processes, not threads: a replay's recorded crash is raised by a crash-point observer,
    # which every thread of a process would share.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [pool.submit(run_trial, trial, workload, str(root)) for trial in planned]
        for future in concurrent.futures.as_completed(futures):
            out.append(future.result())
            if progress:
                progress(1)
    return out


def run_trial(trial: Trial, workload: ReplayWorkload, root: str) -> dict[str, Any]:
    """One kill trial of the replayed agent (a child killed, then the documented recovery and
    the judge in this process); never raises: what went wrong is in the outcome."""
    directory = Path(root) / f"trial-{trial.index:05d}"
    started = time.perf_counter()
    covered: list[str] = []
    try:
        harness = Harness(directory, workload=workload, durability=trial.durability)
        if trial.kind == "kill_at_random":
            assert trial.delay_s is not None
            verdict = harness.kill_after(trial.delay_s)
        else:
            assert trial.point is not None
            name, _, n = trial.point.rpartition(":")
            verdict = harness.kill_at(name, int(n), recovery_kill_at=trial.recovery_point)
            if verdict.killed:
                covered.append(name)
            if verdict.recovery_killed and trial.recovery_point is not None:
                covered.append(trial.recovery_point)
        document = verdict.to_dict()
    except Exception:
        document = {"ok": False, "problems": ["harness error: " + traceback.format_exc(limit=4)], "harness_error": True}
    failed = not document["ok"]
    if not failed:
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "trial": attrs.asdict(trial),
        "describe": trial.describe(),
        "verdict": document,
        "failed": failed,
        "path": str(directory),
        "elapsed_s": time.perf_counter() - started,
        "covered": covered,
        "wrong_outcomes": [],
        "untyped_errors": [],
        "library_errors": {},
    }
