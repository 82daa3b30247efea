"""The kill harness (journal.testing.harness) and its pytest plugin, on the shipped workload.

Each trial kills a real child process (SIGKILL), restarts, recovers twice, resumes the workload
to completion and judges the file against the commit witness and the ledger. Broken agents
(defined below, imported by the children) show that a verdict can fail.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import journal
from journal import crash
from journal.testing import Ledger, harness, plugin, workload
from journal.testing.harness import Harness, judge
from journal.testing.verdict import _is_tail

crash_harness = plugin.crash_harness  # the fixtures under test, as an agent author gets them
fault_vfs = plugin.fault_vfs

ROOT = Path(__file__).resolve().parent.parent
THIS = "tests.test_harness"


# -- broken agents: each breaks one promise, and the verdict must say so -------------------------


def agent_that_runs_tools_before_dispatching(j: journal.Journal, session_id: str, ledger: Ledger) -> None:
    """Runs each tool's side effect, then records the dispatch: the barrier (G6) broken."""
    done = sum(1 for e in j.events(session_id) if e.type == "turn_start")
    for spec in workload.SCRIPT[done:]:
        with j.turn(session_id) as turn:
            j.append(session_id, "user_message", {"content": spec["user"]})
            for step in spec["steps"]:
                with turn.step():
                    if isinstance(step, str):
                        turn.assistant(step, stop_reason="stop")
                        continue
                    turn.assistant("", tool_calls=step, stop_reason="tool_use")
                    for call in step:
                        output = workload.run_tool(ledger, session_id, call)
                        with turn.dispatch(call["id"]) as dispatch:
                            dispatch.result(output, name=call["name"])


def agent_whose_tools_act_twice(j: journal.Journal, session_id: str, ledger: Ledger) -> None:
    """A tool with a retry loop that does its side effect twice."""
    original = workload.run_tool

    def twice(ledger_: Ledger, sid: str, call: dict) -> str:
        original(ledger_, sid, call)
        return original(ledger_, sid, call)

    workload.run_tool = twice
    try:
        workload.run(j, session_id, ledger)
    finally:
        workload.run_tool = original


# -- the harness on the shipped workload ----------------------------------------------------------


def test_a_clean_run_reaches_every_live_loop_point(crash_harness: Harness) -> None:
    points = crash_harness.points()
    for op in ("create_session", "turn_start", "append", "step_start", "provider_started", "save_chunk",
               "assistant", "dispatch", "put_result", "step_end", "turn_end"):  # fmt: skip
        assert f"{op}.before_commit" in points and f"{op}.after_commit" in points
    assert set(crash.TOOL_POINTS) <= set(points)
    assert set(points) <= set(crash.POINTS) | set(crash.TOOL_POINTS)


def test_a_run_without_a_kill_gives_a_verdict_of_zeros(crash_harness: Harness) -> None:
    verdict = crash_harness.run()
    assert verdict.ok, verdict.problems
    assert not verdict.killed
    assert verdict.committed == verdict.found == 35
    assert (verdict.lost, verdict.recovered, verdict.second_recovery, verdict.open_turns) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("point", "open_turns", "recovered"),
    [
        ("tool.after_run:2", 1, 3),  # delete_file ran, no result: MAY have run; append_note not started; turn_end
        ("dispatch.after_commit:4", 1, 2),  # pay_invoice dispatched, may have run
        ("turn_end.before_commit:3", 1, 1),
        ("turn_end.after_commit:3", 0, 0),
        ("create_session.before_commit:1", 0, 0),
    ],
)
def test_a_kill_at_a_crash_point_gives_a_verdict_of_zeros(
    crash_harness: Harness, point: str, open_turns: int, recovered: int
) -> None:
    name, _, n = point.partition(":")
    verdict = crash_harness.kill_at(name, int(n))
    assert verdict.killed
    assert verdict.ok, verdict.problems
    assert (verdict.open_turns, verdict.recovered) == (open_turns, recovered)
    assert verdict.lost == verdict.second_recovery == 0
    assert verdict.found == verdict.committed
    assert verdict.resumed


def test_kills_at_random_moments_give_verdicts_of_zeros(crash_harness: Harness) -> None:
    verdicts = [crash_harness.kill_after(delay) for delay in (0.0, 0.005, 0.01, 0.02, 0.04, 0.5)]
    assert all(v.ok for v in verdicts), [v.problems for v in verdicts]
    assert sum(v.killed for v in verdicts) >= 2
    assert len({v.found for v in verdicts}) >= 2, "the kills should land at different places"


def test_a_kill_that_finds_the_workload_finished_is_no_kill(crash_harness: Harness) -> None:
    verdict = crash_harness.kill_after(30.0, timeout_s=60)
    assert not verdict.killed and verdict.ok
    assert crash_harness.kill_at("no.such_point").killed is False


@pytest.mark.parametrize("recovery_point", ["recover.before_commit", "recover.after_commit"])
def test_a_recovery_killed_at_its_commit_is_finished_by_the_next_one(
    crash_harness: Harness, recovery_point: str
) -> None:
    verdict = crash_harness.kill_at("put_result.before_commit", 2, recovery_kill_at=recovery_point)
    assert verdict.killed and verdict.recovery_killed
    assert verdict.ok, verdict.problems
    assert verdict.recovered == (3 if recovery_point == "recover.before_commit" else 0)


def test_a_kill_under_normal_durability_loses_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path, durability="normal")
    for point in ("put_result.after_commit", "step_end.after_commit"):
        verdict = h.kill_at(point, 2)
        assert verdict.killed and verdict.ok, verdict.problems


# -- the verdict can fail ------------------------------------------------------------------------


def test_the_verdict_reports_a_side_effect_without_a_durable_dispatch(crash_harness: Harness) -> None:
    verdict = crash_harness.kill_at(
        "dispatch.before_commit", workload=f"{THIS}:agent_that_runs_tools_before_dispatching"
    )
    assert verdict.killed
    assert verdict.unrecorded_effects == ("agent/t1-ls",)
    assert not verdict.ok and "side effect without a durable dispatch: agent/t1-ls" in verdict.problems


def test_the_verdict_reports_repeated_side_effects(crash_harness: Harness) -> None:
    verdict = crash_harness.run(workload=f"{THIS}:agent_whose_tools_act_twice")
    assert set(verdict.repeated_effects) == {"agent/t1-ls", "agent/t1-rm", "agent/t1-log", "agent/t2-pay"}
    assert not verdict.ok


def test_the_verdict_reports_lost_commits_and_a_failed_resume(tmp_path: Path) -> None:
    path, ledger = tmp_path / "j.db", Ledger(tmp_path / "ledger")
    with journal.open(path) as j:
        j.create_session("agent")
    verdict = judge(path, ledger=ledger, snapshots=[{"agent": 0}, {"agent": 4}], workload=f"{THIS}:agent_that_crashes")
    assert verdict.lost == 4
    assert not verdict.resumed and verdict.resume_error == "RuntimeError: the model is down"
    assert verdict.problems == ["4 committed event(s) lost", "the resumed run failed: RuntimeError: the model is down"]


def agent_that_crashes(j: journal.Journal, session_id: str, ledger: Ledger) -> None:
    raise RuntimeError("the model is down")


@pytest.mark.parametrize(
    ("found", "snapshots", "tail"),
    [
        ({}, [{"a": 1}, {"a": 2}], True),  # everything lost: the empty prefix
        ({"a": 1}, [{"a": 1}, {"a": 2}], True),
        ({"a": 2}, [{"a": 1}, {"a": 2}], True),
        ({"a": 3}, [{"a": 1}, {"a": 2}], True),  # the write in flight survived too
        ({"a": 1, "b": 1}, [{"a": 1}, {"a": 2}, {"a": 2, "b": 1}], False),  # b survived, a's commit 2 lost
        ({"a": 2, "b": 1}, [{"a": 1}, {"a": 2}, {"a": 2, "b": 1}, {"a": 3, "b": 1}], True),
    ],
    ids=["nothing", "first", "all", "in-flight", "hole", "two-sessions"],
)
def test_a_power_cut_may_take_only_a_tail_of_the_commits(found: dict, snapshots: list, tail: bool) -> None:
    assert _is_tail(found, snapshots) is tail


def test_a_workload_is_named_module_colon_function() -> None:
    assert harness.load_workload("journal.testing.workload:run") is workload.run
    with pytest.raises(ValueError, match="module:function"):
        harness.load_workload("journal.testing.workload.run")


# -- the pytest plugin, as an agent author uses it -------------------------------------------------


def _example(module) -> str:
    """The pytest example of a module's docstring: the indented block after the first '::'."""
    text = module.__doc__.split("::\n", 1)[1]
    block = re.match(r"((?:\n|    .*\n)+)", text)
    assert block is not None
    return textwrap.dedent(block.group(1))


def _run_example(tmp_path: Path, source: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "my_agent").mkdir()
    (tmp_path / "my_agent" / "__init__.py").write_text("")
    (tmp_path / "my_agent" / "testing.py").write_text("from journal.testing.workload import run  # noqa: F401\n")
    (tmp_path / "test_example.py").write_text(source)
    environment = {k: v for k, v in os.environ.items() if k != "JOURNAL_CRASH_AT"}
    environment["PYTHONPATH"] = str(ROOT)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "test_example.py"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("module", [plugin, harness], ids=["plugin", "harness"])
def test_the_documented_pytest_example_passes(tmp_path: Path, module) -> None:
    done = _run_example(
        tmp_path, _example(module), "-p", "journal.testing.plugin", env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b4 passed\b", done.stdout), done.stdout


def test_the_pytest_entry_point_loads_the_plugin_by_itself(tmp_path: Path) -> None:
    entry_points = [
        ep for ep in importlib.metadata.entry_points(group="pytest11") if ep.value == "journal.testing.plugin"
    ]
    if not entry_points:
        pytest.skip("the pytest11 entry point is not installed yet (pyproject.toml, then pip install -e .)")
    done = _run_example(tmp_path, _example(plugin))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_fault_vfs_fixture_opens_a_journal(fault_vfs, tmp_path: Path) -> None:
    with journal.open(tmp_path / "j.db", vfs=fault_vfs.name) as j:
        j.create_session("s")
    assert fault_vfs.writes > 0 and fault_vfs.syncs > 0


# -- the documented list of crash points -----------------------------------------------------------


def test_the_crash_point_docs_list_every_point_in_order() -> None:
    text = (ROOT / "docs" / "crash-points.md").read_text()
    listed = re.findall(r"^\| `(\w+\.(?:before|after)_\w+)` \|", text, re.MULTILINE)
    assert listed == list(crash.POINTS) + list(crash.TOOL_POINTS)


# -- secrets ------------------------------------------------------------------------------------


def test_a_child_s_command_line_never_holds_its_database(tmp_path: Path) -> None:
    """The spec (it names the database: a DSN may hold a password) reaches the child through its
    environment, which only this user can read, never through argv, which `ps` shows to everyone."""
    (tmp_path / "peek_agent.py").write_text(
        "def run(journal, session_id, ledger):\n"
        "    with open('/proc/self/cmdline', 'rb') as f, open(__file__ + '.argv', 'wb') as out:\n"
        "        out.write(f.read())\n"
    )
    db = tmp_path / "secret-marker-7f3a.db"
    spec = {
        "workload": "peek_agent:run",
        "path": str(db),
        "durability": "full",
        "witness": str(tmp_path / "witness"),
        "mode": "run",
        "session_id": "s",
        "ledger": str(tmp_path / "ledger"),
    }
    sys.path.insert(0, str(tmp_path))  # run_child hands this process's sys.path to the child
    try:
        code, out, err = harness.run_child(spec)
    finally:
        sys.path.remove(str(tmp_path))
    assert code == 0, out + err
    argv = (tmp_path / "peek_agent.py.argv").read_bytes()
    assert b"python" in argv and b"secret-marker-7f3a" not in argv
