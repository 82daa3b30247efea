"""``journal torture`` on PostgreSQL (DESIGN §9, §16): client kills at every crash point, server
crashes (``pg_ctl stop -m immediate``) mid-run, the same verdict as on SQLite.

The bounded campaign below runs on every change (about 25 s on two cores): it starts a
throwaway server of its own, as ``journal torture --postgres`` does, so its server crashes never
touch the session's server (``pg_server``), which the ``--db`` tests use.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from journal import JournalIOError
from journal.cli.torture import torture as torture_command
from journal.testing import pgtorture, torture
from journal.testing.pgtorture import Postgres
from journal.testing.torture import Trial, profile, run_trial

COUNTERS = [key for key, _ in torture.FAILURES]
CLIENT_KILLS = ["kill_at_point", "kill_at_random", "kill_in_recovery"]
STORAGE_FAULTS = ["power_loss", "torn_power_loss", "io_error", "disk_full"]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "crash-points.md"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(torture_command, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def torture_schemas(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'torture\\_%' ORDER BY 1").fetchall()
    return [name for (name,) in rows]


@pytest.fixture
def database(pg_server) -> str:
    """A new, empty database on the session's server: a campaign's schemas go there."""
    return pg_server.create_database()


@pytest.mark.long
def test_a_bounded_campaign_with_server_crashes_covers_every_point_and_finds_nothing(pg_server, tmp_path: Path) -> None:
    # pg_server is asked for only so that a machine without PostgreSQL skips this test as the
    # contract suite does; --postgres starts (and crashes) a server of its own.
    args = ["--trials", "56", "--seed", "7", "--jobs", "2", "--workdir", str(tmp_path), "--json"]
    code, out, err = invoke("--postgres", *args)
    report = json.loads(out)
    if "server_dir" in report:  # kept for inspection by a failed campaign; the assertions say why
        shutil.rmtree(Path(report["server_dir"]).parent, ignore_errors=True)
    assert code == 0, json.dumps(report["failures"], indent=1)  # a text: shown whole, not cut short
    assert report["ok"] and report["trials"] == 56
    assert all(report[key] == 0 for key in COUNTERS), {key: report[key] for key in COUNTERS}
    assert report["backend"] == "postgresql"
    assert report["kinds"] == [*CLIENT_KILLS, "server_crash"]
    assert report["kinds_not_run"] == STORAGE_FAULTS
    assert set(report["by_kind"]) == set(report["kinds"])
    # Every point the workload reaches is killed at, by kill_at_point (which visits each point
    # before it repeats any), and recovery's two points by kill_in_recovery.
    assert report["by_kind"]["kill_at_point"] >= len(report["crash_points_reached"]) - len(torture.RECOVERY_POINTS)
    assert report["crash_points_covered"] == sorted(report["crash_points_reached"])
    assert {"dispatch.after_commit", "fork.after_commit", "append_many.before_commit", "tool.after_run"} <= set(
        report["crash_points_covered"]
    )
    assert report["killed"] >= report["kill_trials"] - report["by_kind"]["kill_at_random"]
    # The server really crashed, more than once, and the agents that died of it died typed.
    assert report["server_crashes"] == report["by_kind"]["server_crash"] >= 2
    assert report["server_crashes_mid_run"] >= 1
    assert all(error.startswith("JournalIOError") for error in report["agent_errors"]), report["agent_errors"]
    assert report["recovered_events"] > 0
    assert report["schemas_kept"] == [] and "server_dir" not in report
    assert "torture on PostgreSQL (full)" in err, "the progress bar goes to stderr"
    assert list(tmp_path.iterdir()) == [], "a campaign without failures cleans up after itself"


def test_db_json_names_the_kinds_that_ran_and_every_counter_is_zero(database: str) -> None:
    # One trial of each client-kill kind, in this process (the bounded campaign runs the pool).
    trials = len(CLIENT_KILLS)
    code, out, _ = invoke("--db", database, "--trials", str(trials), "--seed", "3", "--jobs", "1", "--json")
    report = json.loads(out)
    assert code == 0, report["failures"]
    assert all(report[key] == 0 for key in COUNTERS), {key: report[key] for key in COUNTERS}
    assert report["ok"] and report["trials"] == sum(report["by_kind"].values()) == trials
    assert report["kinds"] == CLIENT_KILLS
    assert report["kinds_not_run"] == [*STORAGE_FAULTS, "server_crash"]
    assert set(report["by_kind"]) == set(CLIENT_KILLS)
    assert (report["power_loss_trials"], report["server_crashes"], report["agent_errors"]) == (0, 0, {})
    assert report["database"] == database
    documented = DOCS.read_text()
    for field in report:
        assert f"`{field}`" in documented, f"{field} is not documented in docs/crash-points.md"
    assert torture_schemas(database) == [], "every trial that passed dropped its schema"
    text = torture.render(report)
    assert f"journal torture on PostgreSQL ({database}): durability full, seed 3" in text
    assert f"not run on PostgreSQL (they need SQLite's fault VFS): {', '.join(STORAGE_FAULTS)}" in text
    assert "not run: server_crash" in text
    assert text.rstrip().endswith("ok: every counter is zero")


def test_a_trial_drops_its_schema_when_it_passes_and_keeps_and_names_it_when_it_fails(
    database: str, tmp_path: Path
) -> None:
    pg = Postgres(database)
    prof = profile("full", tmp_path, pg=pg)
    assert torture_schemas(database) == [], "the profile's schema is dropped too"
    passed = run_trial(Trial(0, "kill_at_point", "full", 1, point="dispatch.after_commit:2"), prof, str(tmp_path), pg)
    assert not passed["failed"] and passed["covered"] == ["dispatch.after_commit"]
    assert torture_schemas(database) == []
    # A server crash on a server the campaign does not own is refused: the trial fails.
    failed = run_trial(Trial(1, "server_crash", "full", 1, delay_s=0.01), prof, str(tmp_path), pg)
    assert failed["failed"] and failed["verdict"]["harness_error"]
    assert torture_schemas(database) == [failed["schema"]] == [pg.schema("00001")]
    assert f"search_path%3D{failed['schema']}" in failed["path"]
    outcomes = [passed, failed]
    report = torture.summarize(outcomes, prof, seed=1) | torture._postgres_fields(outcomes, pg, torture.PG_WEIGHTS)
    assert report["schemas_kept"] == [failed["schema"]]
    assert report["failures"][0]["schema"] == failed["schema"]
    assert f"[schema {failed['schema']} kept]" in torture.render({**report, "elapsed_s": 0.1})


def test_a_database_that_cannot_be_reached_is_one_typed_error(tmp_path: Path) -> None:
    missing = f"postgresql://nobody@/nowhere?host={tmp_path}"
    with pytest.raises(JournalIOError, match="schema creation"):
        torture.campaign(2, database=missing, workdir=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--db", "journal.db"], 2, "takes a PostgreSQL DSN"),
        (["--db", "postgresql://x@/y", "--postgres"], 2, "give one"),
    ],
    ids=["a-file-path", "both-servers"],
)
def test_the_server_options_are_checked_before_anything_runs(
    args: list[str], code: int, says: str, tmp_path: Path
) -> None:
    from journal.cli import main

    result = CliRunner().invoke(main, ["torture", *args, "--workdir", str(tmp_path / "w")])
    assert result.exit_code == code and says in result.stderr, result.stderr
    assert not (tmp_path / "w").exists()


def _raised(make) -> BaseException:
    try:
        make()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


def _translated() -> None:
    try:
        raise psycopg.OperationalError("server closed the connection unexpectedly")
    except psycopg.OperationalError as exc:
        raise JournalIOError("append", "unknown", str(exc)) from exc


def _raised_over_an_untranslated_error() -> None:
    try:
        raise psycopg.OperationalError("server closed the connection unexpectedly")
    except psycopg.OperationalError:
        _translated()  # an error handler's write failed too, typed: the first error stays untyped


def _untyped() -> None:
    raise ValueError("not the library's error")


# Code that runs as the driver's own (its frames' file is psycopg's): an error psycopg raises and
# handles inside itself, then raises another (its pipeline at a server crash).
_DRIVER = compile(
    "def pipeline_communicate():\n"
    "    try:\n"
    "        raise OperationalError('consuming input failed: server closed the connection unexpectedly')\n"
    "    except OperationalError:\n"
    "        raise OperationalError('server closed the connection unexpectedly')\n",
    f"{os.sep}site-packages{os.sep}psycopg{os.sep}_pipeline_base.py",
    "exec",
)


def _translated_over_the_drivers_own() -> None:
    driver: dict[str, Any] = {"OperationalError": psycopg.OperationalError}
    exec(_DRIVER, driver)
    try:
        driver["pipeline_communicate"]()
    except psycopg.OperationalError as exc:
        raise JournalIOError("append", "unknown", str(exc)) from exc


@pytest.mark.parametrize(
    ("make", "error", "typed", "untyped"),
    [
        (_translated, "JournalIOError", True, []),
        (_raised_over_an_untranslated_error, "JournalIOError", True, ["psycopg.OperationalError"]),
        (_untyped, "ValueError", False, ["builtins.ValueError"]),
        (_translated_over_the_drivers_own, "JournalIOError", True, []),
    ],
    ids=["translated", "untranslated-under-a-typed-one", "untyped", "the-drivers-own-under-a-translated-one"],
)
def test_what_an_agent_died_of_names_every_untranslated_error_in_the_chain(make, error, typed, untyped) -> None:
    died = pgtorture._died_of(_raised(make))
    assert (died["error"], died["typed"]) == (error, typed)
    assert [line.split(":")[0] for line in died["untyped"]] == untyped
    if error == "JournalIOError":
        assert died["outcome"] == "unknown" and died["operation"] == "append"


@pytest.mark.parametrize(
    ("database", "dsn"),
    [
        ("postgresql://bot@/agents?host=/run/pg", "postgresql://bot@/agents?host=/run/pg&options=-csearch_path%3Dt_1"),
        (
            "postgresql://bot@db/agents?options=-c%20statement_timeout%3D0",
            "postgresql://bot@db/agents?options=-c%20statement_timeout%3D0%20-csearch_path%3Dt_1",
        ),
        ("postgres://bot:secret@db:5433/agents", "postgres://bot:secret@db:5433/agents?options=-csearch_path%3Dt_1"),
    ],
    ids=["socket", "options-kept", "password"],
)
def test_a_trial_reaches_its_schema_through_the_search_path_and_reports_no_password(database: str, dsn: str) -> None:
    pg = Postgres(database, prefix="t_")
    assert pg.dsn(pg.schema("1")) == dsn
    assert "secret" not in pg.redacted(dsn)
