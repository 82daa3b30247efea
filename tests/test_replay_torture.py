"""A recorded session as a crash campaign (DESIGN §18): the replayed agent killed (SIGKILL, real
child processes) at every crash point it reaches, restarted with recover() and the turns still
to play, and judged by ``journal torture``'s counters."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import journal
from journal import transfer
from journal.cli import main as journal_cli
from journal.testing import Harness, plugin
from journal.testing.replay_torture import campaign, replay
from journal.testing.torture_report import FAILURES

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import replay_plain as plain  # noqa: E402

from tests.test_replay import record_with_a_crash  # noqa: E402

crash_harness = plugin.crash_harness  # the fixture, as an agent author gets it


def _case(tmp_path: Path, *, crashed: bool = False) -> Path:
    db = tmp_path / "recorded.db"
    if crashed:
        record_with_a_crash(str(db))
    else:
        with journal.open(db) as j:
            plain.record(j)
    with journal.open(db) as j:
        transfer.export_file(j, str(tmp_path / "case.jsonl"), [plain.SESSION])
    return tmp_path / "case.jsonl"


def _all_zero(report: dict[str, Any]) -> None:
    counters = {key: report[key] for key, _ in FAILURES}
    assert counters == dict.fromkeys(counters, 0), report["failures"]
    assert report["ok"] and report["failed_trials"] == 0


def _torture(case: Path, trials: int) -> dict[str, Any]:
    done = CliRunner().invoke(
        journal_cli,
        ["replay", "--from", str(case), "--agent", "replay_plain:agent", "--torture", str(trials), "--jobs", "2",
         "--json"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_replay_torture_on_the_plain_example_keeps_every_counter_zero_and_covers_every_point(tmp_path: Path) -> None:
    report = _torture(_case(tmp_path), 26)  # bounded: each crash point once, then a few more
    _all_zero(report)
    assert report["verdict"]["verdict"] == "matched"
    assert report["crash_points_covered"] == sorted(report["crash_points_reached"])
    assert {"dispatch.after_commit", "tool.after_run", "put_result.before_commit"} <= set(
        report["crash_points_reached"]
    )
    assert report["killed"] >= 22 and report["replay"]["session_id"] == plain.SESSION


@pytest.mark.slow
def test_replay_torture_200_on_the_plain_example(tmp_path: Path) -> None:
    report = _torture(_case(tmp_path), 200)
    _all_zero(report)
    assert report["trials"] == 200
    assert report["crash_points_covered"] == sorted(report["crash_points_reached"])


def test_replay_torture_text_says_ok_and_exits_0(tmp_path: Path) -> None:
    done = CliRunner().invoke(
        journal_cli,
        ["replay", "--from", str(_case(tmp_path)), "--agent", "replay_plain:agent", "--torture", "3", "--jobs", "1"],
    )
    assert done.exit_code == 0, done.output
    assert "journal replay --torture of shop-1 with replay_plain:agent" in done.stdout
    assert "ok: every counter is zero" in done.stdout


def test_a_diverging_agent_is_not_tortured_and_exits_1(tmp_path: Path) -> None:
    done = CliRunner().invoke(
        journal_cli,
        ["replay", "--from", str(_case(tmp_path)), "--agent", "replay_plain:agent_with_a_tip", "--torture", "5"],
    )
    assert (
        done.exit_code == 1
        and "diverged at turn 1 step 2" in done.stdout
        and "journal replay --torture" not in done.stdout
    )


@pytest.mark.parametrize(
    "point", ["dispatch.after_commit", "tool.after_run", "put_result.before_commit", "turn_end.after_commit"]
)
def test_harness_kill_at_takes_a_replay_workload(crash_harness: Harness, tmp_path: Path, point: str) -> None:
    workload = replay(_case(tmp_path), "replay_plain:agent")
    assert workload.session_id == plain.SESSION
    verdict = crash_harness.kill_at(point, 2, workload=workload)
    assert verdict.killed, f"{point} was never reached"
    assert verdict.ok, verdict.problems


@pytest.mark.parametrize(
    "point", ["tool.after_run:3", "dispatch.after_commit:4", "recover.after_commit:1", "append.after_commit:3"]
)
def test_a_recording_with_its_own_crash_survives_kills_of_the_replayed_agent(
    crash_harness: Harness, tmp_path: Path, point: str
) -> None:
    workload = replay(_case(tmp_path, crashed=True), "replay_plain:agent")
    name, _, n = point.rpartition(":")
    verdict = crash_harness.kill_at(name, int(n), workload=workload)
    assert verdict.killed and verdict.ok, verdict.problems


def test_a_campaign_on_a_recording_with_its_own_crash_keeps_every_counter_zero(tmp_path: Path) -> None:
    report = campaign(replay(_case(tmp_path, crashed=True), "replay_plain:agent"), 12, jobs=2)
    _all_zero(report)
    assert "recover.after_commit" in report["crash_points_reached"]


def test_an_openai_agents_recording_survives_kills_of_the_replayed_agent(
    crash_harness: Harness, tmp_path: Path
) -> None:
    import replay_openai_agents as oa

    oa.payments.clear()
    with journal.open(tmp_path / "recorded.db") as j:
        oa.record(j)
        transfer.export_file(j, str(tmp_path / "case.jsonl"), [oa.SESSION])
    workload = replay(tmp_path / "case.jsonl", "replay_openai_agents:agent")
    for point, n in (("tool.after_run", 1), ("dispatch.after_commit", 1)):
        verdict = crash_harness.kill_at(point, n, workload=workload)
        assert verdict.killed and verdict.ok, verdict.problems
