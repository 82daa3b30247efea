"""``Journal.tool_stats``: per tool, calls, results, errors, recovery's risks, indeterminate calls
and dispatch-to-result percentiles, from one statement; checked against the log itself."""

from __future__ import annotations

import math
from typing import Any

import pytest

import journal


def _workload(j: journal.Journal) -> None:
    """Three sessions: real results (one an error), a call killed mid-run, one never dispatched."""
    j.create_session("a")
    for n in range(5):
        with j.turn("a") as turn, turn.step():
            calls = [
                {"id": f"a{n}", "name": "pay", "arguments": {"n": n}},
                {"id": f"l{n}", "name": "lookup", "arguments": {}},
            ]
            turn.assistant("", tool_calls=calls)
            turn.dispatch(f"a{n}").result("paid", is_error=(n == 3))
            turn.dispatch(f"l{n}").result("found")
    j.create_session("b")
    turn = j.turn_start("b")
    turn.step_start()
    turn.assistant(
        "", tool_calls=[{"id": "b1", "name": "pay", "arguments": {}}, {"id": "b2", "name": "mail", "arguments": {}}]
    )
    turn.dispatch("b1")  # then the process dies: b1 may have run, b2 never started
    j.recover(force=True)
    j.create_session("c")
    j.fork("a", 8, id="a-fork")  # a fork's own calls only: it made none


def _expected(j: journal.Journal, sessions: list[str]) -> dict[str, dict[str, Any]]:
    """The same figures, computed from the events."""
    out: dict[str, dict[str, Any]] = {}
    for sid in sessions:
        own = [e for e in j.events(sid) if e.seq >= j.session(sid).seed_length]
        names: dict[str, str] = {}
        for e in own:
            if e.type == "assistant_message":
                for c in e.data.get("tool_calls") or []:
                    names.setdefault(c["id"], c["name"])
        dispatched = {e.data["id"]: e for e in own if e.type == "tool_call"}
        results = {}
        for e in own:
            if e.type == "tool_result":
                results.setdefault(e.data["tool_call_id"], e)
        for call_id, name in names.items():
            row = out.setdefault(name, {"calls": 0, "results": 0, "errors": 0, "may": 0, "not": 0, "ms": []})
            row["calls"] += 1
            result = results.get(call_id)
            if result is None:
                continue
            row["results"] += 1
            meta = result.data.get("metadata") or {}
            if meta.get("synthetic"):
                row["may" if meta["risk"] == "tool_outcome_unknown" else "not"] += 1
                continue
            row["errors"] += bool(result.data.get("is_error"))
            if call_id in dispatched:
                row["ms"].append(result.time_ms - dispatched[call_id].time_ms)
    return out


def _rank(values: list[int], p: int) -> int | None:
    ordered = sorted(values)
    return ordered[math.ceil(len(ordered) * p / 100) - 1] if ordered else None


def test_tool_stats_equal_what_the_log_says_per_tool_and_per_session(j: journal.Journal) -> None:
    _workload(j)
    for scope, sessions in ((None, ["a", "b", "c", "a-fork"]), ("a", ["a"]), ("b", ["b"])):
        expected = _expected(j, sessions)
        stats = j.tool_stats(scope)
        assert [s.name for s in stats] == sorted(expected, key=lambda n: (-expected[n]["calls"], n))
        for s in stats:
            e = expected[s.name]
            assert (s.calls, s.results, s.errors, s.may_have_run, s.did_not_run, s.indeterminate) == (
                e["calls"], e["results"], e["errors"], e["may"], e["not"], 0
            ), s  # fmt: skip
            assert (s.p50_ms, s.p95_ms) == (_rank(e["ms"], 50), _rank(e["ms"], 95)), s
    pay = {s.name: s for s in j.tool_stats()}["pay"]
    assert (pay.calls, pay.results, pay.errors, pay.may_have_run) == (6, 6, 1, 1)
    assert {s.name: s.did_not_run for s in j.tool_stats("b")} == {"pay": 0, "mail": 1}
    assert j.tool_stats("c") == [] and j.tool_stats("a-fork") == []


def test_an_indeterminate_call_is_counted_and_bad_arguments_are_refused(j: journal.Journal) -> None:
    j.create_session("s")
    turn = j.turn_start("s")
    turn.step_start()
    turn.assistant("", tool_calls=[{"id": "x", "name": "wire", "arguments": {}}])
    turn.dispatch("x", effect="unsafe")
    registry = journal.ToolRegistry()
    registry.register("wire", lambda **kw: None, effects=journal.Unsafe())
    j.recover(registry=registry, force=True)
    (wire,) = j.tool_stats("s")
    assert (wire.name, wire.indeterminate, wire.results) == ("wire", 1, 1)
    with pytest.raises(journal.SessionNotFound):
        j.tool_stats("nobody")
    for bad in (0, 1001, True, "5"):
        with pytest.raises(journal.InvalidArgument):
            j.tool_stats(limit=bad)  # type: ignore[arg-type]
    assert len(j.tool_stats(limit=1)) == 1


def test_journal_tools_prints_the_same_figures_and_a_hostile_tool_name_stays_text(j: journal.Journal, db_path) -> None:
    import json

    from click.testing import CliRunner

    from journal.cli import main

    _workload(j)
    j.create_session("h")
    with j.turn("h") as turn, turn.step():
        turn.assistant("", tool_calls=[{"id": "h1", "name": "\x1b[31mred\u202e<b>", "arguments": {}}])
        turn.dispatch("h1").result("ok")
    shown = CliRunner().invoke(main, ["tools", "--db", str(db_path), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == {"session_id": None, "tools": [t.to_dict() for t in j.tool_stats()]}
    lines = CliRunner().invoke(main, ["tools", "--db", str(db_path)]).output
    assert "pay: 6 call(s), 6 result(s)" in lines and "1 may have run" in lines
    assert "\x1b" not in lines and "\u202e" not in lines and "\\x1b[31mred" in lines
    assert CliRunner().invoke(main, ["tools", "b", "--db", str(db_path), "--nl"]).output.count("\n") == 2
