"""Hypothesis strategies shared by the suites: JSON values and the event logs the property tests draw."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from journal.model import SURFACE_TYPES, EventType, StopReason
from tests.builders import HUGE, arguments_naming, assistant, log, result, step_end, user


def json_values(
    *,
    storable: bool = False,
    max_leaves: int = 8,
    max_size: int = 3,
    max_key_size: int = 4,
    max_text_size: int | None = 8,
) -> st.SearchStrategy[Any]:
    """JSON-shaped values: None, booleans, numbers and text, nested in lists and objects.

    ``storable`` keeps to what the journal stores as is (64-bit integers, finite floats); without
    it come NaN, infinities and integers of any size too.
    """
    integers = st.integers(-(2**63), 2**63 - 1) if storable else st.integers()
    floats = st.floats(allow_nan=False, allow_infinity=False) if storable else st.floats()
    scalars = st.none() | st.booleans() | integers | floats | st.text(max_size=max_text_size)
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=max_size)
            | st.dictionaries(st.text(max_size=max_key_size), inner, max_size=max_size)
        ),
        max_leaves=max_leaves,
    )


# -- what the resume classifier reads (test_classify) --------------------------------------------

_any_json = json_values()
_call_ids = st.sampled_from(["a", "b", "c"])
_error_messages = st.sampled_from(
    [
        "overloaded",
        "HTTP 503",
        "215000 tokens",
        "prompt is too long",
        "invalid api key",
        "request timed out",
        "",
    ]
)
_counts = st.integers(0, 300_000) | _any_json
_usage = st.fixed_dictionaries({}, optional={"input": _counts, "output": _counts, "cache_read": _counts}) | _any_json
_call = st.fixed_dictionaries({"id": _call_ids | _any_json, "name": st.just("echo")}) | _any_json
_assistant_data = st.fixed_dictionaries(
    {"content": st.just("…")},
    optional={
        "stop_reason": st.sampled_from([r.value for r in StopReason]) | _any_json,
        "tool_calls": st.lists(_call, max_size=3) | _any_json,
        "error_message": _error_messages | _any_json,
        "usage": _usage,
    },
)
_result_data = st.fixed_dictionaries({"tool_call_id": _call_ids | _any_json, "content": st.just("ok")})

significant_items = st.one_of(
    st.tuples(st.just("assistant_message"), _assistant_data | _any_json),
    st.tuples(st.just("tool_result"), _result_data | _any_json),
    st.tuples(st.sampled_from(["user_message", "system_message"]), st.just({"content": "hi"})),
    st.tuples(st.sampled_from(["stream_interrupted", "stream_continued", "submission_interrupted"]), st.just({})),
)
"""Items the classifier reads: assistants, results, messages and stream signals, any field garbage."""

bookkeeping_items = st.tuples(
    st.sampled_from(
        [
            "turn_start",
            "turn_end",
            "step_start",
            "step_end",
            "tool_call",
            "tool_result_late",
            "operator_resolution",
            "x.note",
            "unknown",
        ]
    ),
    _any_json,
)
"""Items the classifier passes over, with data of any JSON shape."""

any_items = st.one_of(
    significant_items,
    bookkeeping_items,
    st.tuples(st.sampled_from([t.value for t in EventType]) | _any_json, _any_json),
)
"""Items of any type, known or garbage, with data of any JSON shape."""


# -- turns the recovery planner repairs (test_recovery_plan) -------------------------------------

_odd_values = st.none() | st.integers(-2, 2) | st.booleans() | st.text(max_size=2) | st.just([1])
_ids = st.sampled_from(["c1", "c2", "c3", "c4"]) | _odd_values
_names = st.sampled_from(["pay", "rm", "search"]) | _odd_values
_tool_call_entries = (
    st.fixed_dictionaries({"id": _ids, "name": _names, "arguments": st.just({})})
    | st.fixed_dictionaries({}, optional={"id": _ids})
    | _odd_values
)
_turn_items = st.one_of(
    st.tuples(
        st.just("turn_start"),
        st.fixed_dictionaries({}, optional={"turn": st.integers(1, 4) | _odd_values}) | _odd_values,
    ),
    st.tuples(st.just("turn_end"), st.just({"turn": 1, "steps": 1, "reason": "complete"})),
    st.tuples(st.just("step_start"), st.just({"turn": 1, "step": 1})),
    st.tuples(st.just("step_end"), st.just({"turn": 1, "step": 1, "outcome": "ok"})),
    st.tuples(
        st.just("assistant_message"),
        st.fixed_dictionaries(
            {"content": st.just("")},
            optional={"tool_calls": st.lists(_tool_call_entries, max_size=3) | _odd_values},
        ),
    ),
    st.tuples(st.just("tool_call"), st.fixed_dictionaries({"id": _ids, "name": _names}) | _odd_values),
    st.tuples(
        st.just("tool_result"),
        st.fixed_dictionaries({"tool_call_id": _ids, "content": st.just("ok")}) | _odd_values,
    ),
    st.tuples(st.sampled_from(["user_message", "x.note", "tool_result_late"]), st.just({"content": ""})),
)

turn_logs = st.lists(_turn_items, max_size=30).map(lambda items: log(*items))
"""Logs of turns, steps, calls, dispatches and results, any id, name or data possibly garbage."""


# -- the messages view (test_view) ---------------------------------------------------------------

_surface_types = st.sampled_from(sorted(SURFACE_TYPES))
_bookkeeping_types = st.sampled_from(["turn_start", "tool_call", "step_end", "x.app"])


@st.composite
def _compaction_items(draw):
    """One log entry: an append, a replace (sometimes greedy or past the end), or bookkeeping."""
    what = draw(st.sampled_from(["append", "append", "replace", "bookkeeping"]))
    if what == "bookkeeping":
        return draw(_bookkeeping_types), {}
    type_ = draw(_surface_types)
    data: dict[str, Any] = {"content": "x"}
    if type_ == "tool_result":
        data["tool_call_id"] = "c"
    if what == "replace":
        start = draw(st.integers(0, 12))
        stop = draw(st.one_of(st.integers(start, start + 8), st.just(HUGE)))
        data["surface_op"] = ["replace", start, stop]
    elif draw(st.booleans()):
        data["surface_op"] = "append"
    return type_, data


compaction_logs = st.lists(_compaction_items(), max_size=60).map(lambda items: log(*items, clock_ms=1000))
"""Logs of surface events appended or replacing a range, between bookkeeping; times from 1000 ms."""


@st.composite
def conversations(draw):
    """Logs of user turns, assistants with calls (some aborted or errored) and results in any
    order, some for unknown or repeated ids; times from 1000 ms."""
    items: list[tuple[str, dict[str, Any]]] = []
    ids = [f"c{i}" for i in range(6)]
    for _ in range(draw(st.integers(0, 25))):
        what = draw(st.sampled_from(["user", "assistant", "result", "result", "bookkeeping"]))
        if what == "user":
            items.append(user("u"))
        elif what == "assistant":
            calls = draw(st.lists(st.sampled_from(ids), max_size=3, unique=True))
            reason = draw(st.sampled_from([None, "stop", "tool_use", "aborted", "error"]))
            extra = {} if reason is None else {"stop_reason": reason}
            items.append(assistant("a", *calls, call_arguments=arguments_naming, **extra))
        elif what == "result":
            items.append(result(draw(st.sampled_from(ids + ["zz"])), "r"))
        else:
            items.append(step_end(outcome=None))
    return log(*items, clock_ms=1000)


def appendable_items(call_ids: tuple[str, ...] = ("c1", "c2", "c3"), *, max_calls: int = 2, named: bool = False):
    """Items a plain append takes, in any order (turns, steps, requests, dispatches, results):
    logs that exercise the recovery planner through the database. ``named``: each call's tool is
    ``t<id>`` (else ``t``)."""
    calls = st.sampled_from(list(call_ids))

    def tool(call_id: str) -> str:
        return f"t{call_id}" if named else "t"

    return st.one_of(
        st.just(("turn_start", {"turn": 1})),
        # No number: it closes whichever turn is innermost (one naming another is refused).
        st.just(("turn_end", {"steps": 0, "reason": "complete"})),
        st.just(("step_start", {"turn": 1, "step": 1})),
        st.just(("step_end", {"turn": 1, "step": 1, "outcome": "ok"})),
        st.lists(calls, min_size=1, max_size=max_calls, unique=True).map(
            lambda ids: (
                "assistant_message",
                {"content": "", "tool_calls": [{"id": i, "name": tool(i), "arguments": {}} for i in ids]},
            )
        ),
        calls.map(lambda i: ("tool_call", {"id": i, "name": tool(i)})),
        calls.map(lambda i: ("tool_result", {"tool_call_id": i, "content": "r"})),
        st.just(("user_message", {"content": "hi"})),
    )


@st.composite
def interrupted_logs(draw, call_ids: tuple[str, ...] = ("c1", "c2", "c3", "c4")):
    """A session's items that end inside a turn (most of the time): some finished or broken
    history, a ``turn_start``, then requests, dispatches, results and steps in any order, now and
    then a nested turn or a ``turn_end``; ids recur, so some calls were seen before the turn."""
    items = appendable_items(call_ids, max_calls=3, named=True)
    history = draw(st.lists(items, max_size=12))
    tail: list[tuple[str, dict[str, Any]]] = [("turn_start", {"turn": 2})]
    requested: list[str] = []
    # Inside the turn, mostly what an agent writes: steps, requests, dispatches of requested
    # calls, results; now and then anything (a nested turn, a turn_end, a stray dispatch).
    for move in draw(
        st.lists(st.sampled_from(["step", "end_step", "request", "dispatch", "result", "any"]), max_size=10)
    ):
        if move == "step":
            tail.append(("step_start", {"turn": 2, "step": 1}))
        elif move == "end_step":
            tail.append(("step_end", {"turn": 2, "step": 1, "outcome": "ok"}))
        elif move == "request":
            ids = draw(st.lists(st.sampled_from(list(call_ids)), min_size=1, max_size=3, unique=True))
            requested += ids
            tail.append(("assistant_message", {"content": "", "tool_calls": [{"id": i, "name": f"t{i}"} for i in ids]}))
        elif move in ("dispatch", "result") and requested:
            call_id = draw(st.sampled_from(requested))
            if move == "dispatch":
                tail.append(("tool_call", {"id": call_id, "name": f"t{call_id}"}))
            else:
                tail.append(("tool_result", {"tool_call_id": call_id, "content": "r"}))
        elif move == "any":
            tail.append(draw(items))
    return [*history, *tail]
