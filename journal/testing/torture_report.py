"""The crash campaign's report: its counters, from the trials' outcomes, and the table people read.

``summarize`` makes the report (the ``--json`` document of ``journal torture``); ``report_lines``
and ``render`` show it as a table, each line escaped. ``FAILURES`` names the counters that must
be zero, in the table's order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from journal import crash
from journal.escape import escape
from journal.store.target import redact
from journal.testing.pgtorture import Postgres
from journal.testing.torture_plan import (
    ALL_KINDS,
    KILL_KINDS,
    KINDS,
    POWER_KINDS,
    RECOVERY_POINTS,
    SERVER_CRASH,
    Profile,
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
