"""The recovery planner (DESIGN §7(2) "Close policy"; G8 honest, idempotent recovery; G9)."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from hypothesis import given, settings

from journal.model import Event, Risk
from journal.pure.plan import Repair, interrupted, open_turns, plan
from tests.builders import dispatch, log, result, step_end, step_start, tool_use, turn_end, turn_start, user
from tests.strategies import turn_logs

NOT_STARTED = Risk.TOOL_NOT_STARTED.value
UNKNOWN = Risk.TOOL_OUTCOME_UNKNOWN.value


# -- applying and summarising a plan -------------------------------------------------------------


def apply(events: list[Event], repairs: list[Repair]) -> list[Event]:
    """What ``recover`` does: append the repairs with seqs continuing."""
    n = len(events)
    return events + [Event("s", n + i, r.type, r.data, 0) for i, r in enumerate(repairs)]


def summary(repairs: list[Repair]) -> list[tuple[Any, ...]]:
    """The parts of a plan a case pins: results as (id, risk), turn ends as (turn, steps)."""
    out: list[tuple[Any, ...]] = []
    for r in repairs:
        if r.type == "tool_result":
            out.append(("result", r.data["tool_call_id"], r.data["metadata"]["risk"]))
        else:
            assert r.type == "turn_end" and r.data["reason"] == "interrupted"
            out.append(("end", r.data.get("turn", "-"), r.data["steps"]))
    return out


# -- risk rules ----------------------------------------------------------------------------------

RISK_CASES = [
    pytest.param(
        [turn_start(), step_start(), tool_use("a"), dispatch("a")],
        [("result", "a", UNKNOWN), ("end", 1, 1)],
        id="rule1-dispatched-without-result-may-have-run",
    ),
    pytest.param(
        [turn_start(), step_start(), tool_use("a"), dispatch("a"), step_end()],
        [("result", "a", UNKNOWN), ("end", 1, 1)],
        id="rule1-dispatch-wins-even-when-its-step-closed",
    ),
    pytest.param(
        [turn_start(), step_start(), tool_use("a", "b"), dispatch("a"), dispatch("b"), result("b", "done")],
        [("result", "a", UNKNOWN), ("end", 1, 1)],
        id="rule1-beats-rule2-when-siblings-were-dispatched-too",
    ),
    pytest.param(
        [turn_start(1), step_start(), tool_use("a"), step_end(), turn_start(2), dispatch("a")],
        [("end", 2, 0), ("result", "a", UNKNOWN), ("end", 1, 1)],
        id="rule1-beats-rule3-with-a-dispatch-recorded-elsewhere-in-the-log",
    ),
    pytest.param(
        [turn_start(), step_start(), tool_use("a", "b"), dispatch("a"), result("a", "done")],
        [("result", "b", NOT_STARTED), ("end", 1, 1)],
        id="rule2-sibling-dispatched-so-this-one-never-started",
    ),
    pytest.param(
        [turn_start(), step_start(), tool_use("a", "b", "c"), dispatch("a")],
        [("result", "a", UNKNOWN), ("result", "b", NOT_STARTED), ("result", "c", NOT_STARTED), ("end", 1, 1)],
        id="rule1-and-rule2-in-one-batch",
    ),
    pytest.param(
        [
            turn_start(),
            step_start(),
            tool_use("x"),
            dispatch("x"),
            result("x", "done"),
            step_end(),
            step_start(2),
            tool_use("a"),
        ],
        [("result", "a", NOT_STARTED), ("end", 1, 2)],
        id="rule2-dispatch-in-an-earlier-step-of-the-same-turn-counts",
    ),
    pytest.param(
        [turn_start(), step_start(), tool_use("a"), step_end()],
        [("result", "a", NOT_STARTED), ("end", 1, 1)],
        id="rule3-no-dispatches-and-the-step-closed",
    ),
    pytest.param(
        [turn_start(), step_start(), tool_use("a"), step_end(), step_start(2)],
        [("result", "a", NOT_STARTED), ("end", 1, 2)],
        id="rule3-the-enclosing-step-closed-though-a-later-one-is-open",
    ),
    pytest.param(
        [turn_start(), step_start(), tool_use("a")],
        [("result", "a", UNKNOWN), ("end", 1, 1)],
        id="rule4-no-dispatches-and-the-step-still-open",
    ),
    pytest.param(
        [turn_start(), tool_use("a")],
        [("result", "a", UNKNOWN), ("end", 1, 0)],
        id="rule4-no-step-at-all",
    ),
    pytest.param(
        [turn_start(), step_start(), step_end(), step_start(2), tool_use("a")],
        [("result", "a", UNKNOWN), ("end", 1, 2)],
        id="rule4-an-earlier-closed-step-is-not-the-enclosing-one",
    ),
    pytest.param(
        [
            turn_start(1),
            step_start(),
            tool_use("x"),
            dispatch("x"),
            result("x", "done"),
            step_end(),
            turn_end(1),
            turn_start(2),
            step_start(),
            tool_use("a"),
        ],
        [("result", "a", UNKNOWN), ("end", 2, 1)],
        id="rule4-dispatches-of-another-turn-are-no-evidence",
    ),
]


@pytest.mark.parametrize(("events", "expected"), RISK_CASES)
def test_risk_of_an_owed_call_follows_the_first_matching_rule(events, expected):
    assert summary(plan(log(*events))) == expected


# -- what is repaired and what is left alone -----------------------------------------------------

SCOPE_CASES = [
    pytest.param([], [], id="empty-log"),
    pytest.param([user(), tool_use("a"), dispatch("a")], [], id="no-turns-at-all-no-repair"),
    pytest.param(
        [turn_start(), step_start(), tool_use("a"), dispatch("a"), turn_end()], [], id="closed-turn-owing-a-result"
    ),
    pytest.param(
        [turn_start(), step_start(), tool_use("a"), step_end(), turn_end(), user()], [], id="clean-log-dangling-call"
    ),
    pytest.param(
        [tool_use("a"), dispatch("a"), turn_start(), step_start()],
        [("end", 1, 1)],
        id="call-first-seen-outside-any-turn-not-repaired",
    ),
    pytest.param(
        [turn_start(1), tool_use("a"), turn_end(1), turn_start(2), step_start(), tool_use("a")],
        [("end", 2, 1)],
        id="call-first-seen-in-a-closed-turn-belongs-to-it",
    ),
    pytest.param(
        [turn_start(1), tool_use("a"), turn_end(1), turn_start(2), step_start(), dispatch("a")],
        [("result", "a", UNKNOWN), ("end", 2, 1)],
        id="call-a-closed-turn-left-owed-and-the-orphan-dispatched-is-the-orphans",  # resumed after an approval
    ),
    pytest.param(
        [turn_start(1), step_start(), tool_use("a"), dispatch("a"), turn_start(2), result("a", "done"), turn_end(2)],
        [("end", 1, 1)],
        id="result-given-after-the-crash-not-repaired-again",
    ),
    pytest.param(
        [result("a", "done"), turn_start(), step_start(), tool_use("a")],
        [("end", 1, 1)],
        id="result-given-before-the-call-answers-it",
    ),
    pytest.param(
        [
            turn_start(),
            step_start(),
            tool_use("a", "b"),
            dispatch("a"),
            result("a", "done"),
            dispatch("b"),
            result("b", "done"),
        ],
        [("end", 1, 1)],
        id="orphan-with-every-call-answered-gets-only-its-turn-end",
    ),
    pytest.param(
        [turn_start(1), step_start(), tool_use("a"), turn_start(2), step_start(), step_start(2), tool_use("b")],
        [("result", "b", UNKNOWN), ("end", 2, 2), ("result", "a", UNKNOWN), ("end", 1, 1)],
        id="nested-orphans-innermost-first",
    ),
    pytest.param(
        [turn_start(1), step_start(), tool_use("a"), turn_start(2), dispatch("a")],
        [("end", 2, 0), ("result", "a", UNKNOWN), ("end", 1, 1)],
        id="nested-call-belongs-to-the-turn-of-its-first-sighting-not-of-its-dispatch",
    ),
    pytest.param(
        [turn_start(), step_start(), tool_use("c", "a"), tool_use("b", "a"), step_end()],
        [("result", "c", NOT_STARTED), ("result", "a", NOT_STARTED), ("result", "b", NOT_STARTED), ("end", 1, 1)],
        id="results-in-the-order-calls-were-first-seen",
    ),
    pytest.param(
        [turn_start(), step_start(), dispatch("b"), tool_use("a", "b")],
        [("result", "b", UNKNOWN), ("result", "a", NOT_STARTED), ("end", 1, 1)],
        id="a-dispatch-is-a-sighting-too",
    ),
    pytest.param(
        [turn_start(), step_start(), tool_use("a", "a"), dispatch("a"), dispatch("a")],
        [("result", "a", UNKNOWN), ("end", 1, 1)],
        id="a-repeated-id-is-owed-once",
    ),
]


@pytest.mark.parametrize(("events", "expected"), SCOPE_CASES)
def test_plan_repairs_only_what_an_orphaned_turn_owes(events, expected):
    assert summary(plan(log(*events))) == expected


@pytest.mark.parametrize(
    "start_data",
    [
        pytest.param({}, id="missing"),
        pytest.param({"turn": None}, id="null"),
        pytest.param({"turn": "1"}, id="string"),
        pytest.param({"turn": 1.0}, id="float"),
        pytest.param({"turn": True}, id="bool-is-not-an-integer"),
        pytest.param(None, id="data-not-an-object"),
    ],
)
def test_turn_end_of_an_orphan_without_an_integer_turn_omits_turn(start_data):
    (end,) = plan(log(("turn_start", start_data), step_start(), step_start(2)))
    assert end == Repair("turn_end", {"steps": 2, "reason": "interrupted"})


def test_turn_end_of_an_orphan_carries_its_turn_and_step_count():
    (end,) = plan(log(turn_start(7), step_start(), step_end(), step_start(2), step_end(2), step_start(3)))
    assert end.type == "turn_end"
    assert end.data == {"turn": 7, "steps": 3, "reason": "interrupted"}


def test_nested_turns_count_only_their_own_steps():
    events = log(
        turn_start(1),
        step_start(),
        step_end(),
        step_start(2),
        turn_start(2),
        step_start(),
        step_end(),
        step_start(2),
        step_end(2),
        step_start(3),
    )
    assert summary(plan(events)) == [("end", 2, 3), ("end", 1, 2)]


def test_open_turns_lists_orphans_innermost_first():
    events = log(turn_start(1), turn_end(1), turn_start(2), step_start(), turn_start(3), turn_start(4), turn_end(4))
    assert [e.seq for e in open_turns(events)] == [4, 2]
    assert interrupted(events)


def test_a_log_whose_turns_all_closed_is_not_interrupted():
    assert not interrupted(log(turn_start(1), turn_end(1), user(), turn_start(2), turn_end(2)))
    assert not interrupted([])


def test_stray_turn_end_is_ignored_with_a_warning_naming_its_seq(caplog):
    events = log(turn_start(1), turn_end(1), user(), turn_end(1), turn_start(2), step_start(), tool_use("a"))
    with caplog.at_level(logging.WARNING, logger="journal.recovery"):
        turns = open_turns(events)
    assert [e.seq for e in turns] == [4]  # the stray end closed nothing, so turn 2 is open
    stray = [r for r in caplog.records if r.name == "journal.recovery"]
    assert len(stray) == 1 and stray[0].levelno == logging.WARNING
    assert "seq 3" in stray[0].getMessage()
    assert summary(plan(events)) == [("result", "a", UNKNOWN), ("end", 2, 1)]


def test_a_clean_log_with_no_stray_turn_end_logs_nothing(caplog):
    with caplog.at_level(logging.DEBUG, logger="journal.recovery"):
        plan(log(turn_start(), step_start(), tool_use("a"), step_end(), turn_end()))
    assert not caplog.records


# -- the synthetic result ------------------------------------------------------------------------


def test_synthetic_result_has_the_documented_shape():
    (result, end) = plan(log(turn_start(), step_start(), tool_use("call_9"), dispatch("call_9")))
    assert result.type == "tool_result"
    assert set(result.data) == {"tool_call_id", "name", "content", "is_error", "metadata"}
    assert result.data["tool_call_id"] == "call_9"
    assert result.data["name"] == "tool_call_9"
    assert result.data["is_error"] is True
    assert result.data["metadata"] == {"synthetic": True, "risk": UNKNOWN, "source": "recovery"}
    assert result.tool_call_id == "call_9" and result.risk is Risk.TOOL_OUTCOME_UNKNOWN
    assert end.tool_call_id is None and end.risk is None


def test_synthetic_result_leaves_out_a_name_nobody_gave():
    events = log(turn_start(), step_start(), ("assistant_message", {"content": "", "tool_calls": [{"id": "a"}]}))
    (result, _end) = plan(events)
    assert "name" not in result.data
    assert "'a'" in result.data["content"]


def test_synthetic_result_takes_the_name_from_a_later_sighting():
    events = log(
        turn_start(),
        step_start(),
        ("assistant_message", {"content": "", "tool_calls": [{"id": "a"}]}),
        ("tool_call", {"id": "a", "name": "charge_card"}),
    )
    assert plan(events)[0].data["name"] == "charge_card"


def test_text_for_a_call_that_did_not_start_says_it_had_no_side_effects():
    (result, _end) = plan(log(turn_start(), step_start(), tool_use("call_7"), step_end()))
    text = result.data["content"]
    assert result.risk is Risk.TOOL_NOT_STARTED
    assert "did not run and had no side effects" in text
    assert "call_7" in text and "tool_call_7" in text
    assert "MAY have run" not in text


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([turn_start(), step_start(), tool_use("call_7"), dispatch("call_7"), step_end()], id="rule1"),
        pytest.param([turn_start(), step_start(), tool_use("call_7")], id="rule4"),
    ],
)
def test_text_for_an_unknown_outcome_says_verify_and_never_no_side_effects(events):
    (result, _end) = plan(log(*events))
    text = result.data["content"]
    assert result.risk is Risk.TOOL_OUTCOME_UNKNOWN
    assert "MAY have run" in text and "verify before retrying" in text
    assert "no side effects" not in text
    assert "call_7" in text and "tool_call_7" in text


# -- garbage -------------------------------------------------------------------------------------


def test_plan_skips_what_cannot_be_a_call_id_and_keeps_the_rest():
    garbage_calls = [
        "not a dict",
        None,
        3,
        {},
        {"id": None},
        {"id": 12},
        {"id": ""},
        {"id": ["a"]},
        {"id": "ok", "name": 5},
    ]
    events = log(
        turn_start(),
        step_start(),
        ("assistant_message", {"content": "", "tool_calls": garbage_calls}),
        ("assistant_message", {"content": "", "tool_calls": "nope"}),
        ("assistant_message", None),
        ("tool_call", {"id": 4, "name": "x"}),
        ("tool_call", "garbage"),
        ("tool_result", {"tool_call_id": 12, "content": ""}),
        ("tool_result", []),
        ("step_end", None),
    )
    repairs = plan(events)
    assert summary(repairs) == [("result", "ok", NOT_STARTED), ("end", 1, 1)]
    assert "name" not in repairs[0].data  # a non-string name is not a name


# -- properties ----------------------------------------------------------------------------------

_PROPERTY = settings(max_examples=300, deadline=None, database=None)


@_PROPERTY
@given(turn_logs)
def test_plan_never_raises_and_is_deterministic(events):
    first = plan(events)
    assert plan(events) == first
    assert plan(copy.deepcopy(events)) == first
    assert all(r.type in ("tool_result", "turn_end") for r in first)
    assert bool(first) == interrupted(events)
    assert sum(r.type == "turn_end" for r in first) == len(open_turns(events))


@_PROPERTY
@given(turn_logs)
def test_applied_plan_closes_every_turn_and_leaves_earlier_events_unchanged(events):
    before = copy.deepcopy(events)
    repaired = apply(events, plan(events))
    assert repaired[: len(events)] == before
    assert events == before
    assert not interrupted(repaired)
    assert open_turns(repaired) == []


@_PROPERTY
@given(turn_logs)
def test_applying_the_plan_twice_appends_nothing_the_second_time(events):
    once = apply(events, plan(events))
    assert plan(once) == []
    assert apply(once, plan(once)) == once


@_PROPERTY
@given(turn_logs)
def test_plan_writes_at_most_one_result_per_call_and_never_for_an_answered_one(events):
    answered = {
        e.data["tool_call_id"]
        for e in events
        if e.type == "tool_result" and isinstance(e.data, dict) and isinstance(e.data.get("tool_call_id"), str)
    }
    ids = [r.data["tool_call_id"] for r in plan(events) if r.type == "tool_result"]
    assert len(ids) == len(set(ids))
    assert not set(ids) & answered
    for r in plan(events):
        if r.risk is Risk.TOOL_OUTCOME_UNKNOWN:
            assert "no side effects" not in r.data["content"]
