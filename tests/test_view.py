"""The messages view: the compaction fold, the provider view and the provider converters."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal.model import SURFACE_TYPES, Event
from journal.pure.view import (
    Message,
    MissingResult,
    fold,
    provider_view,
    to_anthropic,
    to_openai,
)
from tests import builders
from tests.builders import (
    HUGE,
    arguments_naming,
    dispatch,
    raw,
    replace,
    result,
    step_end,
    step_start,
    synthetic_metadata,
    system,
    turn_end,
    turn_start,
    user,
)
from tests.strategies import compaction_logs, conversations

# The shared builders in this suite's dialect: times count from 1000 ms, and each call's
# arguments name it.
log = partial(builders.log, clock_ms=1000)
assistant = partial(builders.assistant, call_arguments=arguments_naming)


# --- the fold -------------------------------------------------------------------------------

FOLD_CASES = [
    pytest.param(
        [system("sys"), user("u1"), assistant("a1"), user("u2"), assistant("a2"), replace(1, 3), user("u3")],
        ["sys", "S", "a2", "u3"],
        id="summary_over_a_range_hides_it_and_keeps_later_events",
    ),
    pytest.param(
        [system("sys"), user("u1"), assistant("a1"), replace(1, HUGE), user("u2"), assistant("a2")],
        ["sys", "S", "u2", "a2"],
        id="greedy_range_past_the_end_does_not_swallow_later_appends",
    ),
    pytest.param(
        [
            system("sys"),
            user("u1"),
            assistant("a1"),
            user("u2"),
            assistant("a2"),
            replace(1, 2, "S1"),
            replace(2, 3, "S2"),
            user("u3"),
        ],
        ["sys", "S1", "S2", "u3"],
        id="two_summaries_over_adjacent_ranges",
    ),
    pytest.param(
        [
            system("sys"),
            user("u1"),
            assistant("a1-long"),
            user("u2"),
            replace(2, 2, "a1-pruned", type_="assistant_message"),
            replace(1, 2, "S"),
        ],
        ["sys", "S", "u2"],
        id="in_place_prune_then_summary_covering_it_folds_by_position_not_seq",
    ),
    pytest.param(
        [
            system("sys"),
            user("u1"),
            assistant("a1"),
            user("u2"),
            assistant("a2"),
            replace(1, 2, "S1"),
            user("u3"),
            replace(1, 3, "S2"),
            assistant("a3"),
        ],
        ["sys", "S2", "u3", "a3"],
        id="second_summary_over_a_wider_range_hides_the_first",
    ),
    pytest.param(
        [user("u1"), assistant(""), assistant(None), user("u2")],
        ["u1", "", None, "u2"],
        id="empty_assistant_message_still_folds",
    ),
    pytest.param(
        [
            turn_start(),
            user("u1"),
            step_start(),
            dispatch("c1", "t"),
            raw("x.note", text="app"),
            raw("tool_result_late", tool_call_id="c1", content="late"),
            assistant("a1"),
            step_end(),
            turn_end(reason=None),
        ],
        ["u1", "a1"],
        id="bookkeeping_and_app_events_are_not_projected",
    ),
    pytest.param(
        [user("u1"), ("user_message", {"content": "u2", "surface_op": "append"})],
        ["u1", "u2"],
        id="explicit_append_op_appends",
    ),
    pytest.param(
        [user("u1"), replace(1, 4)],
        ["u1", "S"],
        id="replace_starting_at_the_end_appends",
    ),
    pytest.param(
        [user("u1"), replace(7, 9)],
        ["u1", "S"],
        id="replace_starting_past_the_end_appends_and_does_not_raise",
    ),
    pytest.param(
        [user("u1"), user("u2"), ("user_message", {"content": "m", "surface_op": ["replace", 0]})],
        ["u1", "u2", "m"],
        id="malformed_op_appends_and_does_not_raise",
    ),
]


@pytest.mark.parametrize(("items", "expected"), FOLD_CASES)
def test_fold_table(items, expected):
    assert [m.content for m in fold(log(*items))] == expected


def test_fold_processes_events_in_seq_order_whatever_the_input_order():
    events = log(user("u1"), assistant("a1"), replace(0, 0, "S"), user("u2"))
    assert [m.content for m in fold(list(reversed(events)))] == ["S", "a1", "u2"]


FIELD_CASES = [
    pytest.param(assistant("a", reasoning="because"), "reasoning", "because", id="reasoning_survives"),
    pytest.param(user("hi", name="alice"), "name", "alice", id="user_name_survives"),
    pytest.param(system("be brief", name="policy"), "name", "policy", id="system_name_survives"),
    pytest.param(result("c1", "out", name="search"), "name", "search", id="tool_result_name_survives"),
    pytest.param(
        result("c1", "x", metadata=synthetic_metadata("tool_outcome_unknown")),
        "risk",
        "tool_outcome_unknown",
        id="synthetic_tool_result_keeps_its_risk",
    ),
    pytest.param(
        result("c1", "x", metadata=synthetic_metadata("tool_not_started")),
        "metadata",
        synthetic_metadata("tool_not_started"),
        id="synthetic_tool_result_keeps_its_metadata",
    ),
    pytest.param(result("c1", "plain"), "risk", None, id="real_result_has_no_risk"),
    pytest.param(result("c1", "boom", is_error=True), "is_error", True, id="is_error_survives"),
    pytest.param(assistant("a", stop_reason="length"), "stop_reason", "length", id="stop_reason"),
    pytest.param(result("c9", "x"), "tool_call_id", "c9", id="tool_call_id_survives"),
    pytest.param(user("hi"), "role", "user", id="user_role"),
    pytest.param(result("c1", "x"), "role", "tool", id="tool_result_role"),
]


@pytest.mark.parametrize(("item", "attribute", "expected"), FIELD_CASES)
def test_fold_keeps_message_fields(item, attribute, expected):
    (message,) = fold(log(user("before"), item))[1:]
    assert getattr(message, attribute) == expected


def test_fold_message_carries_seq_time_and_normalised_tool_calls():
    events = log(
        user("u"),
        ("assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": "t"}]}),
    )
    message = fold(events)[1]
    assert (message.seq, message.time_ms) == (1, 1001)
    assert message.tool_calls == ({"id": "c1", "name": "t", "arguments": {}},)
    assert message.stop_reason is None


def test_summary_that_is_itself_a_replace_keeps_its_own_fields():
    events = log(
        user("u1"),
        assistant("a1"),
        ("assistant_message", {"content": "S", "reasoning": "r", "surface_op": ["replace", 0, 1]}),
    )
    (summary,) = fold(events)
    assert (summary.role, summary.content, summary.reasoning, summary.seq) == (
        "assistant",
        "S",
        "r",
        2,
    )


# --- the fold against a reference -----------------------------------------------------------


def _reference_fold(events: list[Event]) -> list[Event]:
    """Replay by rebuilding the whole list at every step (quadratic, obviously right)."""
    current: list[Event] = []
    for event in sorted(events, key=lambda e: e.seq):
        if event.type not in SURFACE_TYPES:
            continue
        op = event.data.get("surface_op")
        if isinstance(op, list) and len(op) == 3 and op[0] == "replace" and 0 <= op[1] <= op[2]:
            start, stop = op[1], op[2]
            kept_before = [m for position, m in enumerate(current) if position < start]
            kept_after = [m for position, m in enumerate(current) if position > stop]
            current = kept_before + [event] + kept_after
        else:
            current = current + [event]
    return current


@settings(max_examples=300, deadline=None)
@given(compaction_logs)
def test_fold_equals_reference_fold(events):
    assert [m.seq for m in fold(events)] == [e.seq for e in _reference_fold(events)]


@settings(max_examples=100, deadline=None)
@given(compaction_logs, st.randoms(use_true_random=False))
def test_fold_does_not_depend_on_input_order(events, random):
    shuffled = list(events)
    random.shuffle(shuffled)
    assert fold(shuffled) == fold(events)


@settings(max_examples=100, deadline=None)
@given(compaction_logs)
def test_surface_events_after_the_last_replace_all_survive(events):
    replaces = [e.seq for e in events if e.is_surface and isinstance(e.data.get("surface_op"), list)]
    last = max(replaces, default=-1)
    after = [e.seq for e in events if e.is_surface and e.seq > last]
    surviving = [m.seq for m in fold(events)]
    assert surviving[len(surviving) - len(after) :] == after


# --- the provider view ----------------------------------------------------------------------


def _shape(messages: list[Message]) -> list[tuple[str, Any]]:
    return [(m.role, m.tool_call_id if m.role == "tool" else m.content) for m in messages]


def test_results_are_reordered_into_call_order_right_after_their_assistant():
    events = log(
        user("u1"),
        assistant("", "c1", "c2", "c3"),
        result("c3", "r3"),
        user("interjection"),
        result("c1", "r1"),
        result("c2", "r2"),
    )
    view = provider_view(events)
    assert _shape(view.messages) == [
        ("user", "u1"),
        ("assistant", ""),
        ("tool", "c1"),
        ("tool", "c2"),
        ("tool", "c3"),
        ("user", "interjection"),
    ]
    assert view.missing == ()


@pytest.mark.parametrize("stop_reason", ["aborted", "error"])
def test_aborted_and_errored_assistants_are_left_out_with_their_calls(stop_reason):
    events = log(
        user("u1"),
        assistant("partial", "x1", stop_reason=stop_reason),
        result("x1", "should not show"),
        user("u2"),
        assistant("fine"),
    )
    view = provider_view(events)
    assert _shape(view.messages) == [("user", "u1"), ("user", "u2"), ("assistant", "fine")]
    assert view.missing == ()


def test_calls_without_a_result_are_reported_missing_and_never_invented():
    events = log(user("u1"), assistant("", "c1", "c2"), result("c1", "r1"))
    view = provider_view(events)
    assert _shape(view.messages) == [("user", "u1"), ("assistant", ""), ("tool", "c1")]
    assert view.missing == (MissingResult(assistant_seq=1, tool_call_id="c2", name="tool_c2"),)


def test_result_whose_assistant_was_compacted_away_is_left_out():
    events = log(user("u1"), assistant("", "c1"), result("c1", "r1"), replace(0, 1, "S"), user("u2"))
    view = provider_view(events)
    assert _shape(view.messages) == [("user", "S"), ("user", "u2")]
    assert view.missing == ()


def test_duplicate_results_for_a_call_keep_the_first_only():
    events = log(assistant("", "c1"), result("c1", "first"), result("c1", "second"))
    assert [m.content for m in provider_view(events).messages] == ["", "first"]


def test_reused_call_ids_attach_to_the_nearest_assistant_before_the_result():
    events = log(assistant("", "c1"), result("c1", "one"), user("again"), assistant("", "c1"), result("c1", "two"))
    assert [m.content for m in provider_view(events).messages] == ["", "one", "again", "", "two"]


def test_aborted_assistant_repeating_a_call_id_does_not_swallow_the_late_result():
    events = log(
        assistant("", "c1"),
        assistant("partial", "c1", stop_reason="aborted"),
        result("c1", "late but real"),
    )
    view = provider_view(events)
    assert [m.content for m in view.messages] == ["", "late but real"]
    assert view.missing == ()


def test_pruned_tool_result_stays_attached_to_its_assistant():
    events = log(
        user("u1"),
        assistant("", "c1"),
        result("c1", "a very long output"),
        ("tool_result", {"tool_call_id": "c1", "content": "[pruned]", "surface_op": ["replace", 2, 2]}),
    )
    assert [m.content for m in provider_view(events).messages] == ["u1", "", "[pruned]"]


RECOVERED_SESSIONS = [
    pytest.param(
        [
            turn_start(),
            user("do three things"),
            assistant("", "c1", "c2", "c3"),
            dispatch("c1"),
            result("c1", "done"),
            result("c2", "did not run", metadata=synthetic_metadata("tool_not_started")),
            result("c3", "MAY have run", metadata=synthetic_metadata("tool_outcome_unknown")),
            assistant("half a sent", stop_reason="aborted"),
            raw("stream_interrupted"),
            turn_end(reason="interrupted"),
        ],
        id="synthetic_results_before_the_aborted_assistant",
    ),
    pytest.param(
        [
            turn_start(),
            user("do three things"),
            assistant("", "c1", "c2", "c3"),
            result("c1", "done"),
            assistant("half a sent", "c9", stop_reason="aborted"),
            result("c3", "MAY have run", metadata=synthetic_metadata("tool_outcome_unknown")),
            result("c2", "did not run", metadata=synthetic_metadata("tool_not_started")),
            turn_end(reason="interrupted"),
        ],
        id="synthetic_results_after_the_aborted_assistant_out_of_order",
    ),
]


@pytest.mark.parametrize("items", RECOVERED_SESSIONS)
def test_recovered_session_gives_one_result_per_call_right_after_the_assistant(items):
    view = provider_view(log(*items))
    assert [(m.role, m.tool_call_id, m.risk) for m in view.messages] == [
        ("user", None, None),
        ("assistant", None, None),
        ("tool", "c1", None),
        ("tool", "c2", "tool_not_started"),
        ("tool", "c3", "tool_outcome_unknown"),
    ]
    assert all(m.stop_reason != "aborted" for m in view.messages)
    assert view.missing == ()


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_provider_view_answers_each_kept_call_at_most_once_in_call_order(events):
    view = provider_view(events)
    messages = view.messages
    missing_by_assistant: dict[int, list[str]] = {}
    for gap in view.missing:
        missing_by_assistant.setdefault(gap.assistant_seq, []).append(gap.tool_call_id)
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message.role != "tool", "a result that does not follow its assistant"
        assert message.stop_reason not in ("aborted", "error")
        index += 1
        batch = []
        while index < len(messages) and messages[index].role == "tool":
            batch.append(messages[index].tool_call_id)
            index += 1
        calls = [c["id"] for c in message.tool_calls]
        missing = missing_by_assistant.pop(message.seq, [])
        assert set(batch).isdisjoint(missing)
        assert sorted(batch + missing, key=calls.index) == calls
        assert batch == [c for c in calls if c in batch]
    assert missing_by_assistant == {}


# --- converters -----------------------------------------------------------------------------


def test_to_openai_gives_the_chat_completions_shape():
    events = log(
        system("be brief"),
        user("hi", name="alice"),
        assistant(None, "c1"),
        result("c1", "out"),
        result("c2", {"rows": 3}),
        (
            "assistant_message",
            {"content": "", "tool_calls": [{"id": "c2", "name": "raw", "arguments": '{"already": "json"}'}]},
        ),
        assistant("done", stop_reason="stop"),
    )
    assert to_openai(fold(events)) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi", "name": "alice"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "tool_c1", "arguments": '{"n": "c1"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        {"role": "tool", "tool_call_id": "c2", "content": '{"rows": 3}'},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "raw", "arguments": '{"already": "json"}'}}
            ],
        },
        {"role": "assistant", "content": "done"},
    ]


def test_to_openai_arguments_are_a_json_string_that_round_trips():
    arguments = {"path": "/tmp/ü", "flags": [1, 2], "deep": {"x": None}}
    events = log(
        ("assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": "t", "arguments": arguments}]})
    )
    (message,) = to_openai(fold(events))
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == arguments


def test_to_openai_passes_content_parts_through_and_wraps_bare_strings():
    image = {"type": "image_url", "image_url": {"url": "data:..."}}
    (message,) = to_openai(fold(log(user(["look:", image]))))
    assert message["content"] == [{"type": "text", "text": "look:"}, image]


def test_to_anthropic_gives_the_messages_shape():
    events = log(
        system("be brief"),
        system([{"type": "text", "text": "and kind"}]),
        user("hi"),
        assistant("let me look", "c1", "c2"),
        result("c1", "out"),
        result("c2", "boom", is_error=True),
        user("thanks"),
        assistant(""),
        assistant("done"),
    )
    assert to_anthropic(fold(events)) == {
        "system": "be brief\n\nand kind",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "let me look"},
                    {"type": "tool_use", "id": "c1", "name": "tool_c1", "input": {"n": "c1"}},
                    {"type": "tool_use", "id": "c2", "name": "tool_c2", "input": {"n": "c2"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "out"},
                    {"type": "tool_result", "tool_use_id": "c2", "content": "boom", "is_error": True},
                    {"type": "text", "text": "thanks"},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        ],
    }


def test_to_anthropic_without_system_messages_has_none_and_merges_same_role_messages():
    converted = to_anthropic(fold(log(user("a"), user(["b", {"type": "image", "source": {}}]))))
    assert converted == {
        "system": None,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "text", "text": "b"},
                    {"type": "image", "source": {}},
                ],
            }
        ],
    }


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param({"a": 1}, {"a": 1}, id="object_passes_through"),
        pytest.param('{"a": 1}', {"a": 1}, id="json_string_is_decoded"),
        pytest.param(None, {}, id="none_becomes_empty_object"),
        pytest.param("not json", "not json", id="other_string_is_not_invented_into_an_object"),
    ],
)
def test_to_anthropic_tool_use_input(arguments, expected):
    events = log(
        ("assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": "t", "arguments": arguments}]})
    )
    (message,) = to_anthropic(fold(events))["messages"]
    assert message["content"] == [{"type": "tool_use", "id": "c1", "name": "t", "input": expected}]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param("text", "text", id="string"),
        pytest.param({"rows": 3}, '{"rows": 3}', id="object_becomes_json_text"),
        pytest.param(
            ["a", {"type": "image", "source": {}}],
            [{"type": "text", "text": "a"}, {"type": "image", "source": {}}],
            id="list_becomes_blocks",
        ),
    ],
)
def test_to_anthropic_tool_result_content(content, expected):
    messages = to_anthropic(fold(log(assistant("", "c1"), result("c1", content))))["messages"]
    assert messages[1]["content"] == [{"type": "tool_result", "tool_use_id": "c1", "content": expected}]


def test_recovered_session_converts_to_both_shapes_with_one_result_per_call():
    view = provider_view(log(*RECOVERED_SESSIONS[0].values[0]))
    openai = to_openai(view.messages)
    assert [m.get("tool_call_id") for m in openai if m["role"] == "tool"] == ["c1", "c2", "c3"]
    anthropic = to_anthropic(view.messages)["messages"]
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user"]
    assert [b["tool_use_id"] for b in anthropic[2]["content"]] == ["c1", "c2", "c3"]
