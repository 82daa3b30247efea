"""``journal torture``: a bounded campaign through the click command, its plan and its report.

CI runs the bounded campaigns below on every change (about 15 s on two cores); the long ones
are marked slow.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from journal import crash
from journal.cli.torture import torture as torture_command
from journal.testing import torture, torture_plan
from journal.testing.torture import KINDS, allocate, plan, profile, summarize

COUNTERS = [key for key, _ in torture.FAILURES]


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(torture_command, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.long
def test_a_bounded_campaign_covers_every_reached_point_and_finds_nothing(tmp_path: Path) -> None:
    code, out, err = invoke("--trials", "80", "--seed", "11", "--jobs", "2", "--workdir", str(tmp_path), "--json")
    report = json.loads(out)
    assert code == 0, report["failures"]
    assert report["ok"] and report["trials"] == 80
    assert all(report[key] == 0 for key in COUNTERS), {key: report[key] for key in COUNTERS}
    # A kill at a random moment may find the agent finished; every other kill must land.
    assert report["kill_trials"] >= report["killed"] >= report["kill_trials"] - report["by_kind"]["kill_at_random"]
    assert report["killed"] > 40
    assert report["crash_points_covered"] == sorted(report["crash_points_reached"])
    assert {"fork.after_commit", "append_many.before_commit", "recover.after_commit", "tool.after_run"} <= set(
        report["crash_points_covered"]
    )
    assert report["recovered_events"] > 0
    assert "torture (full)" in err, "the progress bar goes to stderr"
    assert list(tmp_path.iterdir()) == [], "a campaign without failures cleans up after itself"


def test_the_table_for_people_lists_the_counters_and_the_exit_status_is_zero(tmp_path: Path) -> None:
    # One trial of each kind, in this process (the bounded campaign above runs the pool of jobs):
    # the table does not depend on how many ran.
    code, out, _ = invoke("--trials", str(len(KINDS)), "--seed", "2", "--durability", "normal", "--jobs", "1")
    assert code == 0, out
    assert "durability normal, seed 2" in out
    for label in ("trials", "crash points covered", "committed events lost", "integrity failures",
                  "non-idempotent recoveries", "tool calls answered twice", "side effects repeated"):  # fmt: skip
        assert label in out
    assert "allowed under normal, after a power cut" in out
    assert out.rstrip().endswith("ok: every counter is zero")


def test_json_has_the_documented_fields(tmp_path: Path) -> None:
    code, out, _ = invoke("--trials", "8", "--seed", "3", "--jobs", "1", "--json")
    report = json.loads(out)
    assert code == 0
    documented = (Path(__file__).resolve().parent.parent / "docs" / "crash-points.md").read_text()
    for field in report:
        assert f"`{field}`" in documented, f"{field} is not documented in docs/crash-points.md"
    assert sum(report["by_kind"].values()) == report["trials"] == 8
    assert set(report["by_kind"]) == set(KINDS)
    assert set(report["normal_power_loss"]) == {
        "trials_losing_commits", "committed_events_lost", "trials_repeating_side_effects",
        "side_effects_repeated", "side_effects_without_dispatch", "side_effects_denied",
    }  # fmt: skip
    assert set(report["crash_points_not_reached"]).isdisjoint(report["crash_points_reached"])
    assert set(report["crash_points_not_reached"]) | set(report["crash_points_reached"]) == set(crash.POINTS) | set(
        crash.TOOL_POINTS
    )


def test_a_failing_campaign_exits_non_zero_and_names_the_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    real = torture.campaign

    def campaign_with_a_loss(*args, **kwargs):
        report = real(*args, **kwargs)
        report.update(committed_events_lost=2, ok=False, failed_trials=1)
        report["failures"] = [{"index": 3, "kind": "power_loss", "trial": "power loss at sync 4", "path": "/x",
                               "problems": ["2 committed event(s) lost"]}]  # fmt: skip
        return report

    monkeypatch.setattr(torture, "campaign", campaign_with_a_loss)
    code, out, _ = invoke("--trials", "1", "--jobs", "1")  # one real trial: the loss is the patch's
    assert code == 1
    assert "FAILED trial 3 (power loss at sync 4): 2 committed event(s) lost" in out
    assert "PROBLEMS FOUND" in out


# -- the plan ------------------------------------------------------------------------------------


@pytest.mark.parametrize("trials", [1, 6, 7, 10, 80, 1500])
def test_allocation_adds_up_and_gives_every_kind_a_trial_when_it_can(trials: int) -> None:
    counts = allocate(trials)
    assert sum(counts.values()) == trials
    if trials >= len(KINDS):
        assert all(counts[k] >= 1 for k in KINDS)


@pytest.fixture(scope="module")
def full_profile(tmp_path_factory: pytest.TempPathFactory) -> torture.Profile:
    return profile("full", tmp_path_factory.mktemp("profile"))


def test_the_plan_is_drawn_from_the_seed_and_visits_every_point_first(full_profile: torture.Profile) -> None:
    first, again, other = plan(300, 5, full_profile), plan(300, 5, full_profile), plan(300, 5 + 1, full_profile)
    assert first == again and first != other
    points = full_profile.points
    opening = [t.point.rpartition(":")[0] for t in first if t.kind == "kill_at_point"][: len(points)]
    assert sorted(opening) == sorted(points)
    assert all(
        t.point in {f"{p}:{n}" for p, n in full_profile.open_turn} for t in first if t.kind == "kill_in_recovery"
    )
    assert {t.recovery_point for t in first if t.kind == "kill_in_recovery"} == set(torture.RECOVERY_POINTS)


def test_a_clean_run_of_the_agent_reaches_the_fork_and_the_batch(full_profile: torture.Profile) -> None:
    assert {"fork.after_commit", "append_many.after_commit", "dispatch.after_commit"} <= set(full_profile.points)
    assert set(full_profile.expected) == {"agent", "agent.retry", "agent.imported"}
    assert sum(1 for t, _ in full_profile.expected["agent.retry"] if t == "turn_end") == 2
    # The imported history: one batch whose derived state is planned (journal.derived_batch).
    imported = full_profile.expected["agent.imported"]
    assert [t for t, _ in imported].count("turn_end") == torture_plan.IMPORTED_TURNS
    assert imported[-1][0] == "x.imported" and len(imported) == len(torture_plan.imported_history())


def test_the_summary_counts_a_trial_failure() -> None:
    prof = torture.Profile("full", (("dispatch.after_commit", 1),), (), {}, 0.01, {})
    outcome = {"trial": {"index": 0, "kind": "kill_at_point"}, "describe": "kill at x", "path": "/x", "failed": True,
               "covered": ["dispatch.after_commit"], "wrong_outcomes": [], "untyped_errors": [], "library_errors": {},
               "verdict": {"ok": False, "lost": 1, "integrity": ["page 3 is never used"], "killed": True,
                           "problems": ["1 committed event(s) lost"]}}  # fmt: skip
    report = summarize([outcome], prof, seed=1)
    assert (report["committed_events_lost"], report["integrity_failures"], report["ok"]) == (1, 1, False)
    assert report["crash_points_covered"] == ["dispatch.after_commit"]


# -- longer campaigns -----------------------------------------------------------------------------


def _long_campaigns_wanted(config: pytest.Config) -> bool:
    expression = config.getoption("markexpr") or ""
    return os.environ.get("JOURNAL_SLOW") == "1" or ("slow" in expression and "not slow" not in expression)


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["full", "normal"])
def test_a_long_campaign_finds_nothing(request: pytest.FixtureRequest, durability: str) -> None:
    if not _long_campaigns_wanted(request.config):
        pytest.skip("a long campaign (about a minute): run it with -m slow or JOURNAL_SLOW=1")
    code, out, _ = invoke("--trials", "600", "--seed", "21", "--durability", durability, "--jobs", "2", "--json")
    report = json.loads(out)
    assert code == 0, report["failures"]
