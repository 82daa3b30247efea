"""Export and import (journal.transfer): a round trip gives the same bytes; an import obeys every
rule an append obeys; an import is one transaction, and a refused line leaves nothing behind."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

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
        turn.assistant(
            "", tool_calls=[{"id": "c2", "name": "pay", "arguments": {}}, {"id": "c3", "name": "mail", "arguments": {}}]
        )
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


def test_g12_a_refused_line_anywhere_leaves_nothing_of_the_whole_import(tmp_path: Path) -> None:
    _rich(tmp_path / "a.db")
    lines = _export(tmp_path / "a.db").splitlines()
    fork_at = next(i for i, line in enumerate(lines) if '"id": "fork"' in line)
    broken = lines[: fork_at + 3] + [lines[fork_at + 3].replace('"seq": 2', '"seq": 7')] + lines[fork_at + 4 :]
    refusal = rf"line {fork_at + 4}: seq: 7 breaks the sequence"
    with journal.open(tmp_path / "b.db") as j, pytest.raises(journal.InvalidArgument, match=refusal):
        transfer.import_lines(j, broken)
    with journal.open(tmp_path / "b.db") as j:  # a fresh connection: not even the session before it
        assert j.sessions() == [] and j.check() == []
        assert transfer.import_lines(j, lines) == 3
        with pytest.raises(journal.SessionExists):
            transfer.import_lines(j, lines)
        assert [s.id for s in j.sessions()] == ["main", "fork", "empty"] and j.check() == []


def test_an_event_the_append_would_refuse_is_refused_by_name(tmp_path: Path) -> None:
    lines = [
        json.dumps({"session": {"id": "s"}}),
        json.dumps({"event": {"session_id": "s", "seq": 0, "type": "turn_end", "data": {"steps": "1"}, "time_ms": 1}}),
    ]
    with journal.open(tmp_path / "b.db") as j:
        with pytest.raises(journal.InvalidEvent, match=r"line 2: data\.steps"):
            transfer.import_lines(j, lines)
        assert j.sessions() == []


def test_a_second_dispatch_of_one_call_is_refused_with_the_whole_session(tmp_path: Path) -> None:
    event = {"session_id": "s", "type": "tool_call", "data": {"id": "c", "name": "pay"}, "time_ms": 1}
    turn = {"session_id": "s", "seq": 0, "type": "turn_start", "data": {"turn": 1}, "time_ms": 1}
    lines = [json.dumps({"session": {"id": "s"}}), json.dumps({"event": turn})]
    lines += [json.dumps({"event": {**event, "seq": n}}) for n in (1, 2)]
    with journal.open(tmp_path / "b.db") as j:
        with pytest.raises(journal.InvalidEvent, match=r"line 4: data\.id: .*already dispatched") as info:
            transfer.import_lines(j, [line.encode() for line in lines])
        assert isinstance(info.value.__cause__, journal.AlreadyDispatched)  # the append's own refusal
        assert j.sessions() == []


# -- import obeys the rules append obeys (G12) --------------------------------------------------------

CALL = {"id": "c1", "name": "get", "arguments": {}}
OPEN_TURN = [("turn_start", {"turn": 1}), ("step_start", {"turn": 1, "step": 1})]
ASKED = [("user_message", {"content": "hi"}), *OPEN_TURN, ("assistant_message", {"content": "", "tool_calls": [CALL]})]
DEEP = 100_000

# case -> (events before the refused one, the refused one as (type, data, key), what the refusal names)
REFUSED: dict[str, tuple[list[tuple[str, Any]], tuple[str, Any, str | None], str]] = {
    "dispatch_outside_a_turn": ([], ("tool_call", {"id": "c1", "name": "get"}, None), "type"),
    "dispatch_after_the_turn_ended": (
        [*OPEN_TURN, ("turn_end", {"turn": 1, "steps": 1, "reason": "complete"})],
        ("tool_call", {"id": "c1", "name": "get"}, None),
        "type",
    ),
    "second_dispatch_of_a_call": (
        [*ASKED, ("tool_call", {"id": "c1", "name": "get"})],
        ("tool_call", {"id": "c1", "name": "get"}, None),
        "data.id",
    ),
    "second_result_for_a_call": (
        [*ASKED, ("tool_result", {"tool_call_id": "c1", "content": "a"})],
        ("tool_result", {"tool_call_id": "c1", "content": "b"}, None),
        "data.tool_call_id",
    ),
    "unknown_type": ([], ("bogus", {}, None), "type"),
    "bad_app_type": ([], ("x. spaced", {}, None), "type"),
    "missing_required_field": ([], ("tool_result", {"content": "a"}, None), "data.tool_call_id"),
    "wrong_field_type": ([], ("step_start", {"turn": "1", "step": 1}, None), "data.turn"),
    "bad_enum": ([], ("turn_end", {"steps": 0, "reason": "bored"}, None), "data.reason"),
    "duplicate_call_ids": ([], ("assistant_message", {"content": "", "tool_calls": [CALL, CALL]}, None), "tool_calls"),
    "surface_op_on_bookkeeping": ([], ("turn_start", {"turn": 1, "surface_op": "append"}, None), "data.surface_op"),
    "malformed_surface_op": (
        [],
        ("user_message", {"content": "a", "surface_op": ["replace", 3, 1]}, None),
        "surface_op",
    ),
    "lone_surrogate_in_a_data_key": ([], ("user_message", {"content": "a", "\ud800": 1}, None), "(a key)"),
    "lone_surrogate_in_a_value": ([], ("user_message", {"content": "a\udfff"}, None), "data.content"),
    "lone_surrogate_in_the_key": ([], ("user_message", {"content": "a"}, "k\ud800"), "key"),
    "integer_past_64_bits": ([], ("x.n", {"n": 2**64}, None), "data.n"),
    "nesting_past_the_limit": ([], ("x.deep", {"v": json.loads("[" * 150 + "]" * 150)}, None), "nests deeper"),
    # Identifiers past their limits (the same on both backends: a file a server would refuse
    # is refused on import into a file too).
    "call_id_past_its_limit": (
        [],
        ("assistant_message", {"content": "", "tool_calls": [{"id": "c" * 513, "name": "get"}]}, None),
        "data.tool_calls[0].id: is 513 characters, over the limit of 512",
    ),
    "result_call_id_past_its_limit": (
        [],
        ("tool_result", {"tool_call_id": "\U0001f600" * 513, "content": "a"}, None),
        "data.tool_call_id: is 513 characters",
    ),
    "key_past_its_limit": ([], ("user_message", {"content": "a"}, "k" * 257), "key: must be a string of 1 to 256"),
    "nul_in_a_call_id": ([], ("tool_result", {"tool_call_id": "c\0", "content": "a"}, None), "NUL"),
}


def _line(seq: int, type_: str, data: Any, key: str | None = None) -> str:
    event = {"session_id": "s", "seq": seq, "type": type_, "data": data, "time_ms": 7}
    return json.dumps({"event": event if key is None else {**event, "key": key}})


def _file(events: list[tuple[str, Any]], last: tuple[str, Any, str | None] | None = None) -> list[str]:
    """A good session "ok", then session "s" with ``events`` and ``last``."""
    lines = [json.dumps({"session": {"id": "ok"}}), _line(0, "user_message", {"content": "x"}).replace('"s"', '"ok"')]
    lines.append(json.dumps({"session": {"id": "s"}}))
    lines += [_line(seq, type_, data) for seq, (type_, data) in enumerate(events)]
    if last is not None:
        lines.append(_line(len(events), *last))
    return lines


def _append_refuses(j: journal.Journal, events: list[tuple[str, Any]], last: tuple[str, Any, str | None]) -> None:
    """The same events through the append: the last one is refused and nothing of it written."""
    sid = j.create_session().id
    for type_, data in events:
        j.append(sid, type_, data)
    with pytest.raises(journal.JournalError):
        j.append(sid, last[0], last[1], key=last[2])
    assert j.count(sid) == len(events)
    j.purge(sid)


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_g12_an_event_the_append_refuses_is_refused_by_import_naming_its_line_and_nothing_is_written(
    case: str, j: journal.Journal, fresh
) -> None:
    events, last, field = REFUSED[case]
    _append_refuses(j, events, last)
    lines = _file(events, last)
    with pytest.raises((journal.InvalidEvent, journal.InvalidArgument)) as info:
        transfer.import_lines(j, lines)
    assert f"line {len(lines)}: " in str(info.value) and field in str(info.value)
    with fresh() as again:  # durability is judged through a fresh connection
        assert again.sessions() == [] and again.check() == []


def test_g12_an_event_over_the_journals_size_limit_is_refused_as_the_append_refuses_it(fresh) -> None:
    small = fresh(max_event_bytes=1000)
    big = ("user_message", {"content": "x" * 2000}, None)
    _append_refuses(small, [], big)
    with pytest.raises(journal.InvalidEvent, match=r"line 4: data: encodes to \d+ bytes, over the limit of 1000"):
        transfer.import_lines(small, _file([], big))
    assert fresh().sessions() == []
    assert transfer.import_lines(fresh(), _file([], big)) == 2  # the default limit takes it


def test_g12_a_line_longer_than_any_record_is_refused_before_it_is_read_whole(fresh, tmp_path: Path) -> None:
    small = fresh(max_event_bytes=1000)
    dump = tmp_path / "dump.jsonl"
    fits = _line(0, "user_message", {"content": "\x7f" * 900})  # six bytes a character in the line
    dump.write_text("\n".join([*_file([]), fits, _line(1, "user_message", {"content": "x" * 200_000})]) + "\n")
    with dump.open("rb") as source, pytest.raises(journal.InvalidEvent, match="line 5: is longer than 71536 bytes"):
        transfer.import_file(small, source)
    assert fresh().sessions() == []
    dump.write_text("\n".join([*_file([]), fits]) + "\n")
    with dump.open("rb") as source:
        assert transfer.import_file(small, source) == 2


def test_g12_json_nested_100000_deep_is_an_invalid_event_not_a_recursion_error(j: journal.Journal, fresh) -> None:
    deep = "[" * DEEP + "]" * DEEP
    lines = _file([]) + [
        '{"event": {"session_id": "s", "seq": 0, "type": "x.deep", "data": {"v": ' + deep + '}, "time_ms": 1}}'
    ]
    with pytest.raises(journal.InvalidEvent, match="line 4: nests deeper than the limit of 100 levels"):
        transfer.import_lines(j, lines)
    for line in (f'{{"session": {{"id": "m", "meta": {{"v": {deep}}}}}}}', deep):
        with pytest.raises(journal.InvalidEvent, match="line 1: nests deeper"):
            transfer.import_lines(j, [line])
    assert fresh().sessions() == []


def _nested(depth: int) -> dict[str, Any]:
    """Event data whose arrays and objects nest ``depth`` levels (the data object is one)."""
    return {"v": json.loads("[" * (depth - 1) + "]" * (depth - 1))}


def test_g12_nesting_at_the_limit_imports_and_one_level_more_is_refused_as_the_append_refuses_it(
    j: journal.Journal,
) -> None:
    j.create_session("a")
    j.append("a", "x.deep", _nested(100))
    with pytest.raises(journal.InvalidEvent, match="nests deeper"):
        j.append("a", "x.deep", _nested(101))
    with pytest.raises(journal.InvalidEvent, match="line 4: nests deeper than the limit of 100 levels"):
        transfer.import_lines(j, _file([("x.deep", _nested(101))]))
    assert [s.id for s in j.sessions()] == ["a"]
    assert transfer.import_lines(j, _file([("x.deep", _nested(100))])) == 2
    assert j.events("s")[0].data == _nested(100)


def test_g12_a_retract_is_imported_only_as_retract_wrote_it(j: journal.Journal, fresh) -> None:
    said = [("user_message", {"content": "a"}), ("user_message", {"content": "b"})]
    for data in ({"seq": 0}, {"seq": 5}):  # not the transcript's last message
        with pytest.raises(journal.InvalidEvent, match=r"line 6: data\.seq: must name the transcript's last message"):
            transfer.import_lines(j, _file(said, ("retract", data, None)))
    with pytest.raises(journal.InvalidEvent, match="line 4: type: a retract with no message"):
        transfer.import_lines(j, _file([], ("retract", {"seq": 0}, None)))
    assert fresh().sessions() == []
    # What retract() wrote comes back whole: twice, then after a compaction.
    j.create_session("r")
    for n in range(4):
        j.append("r", "user_message", {"content": f"m{n}"})
    j.retract("r")
    j.compact("r", 0, 1, "summary")
    j.retract("r")
    lines = [line.replace('"r"', '"r2"') for line in transfer.export_lines(j, ["r"])]
    assert transfer.import_lines(j, lines) == 1
    assert [m.content for m in j.messages("r2")] == [m.content for m in j.messages("r")] == ["summary"]
    assert j.check() == []


def test_g12_time_past_the_engines_clock_is_refused(j: journal.Journal) -> None:
    line = _line(0, "user_message", {"content": "a"}).replace('"time_ms": 7', f'"time_ms": {2**60}')
    with pytest.raises(journal.InvalidArgument, match="line 4: time_ms"):
        transfer.import_lines(j, _file([]) + [line])
    assert j.sessions() == []


def test_g12_the_command_line_refuses_an_import_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    runner = CliRunner()
    db = tmp_path / "j.db"
    cases = {
        "dispatch": (_file([], ("tool_call", {"id": "c1", "name": "get"}, None)), "only inside an open turn"),
        "deep": (_file([]) + ["[" * DEEP + "]" * DEEP], "line 4: nests deeper than the limit"),
        "surrogate": (_file([], ("user_message", {"content": "a"}, "k\ud800")), "lone surrogate"),
    }
    for name, (lines, says) in cases.items():
        dump = tmp_path / f"{name}.jsonl"
        dump.write_text("\n".join(lines) + "\n")
        done = runner.invoke(main, ["import", str(dump), "--db", str(db)])
        err = done.stderr if hasattr(done, "stderr") and done.stderr else done.output
        assert done.exit_code == 1, (name, done.output)
        assert err.startswith("journal: ") and err.count("\n") == 1 and says in err, (name, err)
        assert "Traceback" not in done.output and "unexpected" not in done.output
        with journal.open(db, readonly=True) as j:
            assert j.sessions() == []


IMPORT_CHILD = """
import sys, journal
from journal import transfer
with journal.open(sys.argv[1]) as j:
    transfer.import_lines(j, open(sys.argv[2], "rb"))
"""


@pytest.mark.parametrize("point", ["import.before_commit", "import.after_commit"])
def test_g2_a_kill_at_the_import_commit_leaves_the_import_whole_or_absent(point: str, tmp_path: Path) -> None:
    _rich(tmp_path / "a.db")
    dump = tmp_path / "dump.jsonl"
    dump.write_text(_export(tmp_path / "a.db"))
    done = run_child(IMPORT_CHILD, str(tmp_path / "b.db"), str(dump), env={"JOURNAL_CRASH_AT": point})
    assert done.returncode == -signal.SIGKILL, done.stderr
    with journal.open(tmp_path / "b.db") as b, journal.open(tmp_path / "a.db", readonly=True) as a:
        # One transaction for the whole file: before its commit nothing, after it everything.
        assert [s.id for s in b.sessions()] == ([] if point == "import.before_commit" else ["main", "fork", "empty"])
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
