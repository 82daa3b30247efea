"""The recovery planner (DESIGN §7(2) "Close policy"; G8 honest, idempotent recovery; G9)."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal.model import Event, Risk
from journal.recovery import Repair, interrupted, open_turns, plan

NOT_STARTED = Risk.TOOL_NOT_STARTED.value
UNKNOWN = Risk.TOOL_OUTCOME_UNKNOWN.value


# -- building logs -------------------------------------------------------------------------------


def log(*specs: tuple[str, Any]) -> list[Event]:
    """A session's log from ``(type, data)`` pairs; seq equals the index."""
    return [Event("s", i, kind, data, 0) for i, (kind, data) in enumerate(specs)]


def ts(turn: Any = 1) -> tuple[str, Any]:
    return ("turn_start", {"turn": turn})


def te(turn: int = 1) -> tuple[str, Any]:
    return ("turn_end", {"turn": turn, "steps": 1, "reason": "complete"})


def ss(step: int = 1) -> tuple[str, Any]:
    return ("step_start", {"turn": 1, "step": step})


def se(step: int = 1) -> tuple[str, Any]:
    return ("step_end", {"turn": 1, "step": step, "outcome": "ok"})


def asst(*ids: str) -> tuple[str, Any]:
    calls = [{"id": i, "name": f"tool_{i}", "arguments": {}} for i in ids]
    return ("assistant_message", {"content": "", "tool_calls": calls, "stop_reason": "tool_use"})


def disp(call_id: str) -> tuple[str, Any]:
    return ("tool_call", {"id": call_id, "name": f"tool_{call_id}"})


def res(call_id: str) -> tuple[str, Any]:
    return ("tool_result", {"tool_call_id": call_id, "content": "done"})


def user() -> tuple[str, Any]:
    return ("user_message", {"content": "hi"})


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
        [ts(), ss(), asst("a"), disp("a")],
        [("result", "a", UNKNOWN), ("end", 1, 1)],
        id="rule1-dispatched-without-result-may-have-run",
    ),
    pytest.param(
        [ts(), ss(), asst("a"), disp("a"), se()],
        [("result", "a", UNKNOWN), ("end", 1, 1)],
        id="rule1-dispatch-wins-even-when-its-step-closed",
    ),
    pytest.param(
        [ts(), ss(), asst("a", "b"), disp("a"), disp("b"), res("b")],
        [("result", "a", UNKNOWN), ("end", 1, 1)],
        id="rule1-beats-rule2-when-siblings-were-dispatched-too",
    ),
    pytest.param(
        [ts(1), ss(), asst("a"), se(), ts(2), disp("a")],
        [("end", 2, 0), ("result", "a", UNKNOWN), ("end", 1, 1)],
        id="rule1-beats-rule3-with-a-dispatch-recorded-elsewhere-in-the-log",
    ),
    pytest.param(
        [ts(), ss(), asst("a", "b"), disp("a"), res("a")],
        [("result", "b", NOT_STARTED), ("end", 1, 1)],
        id="rule2-sibling-dispatched-so-this-one-never-started",
    ),
    pytest.param(
        [ts(), ss(), asst("a", "b", "c"), disp("a")],
        [("result", "a", UNKNOWN), ("result", "b", NOT_STARTED), ("result", "c", NOT_STARTED),
         ("end", 1, 1)],
        id="rule1-and-rule2-in-one-batch",
    ),
    pytest.param(
        [ts(), ss(), asst("x"), disp("x"), res("x"), se(), ss(2), asst("a")],
        [("result", "a", NOT_STARTED), ("end", 1, 2)],
        id="rule2-dispatch-in-an-earlier-step-of-the-same-turn-counts",
    ),
    pytest.param(
        [ts(), ss(), asst("a"), se()],
        [("result", "a", NOT_STARTED), ("end", 1, 1)],
        id="rule3-no-dispatches-and-the-step-closed",
    ),
    pytest.param(
        [ts(), ss(), asst("a"), se(), ss(2)],
        [("result", "a", NOT_STARTED), ("end", 1, 2)],
        id="rule3-the-enclosing-step-closed-though-a-later-one-is-open",
    ),
    pytest.param(
        [ts(), ss(), asst("a")],
        [("result", "a", UNKNOWN), ("end", 1, 1)],
        id="rule4-no-dispatches-and-the-step-still-open",
    ),
    pytest.param(
        [ts(), asst("a")],
        [("result", "a", UNKNOWN), ("end", 1, 0)],
        id="rule4-no-step-at-all",
    ),
    pytest.param(
        [ts(), ss(), se(), ss(2), asst("a")],
        [("result", "a", UNKNOWN), ("end", 1, 2)],
        id="rule4-an-earlier-closed-step-is-not-the-enclosing-one",
    ),
    pytest.param(
        [ts(1), ss(), asst("x"), disp("x"), res("x"), se(), te(1), ts(2), ss(), asst("a")],
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
    pytest.param([user(), asst("a"), disp("a")], [], id="no-turns-at-all-no-repair"),
    pytest.param([ts(), ss(), asst("a"), disp("a"), te()], [], id="closed-turn-owing-a-result"),
    pytest.param([ts(), ss(), asst("a"), se(), te(), user()], [], id="clean-log-dangling-call"),
    pytest.param(
        [asst("a"), disp("a"), ts(), ss()],
        [("end", 1, 1)],
        id="call-first-seen-outside-any-turn-not-repaired",
    ),
    pytest.param(
        [ts(1), asst("a"), te(1), ts(2), ss(), asst("a"), disp("a")],
        [("end", 2, 1)],
        id="call-first-seen-in-a-closed-turn-belongs-to-it",
    ),
    pytest.param(
        [ts(1), ss(), asst("a"), disp("a"), ts(2), res("a"), te(2)],
        [("end", 1, 1)],
        id="result-given-after-the-crash-not-repaired-again",
    ),
    pytest.param(
        [res("a"), ts(), ss(), asst("a")],
        [("end", 1, 1)],
        id="result-given-before-the-call-answers-it",
    ),
    pytest.param(
        [ts(), ss(), asst("a", "b"), disp("a"), res("a"), disp("b"), res("b")],
        [("end", 1, 1)],
        id="orphan-with-every-call-answered-gets-only-its-turn-end",
    ),
    pytest.param(
        [ts(1), ss(), asst("a"), ts(2), ss(), ss(2), asst("b")],
        [("result", "b", UNKNOWN), ("end", 2, 2), ("result", "a", UNKNOWN), ("end", 1, 1)],
        id="nested-orphans-innermost-first",
    ),
    pytest.param(
        [ts(1), ss(), asst("a"), ts(2), disp("a")],
        [("end", 2, 0), ("result", "a", UNKNOWN), ("end", 1, 1)],
        id="nested-call-belongs-to-the-turn-of-its-first-sighting-not-of-its-dispatch",
    ),
    pytest.param(
        [ts(), ss(), asst("c", "a"), asst("b", "a"), se()],
        [("result", "c", NOT_STARTED), ("result", "a", NOT_STARTED),
         ("result", "b", NOT_STARTED), ("end", 1, 1)],
        id="results-in-the-order-calls-were-first-seen",
    ),
    pytest.param(
        [ts(), ss(), disp("b"), asst("a", "b")],
        [("result", "b", UNKNOWN), ("result", "a", NOT_STARTED), ("end", 1, 1)],
        id="a-dispatch-is-a-sighting-too",
    ),
    pytest.param(
        [ts(), ss(), asst("a", "a"), disp("a"), disp("a")],
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
    (end,) = plan(log(("turn_start", start_data), ss(), ss(2)))
    assert end == Repair("turn_end", {"steps": 2, "reason": "interrupted"})


def test_turn_end_of_an_orphan_carries_its_turn_and_step_count():
    (end,) = plan(log(ts(7), ss(), se(), ss(2), se(2), ss(3)))
    assert end.type == "turn_end"
    assert end.data == {"turn": 7, "steps": 3, "reason": "interrupted"}


def test_nested_turns_count_only_their_own_steps():
    events = log(ts(1), ss(), se(), ss(2), ts(2), ss(), se(), ss(2), se(2), ss(3))
    assert summary(plan(events)) == [("end", 2, 3), ("end", 1, 2)]


def test_open_turns_lists_orphans_innermost_first():
    events = log(ts(1), te(1), ts(2), ss(), ts(3), ts(4), te(4))
    assert [e.seq for e in open_turns(events)] == [4, 2]
    assert interrupted(events)


def test_a_log_whose_turns_all_closed_is_not_interrupted():
    assert not interrupted(log(ts(1), te(1), user(), ts(2), te(2)))
    assert not interrupted([])


def test_stray_turn_end_is_ignored_with_a_warning_naming_its_seq(caplog):
    events = log(ts(1), te(1), user(), te(1), ts(2), ss(), asst("a"))
    with caplog.at_level(logging.WARNING, logger="journal.recovery"):
        turns = open_turns(events)
    assert [e.seq for e in turns] == [4]  # the stray end closed nothing, so turn 2 is open
    stray = [r for r in caplog.records if r.name == "journal.recovery"]
    assert len(stray) == 1 and stray[0].levelno == logging.WARNING
    assert "seq 3" in stray[0].getMessage()
    assert summary(plan(events)) == [("result", "a", UNKNOWN), ("end", 2, 1)]


def test_a_clean_log_with_no_stray_turn_end_logs_nothing(caplog):
    with caplog.at_level(logging.DEBUG, logger="journal.recovery"):
        plan(log(ts(), ss(), asst("a"), se(), te()))
    assert not caplog.records


# -- the synthetic result ------------------------------------------------------------------------


def test_synthetic_result_has_the_documented_shape():
    (result, end) = plan(log(ts(), ss(), asst("call_9"), disp("call_9")))
    assert result.type == "tool_result"
    assert set(result.data) == {"tool_call_id", "name", "content", "is_error", "metadata"}
    assert result.data["tool_call_id"] == "call_9"
    assert result.data["name"] == "tool_call_9"
    assert result.data["is_error"] is True
    assert result.data["metadata"] == {"synthetic": True, "risk": UNKNOWN, "source": "recovery"}
    assert result.tool_call_id == "call_9" and result.risk is Risk.TOOL_OUTCOME_UNKNOWN
    assert end.tool_call_id is None and end.risk is None


def test_synthetic_result_leaves_out_a_name_nobody_gave():
    events = log(ts(), ss(), ("assistant_message", {"content": "", "tool_calls": [{"id": "a"}]}))
    (result, _end) = plan(events)
    assert "name" not in result.data
    assert "'a'" in result.data["content"]


def test_synthetic_result_takes_the_name_from_a_later_sighting():
    events = log(
        ts(), ss(), ("assistant_message", {"content": "", "tool_calls": [{"id": "a"}]}),
        ("tool_call", {"id": "a", "name": "charge_card"}),
    )
    assert plan(events)[0].data["name"] == "charge_card"


def test_text_for_a_call_that_did_not_start_says_it_had_no_side_effects():
    (result, _end) = plan(log(ts(), ss(), asst("call_7"), se()))
    text = result.data["content"]
    assert result.risk is Risk.TOOL_NOT_STARTED
    assert "did not run and had no side effects" in text
    assert "call_7" in text and "tool_call_7" in text
    assert "MAY have run" not in text


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([ts(), ss(), asst("call_7"), disp("call_7"), se()], id="rule1"),
        pytest.param([ts(), ss(), asst("call_7")], id="rule4"),
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
        "not a dict", None, 3, {}, {"id": None}, {"id": 12}, {"id": ""}, {"id": ["a"]},
        {"id": "ok", "name": 5},
    ]
    events = log(
        ts(), ss(),
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

_garbage = st.none() | st.integers(-2, 2) | st.booleans() | st.text(max_size=2) | st.just([1])
_ids = st.sampled_from(["c1", "c2", "c3", "c4"]) | _garbage
_names = st.sampled_from(["pay", "rm", "search"]) | _garbage
_tool_call_entries = (
    st.fixed_dictionaries({"id": _ids, "name": _names, "arguments": st.just({})})
    | st.fixed_dictionaries({}, optional={"id": _ids})
    | _garbage
)
_specs = st.one_of(
    st.tuples(
        st.just("turn_start"),
        st.fixed_dictionaries({}, optional={"turn": st.integers(1, 4) | _garbage}) | _garbage,
    ),
    st.tuples(st.just("turn_end"), st.just({"turn": 1, "steps": 1, "reason": "complete"})),
    st.tuples(st.just("step_start"), st.just({"turn": 1, "step": 1})),
    st.tuples(st.just("step_end"), st.just({"turn": 1, "step": 1, "outcome": "ok"})),
    st.tuples(
        st.just("assistant_message"),
        st.fixed_dictionaries(
            {"content": st.just("")},
            optional={"tool_calls": st.lists(_tool_call_entries, max_size=3) | _garbage},
        ),
    ),
    st.tuples(st.just("tool_call"), st.fixed_dictionaries({"id": _ids, "name": _names}) | _garbage),
    st.tuples(
        st.just("tool_result"),
        st.fixed_dictionaries({"tool_call_id": _ids, "content": st.just("ok")}) | _garbage,
    ),
    st.tuples(
        st.sampled_from(["user_message", "x.note", "tool_result_late"]), st.just({"content": ""})
    ),
)
sessions = st.lists(_specs, max_size=30).map(lambda specs: log(*specs))

_PROPERTY = settings(max_examples=300, deadline=None, database=None)


@_PROPERTY
@given(sessions)
def test_plan_never_raises_and_is_deterministic(events):
    first = plan(events)
    assert plan(events) == first
    assert plan(copy.deepcopy(events)) == first
    assert all(r.type in ("tool_result", "turn_end") for r in first)
    assert bool(first) == interrupted(events)
    assert sum(r.type == "turn_end" for r in first) == len(open_turns(events))


@_PROPERTY
@given(sessions)
def test_applied_plan_closes_every_turn_and_leaves_earlier_events_unchanged(events):
    before = copy.deepcopy(events)
    repaired = apply(events, plan(events))
    assert repaired[: len(events)] == before
    assert events == before
    assert not interrupted(repaired)
    assert open_turns(repaired) == []


@_PROPERTY
@given(sessions)
def test_applying_the_plan_twice_appends_nothing_the_second_time(events):
    once = apply(events, plan(events))
    assert plan(once) == []
    assert apply(once, plan(once)) == once


@_PROPERTY
@given(sessions)
def test_plan_writes_at_most_one_result_per_call_and_never_for_an_answered_one(events):
    answered = {
        e.data["tool_call_id"]
        for e in events
        if e.type == "tool_result" and isinstance(e.data, dict)
        and isinstance(e.data.get("tool_call_id"), str)
    }
    ids = [r.data["tool_call_id"] for r in plan(events) if r.type == "tool_result"]
    assert len(ids) == len(set(ids))
    assert not set(ids) & answered
    for r in plan(events):
        if r.risk is Risk.TOOL_OUTCOME_UNKNOWN:
            assert "no side effects" not in r.data["content"]
