"""The command line: a thin shell over the library; machine output is a contract."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import journal
from journal.cli import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


@pytest.fixture
def cli(db_path: Path):
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True, input: str | None = None):
        result = runner.invoke(main, [*args], env={"JOURNAL_DB": str(db_path)}, input=input)
        if ok:
            assert result.exit_code == 0, (result.output, result.exception)
        return result

    return invoke


def _commands() -> list[str]:
    return sorted(main.commands)


@pytest.mark.parametrize("name", _commands())
def test_every_command_has_help_and_is_documented(name: str) -> None:
    command = main.commands[name]
    assert command.help and command.help.strip()
    assert CliRunner().invoke(main, [name, "--help"]).exit_code == 0
    assert re.search(rf"^## `journal {name}\b", DOCS.read_text(), re.MULTILINE), f"{name} missing from docs/cli.md"


def test_init_append_show_sessions_round_trip(cli, db_path: Path) -> None:
    cli("init")
    event = json.loads(cli("append", "s1", "user_message", '{"content": "hi"}', "--create").output)
    assert (event["session_id"], event["seq"], event["type"]) == ("s1", 0, "user_message")
    sessions = json.loads(cli("sessions", "--json").output)["sessions"]
    assert [(s["id"], s["count"]) for s in sessions] == [("s1", 1)]
    shown = json.loads(cli("show", "s1", "--json").output)
    assert shown["session"]["id"] == "s1" and shown["items"][0]["data"] == {"content": "hi"}
    lines = cli("show", "s1", "--nl").output.strip().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [0]
    assert "hi" in cli("show", "s1").output


def test_a_library_error_is_one_line_and_exit_status_1(cli) -> None:
    cli("init")
    result = cli("append", "nope", "user_message", '{"content": "hi"}', ok=False)
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "no session 'nope'" in result.output
    bad = cli("append", "nope", "user_message", "{}", "--create", ok=False)
    assert bad.exit_code == 1 and "data.content" in bad.output


@pytest.mark.sqlite_only(reason="a file's bytes (tests/test_postgres.py checks a foreign schema)")
def test_not_a_journal_is_reported_and_the_file_untouched(cli, db_path: Path) -> None:
    db_path.write_text("not a database")
    result = cli("sessions", ok=False)
    assert result.exit_code == 1 and "not a journal" in result.output
    assert db_path.read_text() == "not a database"


def _crash(db_path: Path) -> str:
    with journal.open(db_path) as j:
        s = j.create_session("s").id
        turn = j.turn_start(s)
        turn.step_start()
        turn.assistant("", tool_calls=[{"id": "c", "name": "pay", "arguments": {}}])
        turn.dispatch("c")
    return s


def test_scan_recover_dry_run_then_recover(cli, db_path: Path) -> None:
    _crash(db_path)
    report = json.loads(cli("scan", "--json").output)
    assert [t["session_id"] for t in report["open_turns"]] == ["s"]
    assert report["open_turns"][0]["phase"] == "tool_request_recorded"
    plan = json.loads(cli("recover", "--dry-run", "--json").output)
    assert plan["dry_run"] is True
    repairs = plan["sessions"][0]["repairs"]
    assert repairs[0]["data"]["metadata"]["risk"] == "tool_outcome_unknown"
    assert json.loads(cli("scan", "--json").output)["open_turns"], "--dry-run wrote something"
    assert "MAY HAVE RUN" in cli("recover", "--dry-run").output
    done = json.loads(cli("recover", "--json").output)
    assert len(done["sessions"][0]["appended"]) == 2
    assert "clean" in cli("scan").output
    assert "MAY HAVE RUN" in cli("show", "s").output


def test_fork_check_stats(cli, db_path: Path) -> None:
    cli("append", "s", "user_message", '{"content": "hi"}', "--create")
    created = json.loads(cli("fork", "s", "--at", "0", "--id", "f", "--json").output)
    assert (created["id"], created["parent_id"], created["seed_length"]) == ("f", "s", 1)
    assert json.loads(cli("check", "--json").output)["ok"] is True
    stats = json.loads(cli("stats", "--json").output)
    assert (stats["sessions"], stats["forks"], stats["events"]) == (2, 1, 1)
    bad = cli("fork", "s", "--at", "5", ok=False)
    assert bad.exit_code == 1 and "past the end" in bad.output


def test_export_then_import_reproduces_the_sessions(cli, db_path: Path, tmp_path: Path) -> None:
    _crash(db_path)
    cli("recover")
    dump = cli("export").output
    other = tmp_path / "other.db"
    result = CliRunner().invoke(main, ["import", "-", "--db", str(other)], input=dump)
    assert result.exit_code == 0, result.output
    with journal.open(db_path) as a, journal.open(other) as b:
        assert [(e.seq, e.type, e.data) for e in a.events("s")] == [(e.seq, e.type, e.data) for e in b.events("s")]
        assert b.check() == [] and b.scan().clean


def test_tail_prints_the_latest_events_as_json_lines(cli) -> None:
    for i in range(5):
        cli("append", "s", "x.tick", json.dumps({"i": i}), "--create")
    lines = cli("tail", "s", "-n", "2", "--nl").output.strip().splitlines()
    assert [json.loads(line)["data"]["i"] for line in lines] == [3, 4]


def test_submissions_and_reconcile(cli, db_path: Path) -> None:
    with journal.open(db_path) as j:
        s = j.create_session("s").id
        j.submit(s, "user_message", {"content": "hi"})
        claim = j.claim(owner="elsewhere:1:1", lease_ms=1)
        claim.turn.step_start()
    listed = json.loads(cli("submissions", "--json").output)["submissions"]
    assert [(x["state"], x["attempt"]) for x in listed] == [("running", 1)]
    planned = json.loads(cli("reconcile", "--dry-run", "--json").output)
    assert planned["dry_run"] and planned["decisions"][0]["action"] == "new_attempt"
    assert json.loads(cli("submissions", "--json").output)["submissions"][0]["state"] == "running"
    assert "new_attempt (input_only)" in cli("reconcile").output
    assert json.loads(cli("submissions", "--state", "queued", "--json").output)["submissions"][0]["attempt"] == 1


def test_purge_asks_first_and_refuses_a_session_forks_read_through(cli) -> None:
    cli("append", "s", "user_message", '{"content": "secret"}', "--create")
    cli("fork", "s", "--id", "f")
    assert cli("purge", "s", ok=False, input="n\n").exit_code == 1
    refused = cli("purge", "s", "--yes", ok=False)
    assert refused.exit_code == 1 and "copy_forks" in refused.output
    assert "forks given their own copy: f" in cli("purge", "s", "--yes", "--copy-forks").output
    assert [s["id"] for s in json.loads(cli("sessions", "--json").output)["sessions"]] == ["f"]
