"""Export and import (journal.transfer): a round trip gives the same bytes; a refused session
leaves nothing behind; each imported session is one transaction."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

import journal
from journal import transfer
from journal.cli import main
from tests.conftest import run_child

HOSTILE = "\x1b]52;c;cm0=\x07\u202e\x9b\x7f\n!! MAY HAVE RUN"
UNICODE = "héllo 你好 🙂 \u00e9\u0301"


def _rich(path: Path) -> None:
    """Turns, dispatches, results (real, late, synthetic), x. events, meta, a fork, a compaction."""
    tools = journal.ToolRegistry()
    tools.register("mail", lambda arguments, context: None, effects=journal.Unsafe())
    with journal.open(path) as j:
        s = j.create_session("main", meta={"title": UNICODE, "hostile": HOSTILE, "n": [1, 2.5, None, True]}).id
        j.append(s, "system_message", {"content": "be brief"})
        with j.turn(s) as turn, turn.step():
            j.append(s, "user_message", {"content": HOSTILE + UNICODE})
            turn.assistant("", tool_calls=[{"id": "c1", "name": "get", "arguments": {HOSTILE: UNICODE, "x": 1.25}}])
            with turn.dispatch("c1") as call:
                call.result({"blocks": [UNICODE]})
        j.put_result(s, "c1", "a late one")
        j.append(s, "x.app.note", {"k": HOSTILE, "big": 2**62, "f": 1e-300})
        j.compact(s, 0, 1, "summary " + UNICODE)
        j.fork(s, id="fork")
        turn = j.turn_start(s)
        turn.step_start()
        turn.assistant("", tool_calls=[{"id": "c2", "name": "pay", "arguments": {}}, {"id": "c3", "name": "mail", "arguments": {}}])
        turn.dispatch("c2")
        j.dispatch(s, "c3", turn=turn, effect="unsafe")
        j.recover_effects(tools)
        j.resolve(s, "c3", outcome="did_not_run", note=HOSTILE)
        j.recover(s)
        j.append("fork", "user_message", {"content": "after the fork"})
        j.create_session("empty")


def _export(path: Path) -> str:
    with journal.open(path, readonly=True) as j:
        return "".join(line + "\n" for line in transfer.export_lines(j))


def test_export_import_export_is_byte_identical_and_the_copy_checks_clean(tmp_path: Path) -> None:
    _rich(tmp_path / "a.db")
    first = _export(tmp_path / "a.db")
    with journal.open(tmp_path / "b.db") as j:
        assert transfer.import_lines(j, first.splitlines(keepends=True)) == 3
        assert j.check() == [] and j.integrity_check() == ["ok"]
    assert _export(tmp_path / "b.db") == first
    with journal.open(tmp_path / "a.db", readonly=True) as a, journal.open(tmp_path / "b.db", readonly=True) as b:
        for sid in ("main", "fork", "empty"):
            assert b.events(sid) == a.events(sid)  # time_ms included
            assert (b.session(sid).meta, b.session(sid).created_ms) == (a.session(sid).meta, a.session(sid).created_ms)
        assert b.messages("main") == a.messages("main")
        assert b.session("fork").parent_id is None  # fork parentage does not travel: its events do
    checked = CliRunner().invoke(main, ["check", "--json", "--db", str(tmp_path / "b.db")])
    assert checked.exit_code == 0 and json.loads(checked.stdout)["ok"] is True


def test_the_command_line_round_trip_is_byte_identical(tmp_path: Path) -> None:
    _rich(tmp_path / "a.db")
    runner = CliRunner()
    first = runner.invoke(main, ["export", "--db", str(tmp_path / "a.db")]).stdout
    (tmp_path / "dump.jsonl").write_text(first)
    imported = runner.invoke(main, ["import", str(tmp_path / "dump.jsonl"), "--db", str(tmp_path / "b.db")])
    assert imported.exit_code == 0 and "imported 3 session(s)" in imported.stdout
    assert runner.invoke(main, ["export", "--db", str(tmp_path / "b.db")]).stdout == first
    assert first == _export(tmp_path / "a.db")


def test_the_export_carries_no_raw_control_or_bidi_character_yet_decodes_exactly(tmp_path: Path) -> None:
    _rich(tmp_path / "a.db")
    text = _export(tmp_path / "a.db")
    assert not any(c in text for c in "\x1b\x07\u202e\x9b\x7f") and UNICODE in text
    records = [json.loads(line) for line in text.splitlines()]
    assert records[0]["session"]["meta"]["hostile"] == HOSTILE


def test_a_refused_session_leaves_nothing_and_the_ones_before_it_stay(tmp_path: Path) -> None:
    _rich(tmp_path / "a.db")
    lines = _export(tmp_path / "a.db").splitlines()
    fork_at = next(i for i, line in enumerate(lines) if '"id": "fork"' in line)
    broken = lines[: fork_at + 3] + [lines[fork_at + 3].replace('"seq": 2', '"seq": 7')] + lines[fork_at + 4 :]
    with journal.open(tmp_path / "b.db") as j:
        with pytest.raises(journal.InvalidArgument, match=rf"line {fork_at + 4}: seq: 7 breaks the sequence"):
            transfer.import_lines(j, broken)
        assert [s.id for s in j.sessions()] == ["main"]  # the session before it; nothing of "fork"
        with pytest.raises(journal.SessionExists):
            transfer.import_lines(j, lines)
        assert [s.id for s in j.sessions()] == ["main"] and j.check() == []


def test_an_event_the_append_would_refuse_is_refused_by_name(tmp_path: Path) -> None:
    lines = [
        json.dumps({"session": {"id": "s"}}),
        json.dumps({"event": {"session_id": "s", "seq": 0, "type": "turn_end", "data": {"steps": "1"}, "time_ms": 1}}),
    ]
    with journal.open(tmp_path / "b.db") as j:
        with pytest.raises(journal.InvalidEvent, match="line 2: data.steps"):
            transfer.import_lines(j, lines)
        assert j.sessions() == []


def test_a_second_dispatch_of_one_call_is_refused_with_the_whole_session(tmp_path: Path) -> None:
    event = {"session_id": "s", "type": "tool_call", "data": {"id": "c", "name": "pay"}, "time_ms": 1}
    lines = [json.dumps({"session": {"id": "s"}})] + [json.dumps({"event": {**event, "seq": n}}) for n in (0, 1)]
    with journal.open(tmp_path / "b.db") as j:
        with pytest.raises(journal.AlreadyDispatched):
            transfer.import_lines(j, [line.encode() for line in lines])
        assert j.sessions() == []


IMPORT_CHILD = """
import sys, journal
from journal import transfer
with journal.open(sys.argv[1]) as j:
    transfer.import_lines(j, open(sys.argv[2], "rb"))
"""


@pytest.mark.parametrize("point", ["import.before_commit", "import.after_commit"])
def test_a_kill_at_an_import_commit_leaves_the_session_whole_or_absent(point: str, tmp_path: Path) -> None:
    _rich(tmp_path / "a.db")
    dump = tmp_path / "dump.jsonl"
    dump.write_text(_export(tmp_path / "a.db"))
    done = run_child(IMPORT_CHILD, str(tmp_path / "b.db"), str(dump), env={"JOURNAL_CRASH_AT": point})
    assert done.returncode == -signal.SIGKILL, done.stderr
    with journal.open(tmp_path / "b.db") as b, journal.open(tmp_path / "a.db", readonly=True) as a:
        assert [s.id for s in b.sessions()] == ([] if point == "import.before_commit" else ["main"])
        for s in b.sessions():
            assert b.events(s.id) == a.events(s.id)
        assert b.integrity_check() == ["ok"] and b.check() == []


def test_export_pages_through_the_sessions_oldest_first(j, monkeypatch) -> None:
    monkeypatch.setattr(transfer, "_PAGE", 2)
    for n in range(5):
        j.create_session(f"s{n}")
        j.append(f"s{n}", "user_message", {"content": f"m{n}"})
    sessions = [json.loads(line)["session"]["id"] for line in transfer.export_lines(j) if line.startswith('{"session"')]
    assert sessions == ["s0", "s1", "s2", "s3", "s4"]
