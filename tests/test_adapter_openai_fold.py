"""openai-agents: each item stored once (issue 31 item 5; ``journal.adapters.openai_fold``).

- the residue of each item kind against the typed event that holds it, table-tested: it rebuilds
  the item exactly (deep-equal, key order and JSON types kept) and holds none of the event's text;
- any batch of items, through the real adapter (Hypothesis): ``get_items`` gives it back exactly,
  added once or twice (a second copy of a call's output is not the same typed result again);
- files written by the previous format (each item an ``x.openai_agents.item`` beside its typed
  event) read exactly as before, pop and limit included, and a run goes on over them;
- bytes: a run stores each message body once (a marker in the input, the tool's output and the
  answer occurs once in the events' data), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing.model import assistant_message, function_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal.adapters.openai_agents import ITEM, REF, JournalSession, journal_run
from journal.adapters.openai_fold import fold, unfold
from journal.adapters.openai_items import assistant
from journal.model import Event

from .test_adapter_openai_agents import ScriptedModel, orphans


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the journal is: a file, or a DSN naming a fresh PostgreSQL schema."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_dsn"))
    return str(tmp_path / "j.db")


# -- the residue of each item kind (pure) -------------------------------------------------------------


def _event(kind: str, data: dict[str, Any]) -> Event:
    return Event("s", 7, kind, data, 0)


SUNNY = "It is sunny in Lyon."
CALL = {"arguments": '{"city":"Lyon"}', "call_id": "call_1", "name": "lookup", "type": "function_call", "id": "fc_1"}
SPACED = {**CALL, "arguments": '{"city": "Lyon"}', "status": "completed"}
MESSAGE = {
    "id": "msg_1",
    "content": [{"annotations": [], "text": SUNNY, "type": "output_text", "logprobs": []}],
    "role": "assistant",
    "status": "completed",
    "type": "message",
}


def _answer(*items: dict[str, Any]) -> Event:
    """The answer the hooks write for a model response (with what rebuilds its call items)."""
    ((kind, data, _),) = assistant(list(items), keep_items=True)
    return _event(kind, data)


FOLDS: dict[str, tuple[dict[str, Any], Event, int | None, Any]] = {
    "the runner's input": (
        {"content": "weather in Lyon?", "role": "user"},
        _event("user_message", {"content": "weather in Lyon?"}),
        None,
        {},
    ),
    "an input written by hand": (
        {"role": "user", "content": "weather in Lyon?"},
        _event("user_message", {"content": "weather in Lyon?"}),
        None,
        {"$": "r"},
    ),
    "an input of text parts": (
        {"role": "user", "content": [{"type": "input_text", "text": "weather in Lyon?"}]},
        _event("user_message", {"content": "weather in Lyon?"}),
        None,
        {"$": "r", "content": [{"type": "input_text", "text": "$c"}]},
    ),
    "a developer message": (
        {"role": "developer", "content": "be brief, always"},
        _event("system_message", {"content": "be brief, always"}),
        None,
        {"$": "r", "role": "developer"},
    ),
    "a model's message": (
        MESSAGE,
        _event("assistant_message", {"content": SUNNY, "stop_reason": "stop"}),
        None,
        {"id": "msg_1"},
    ),
    "a message with annotations": (
        {
            **MESSAGE,
            "content": [{**MESSAGE["content"][0], "annotations": [{"type": "url_citation", "url": "https://x"}]}],
        },
        _event("assistant_message", {"content": SUNNY, "stop_reason": "stop"}),
        None,
        {
            "id": "msg_1",
            "content": [
                {
                    "annotations": [{"type": "url_citation", "url": "https://x"}],
                    "text": "$c",
                    "type": "output_text",
                    "logprobs": [],
                }
            ],
        },
    ),
    "a refusal": (
        {**MESSAGE, "content": [{"refusal": "I cannot help with that.", "type": "refusal"}]},
        _event("assistant_message", {"content": "I cannot help with that.", "stop_reason": "stop"}),
        None,
        {"id": "msg_1", "content": [{"refusal": "$c", "type": "refusal"}]},
    ),
    "an easy assistant message": (
        {"role": "assistant", "content": SUNNY},
        _event("assistant_message", {"content": SUNNY, "stop_reason": "stop"}),
        None,
        {"$": "e"},
    ),
    "a message beside its calls": (MESSAGE, _answer(MESSAGE, CALL), None, {"id": "msg_1"}),
    "a call as the SDK saves it": (CALL, _answer(CALL), 0, {"$": 0}),
    "a call with spaced arguments and a status": (SPACED, _answer(SPACED), 0, {"$": 0}),
    "a call in another field order": (
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"city":"Lyon"}'},
        _answer(CALL),
        0,
        {"$": 0, "$keys": ["type", "call_id", "name", "arguments"]},
    ),
    "an output": (
        {"call_id": "call_1", "output": "sunny in Lyon", "type": "function_call_output"},
        _event("tool_result", {"tool_call_id": "call_1", "content": "sunny in Lyon"}),
        None,
        {},
    ),
    "an output written by hand": (
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny in Lyon"},
        _event("tool_result", {"tool_call_id": "call_1", "content": "sunny in Lyon"}),
        None,
        {"$": "t"},
    ),
    "an output of parts, kept as late evidence": (
        {"call_id": "call_1", "output": [{"type": "input_text", "text": "structured"}], "type": "function_call_output"},
        _event(
            "tool_result_late", {"tool_call_id": "call_1", "content": [{"type": "input_text", "text": "structured"}]}
        ),
        None,
        {},
    ),
    "field names and strings that look like references": (
        {"content": "$c is text", "role": "user", "$": "$c", "$keys": ["$$"], "$$x": "$"},
        _event("user_message", {"content": "$c is text"}),
        None,
        {"$$": "$$c", "$$keys": ["$$$"], "$$$x": "$$"},
    ),
    "JSON types kept: 1, 1.0 and true are not the same": (
        {"content": "typed values", "role": "user", "n": 1, "f": 1.0, "b": True, "z": None},
        _event("user_message", {"content": "typed values"}),
        None,
        {"n": 1, "f": 1.0, "b": True, "z": None},
    ),
    "an item that repeats the text elsewhere refers to it": (
        {"content": "weather in Lyon?", "role": "user", "echo": ["weather in Lyon?"]},
        _event("user_message", {"content": "weather in Lyon?"}),
        None,
        {"echo": ["$c"]},
    ),
}


@pytest.mark.parametrize(("item", "event", "call", "entry"), list(FOLDS.values()), ids=list(FOLDS))
def test_an_items_residue_rebuilds_it_exactly_and_holds_none_of_its_events_text(
    item: dict[str, Any], event: Event, call: int | None, entry: Any
) -> None:
    folded = fold(item, event, call=call)
    assert folded == entry
    assert dumps(unfold(folded, event)) == dumps(item)  # deep-equal, key order and JSON types too
    content = event.data["content"]
    if isinstance(content, str) and len(content) >= 4 and "$" not in content:
        assert content not in dumps(folded)  # the text is stored once: in the typed event


def test_a_residue_naming_what_its_event_does_not_hold_is_a_typed_error() -> None:
    event = _event("user_message", {"content": "hi there"})
    for bad in ({"$": 3}, {"x": "$d"}, {"$x": 1}, {"$keys": ["nope"]}, "not an entry"):
        with pytest.raises(journal.CorruptJournal):
            unfold(bad, event)
    assert unfold([{"kept": "whole"}], event) == {"kept": "whole"}


# -- any batch, through the real adapter (Hypothesis) -----------------------------------------------------

_TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10) | st.sampled_from(
    ["$", "$c", "$$", "$keys", "hello there"]
)
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXTS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_TEXTS, children, max_size=3),
    max_leaves=6,
)
_EXTRA = st.dictionaries(st.sampled_from(["$", "$$", "$keys", "$c", "status", "id", "x"]), _VALUES, max_size=2)
_CALL_IDS = st.sampled_from(["call_a", "call_b", "call_c"])


@st.composite
def _item(draw: st.DrawFn) -> Any:
    text = draw(_TEXTS | st.just("hello there"))
    kind = draw(st.sampled_from(["input", "message", "easy", "call", "output", "reasoning", "other"]))
    if kind == "input":
        content: Any = draw(st.sampled_from([text, [{"type": "input_text", "text": text}]]))
        base = {"content": content, "role": draw(st.sampled_from(["user", "system", "developer"]))}
    elif kind == "message":
        base = {**MESSAGE, "content": [{**MESSAGE["content"][0], "text": text}]}
    elif kind == "easy":
        base = {"role": "assistant", "content": text}
    elif kind == "call":
        arguments = draw(st.sampled_from(['{"city":"Lyon"}', '{"city": "Lyon"}', "not json", "{}"]))
        base = {"arguments": arguments, "call_id": draw(_CALL_IDS), "name": "lookup", "type": "function_call"}
    elif kind == "output":
        output = draw(st.sampled_from([text, [{"type": "input_text", "text": text}]]))
        base = {"call_id": draw(_CALL_IDS), "output": output, "type": "function_call_output"}
    elif kind == "reasoning":
        base = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": text}]}
    else:
        return draw(st.dictionaries(_TEXTS, _VALUES, max_size=3))
    item = {**base, **draw(_EXTRA)}
    names = draw(st.permutations(list(item)))
    return {name: item[name] for name in names}


@pytest.fixture(scope="module")
def shared_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fold") / "j.db"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(_item(), min_size=1, max_size=6), min_size=1, max_size=3), twice=st.booleans())
def test_any_batches_of_items_come_back_exactly_however_they_are_stored(
    shared_file: Path, batches: list[list[Any]], twice: bool
) -> None:
    session = JournalSession(f"s-{uuid.uuid4().hex}", shared_file, durability="normal")
    try:
        added: list[Any] = []
        for batch in batches * (2 if twice else 1):  # twice: every call's output again
            run(session.add_items(batch))
            added.extend(batch)
        back = run(session.get_items())
        assert [dumps(i) for i in back] == [dumps(i) for i in added]
        assert [dumps(i) for i in run(session.get_items(limit=3))] == [dumps(i) for i in added[-3:]]
    finally:
        session.close()


# -- files of the previous format read exactly as before ------------------------------------------------

# What the adapter of the previous format wrote for one turn of the cashier (the input, a call to
# pay, its output, the answer), row for row: each item an x.openai_agents.item, beside its typed event.
OLD_INPUT = {"content": "Pay the 42 euro invoice.", "role": "user"}
OLD_CALL = {"arguments": '{"cents":4200}', "call_id": "pay-1", "name": "pay", "type": "function_call", "id": "pay-1"}
OLD_OUTPUT = {"call_id": "pay-1", "output": "paid 4200 cents", "type": "function_call_output"}
OLD_ANSWER = {
    "id": "scripted-message",
    "content": [{"annotations": [], "text": "Paid.", "type": "output_text", "logprobs": []}],
    "role": "assistant",
    "status": "completed",
    "type": "message",
}
_REQUEST = {
    "content": "",
    "tool_calls": [{"id": "pay-1", "name": "pay", "arguments": {"cents": 4200}}],
    "stop_reason": "tool_use",
    "metadata": {"openai_agents": {"call_items": {"pay-1": {"id": "pay-1"}}}},
    "usage": {"input": 0, "output": 0, "cache_read": 0},
}
OLD_ROWS: list[tuple[str, dict[str, Any], str | None]] = [
    (ITEM, {"item": OLD_INPUT}, None),
    ("user_message", {"content": "Pay the 42 euro invoice."}, None),
    ("turn_start", {"turn": 1}, None),
    ("step_start", {"turn": 1, "step": 1}, None),
    ("assistant_message", _REQUEST, "oa-calls:pay-1"),
    ("tool_call", {"id": "pay-1", "name": "pay", "arguments": {"cents": 4200}}, None),
    ("tool_result", {"tool_call_id": "pay-1", "content": "paid 4200 cents"}, None),
    (ITEM, {"item": OLD_CALL}, None),
    (ITEM, {"item": OLD_OUTPUT}, None),
    ("step_end", {"turn": 1, "step": 1, "outcome": "ok"}, None),
    ("step_start", {"turn": 1, "step": 2}, None),
    (ITEM, {"item": OLD_ANSWER}, None),
    ("assistant_message", {"content": "Paid.", "stop_reason": "stop"}, None),
    ("step_end", {"turn": 1, "step": 2, "outcome": "ok"}, None),
    ("turn_end", {"turn": 1, "steps": 2, "reason": "complete"}, None),
]
OLD_ITEMS = [OLD_INPUT, OLD_CALL, OLD_OUTPUT, OLD_ANSWER]


def _write_old(target: str, rows: list[tuple[str, dict[str, Any], str | None]]) -> None:
    with journal.open(target) as j:
        j.create_session("bot", meta={"framework": "openai-agents", "session_id": "bot"})
        j.append_many("bot", rows)


def _pays(model: ScriptedModel, paid: list[int]) -> Agent[Any]:
    @function_tool
    def pay(cents: int) -> str:
        """Pay an amount in cents."""
        paid.append(cents)
        return f"paid {cents} cents"

    return Agent(name="cashier", model=model, tools=[pay])


def test_a_file_of_the_previous_format_reads_the_same_and_a_run_goes_on_over_it(target: str) -> None:
    _write_old(target, OLD_ROWS)
    session = JournalSession("bot", target)
    try:
        assert run(session.get_items()) == OLD_ITEMS
        for limit in range(1, 6):
            assert run(session.get_items(limit=limit)) == OLD_ITEMS[-limit:]
        # A new run over it: the model sees the old items, and the new ones are stored once.
        model = ScriptedModel([[assistant_message("Nothing more to pay.", item_id="m2")]])
        run(journal_run(_pays(model, []), "Anything else?", session=session))
        assert model.inputs[0][:4] == [dict(i) for i in OLD_ITEMS]
        items = run(session.get_items())
        assert items[:4] == OLD_ITEMS and [i.get("role") for i in items[4:]] == ["user", "assistant"]
        # Pops take the new items, then the old ones, newest first, across the two formats.
        popped = [run(session.pop_item()) for _ in range(6)]
        assert popped == items[::-1] and run(session.get_items()) == []
        with journal.open(target) as j:
            assert j.check() == [] and j.scan().clean
            assert [e.type for e in j.events("bot")][15:17] == ["user_message", "turn_start"]  # new: one row
    finally:
        session.close()


def test_a_crash_in_a_file_of_the_previous_format_is_recovered_and_shown_in_place(target: str) -> None:
    """The previous format's rows of a run killed after the tool returned (its items never
    saved), recovered by ``journal recover`` then run on: the call and its real output stand
    before the next input, the model gets no orphan and the tool does not run again."""
    _write_old(target, OLD_ROWS[:7])
    with journal.open(target) as j:
        (done,) = j.recover()
        assert [e.type for e in done.appended] == ["turn_end"]
    session = JournalSession("bot", target)
    try:
        assert run(session.get_items()) == OLD_ITEMS[:3]
        paid: list[int] = []
        model = ScriptedModel([[assistant_message("Already paid.", item_id="m2")]])
        run(journal_run(_pays(model, paid), "Did it go through?", session=session))
        assert paid == [] and orphans(model.inputs[0]) == []
        items = run(session.get_items())
        assert items[:3] == OLD_ITEMS[:3] and items[3]["content"] == "Did it go through?"
    finally:
        session.close()


# -- bytes: each message body once ------------------------------------------------------------------------


def test_a_run_stores_each_message_body_once(target: str) -> None:
    question, output, answer = (f"{name}-{uuid.uuid4().hex}" for name in ("QUESTION", "OUTPUT", "ANSWER"))

    @function_tool
    def lookup(city: str) -> str:
        """Look the weather up."""
        return output

    model = ScriptedModel(
        [
            [assistant_message("Let me look.", item_id="m1"), function_call("lookup", {"city": "Lyon"}, call_id="c1")],
            [assistant_message(answer, item_id="m2")],
        ]
    )
    session = JournalSession("bot", target)
    try:
        run(journal_run(Agent(name="a", model=model, tools=[lookup]), question, session=session))
        items = run(session.get_items())
    finally:
        session.close()
    assert [i.get("type") or "message" for i in items] == [
        "message",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    with journal.open(target) as j:
        events = j.events("bot")
        data = [dumps(e.data) for e in events]
        for marker in (question, output, answer, "Let me look."):
            assert sum(d.count(marker) for d in data) == 1, marker
        assert [e.type for e in events].count(ITEM) == 0 and [e.type for e in events].count(REF) == 1
        assert j.check() == []


# -- where a carrier is not sure to be written ------------------------------------------------------------

FC1 = {"arguments": '{"cents":1}', "call_id": "c1", "name": "pay", "type": "function_call"}
OUT1 = {"call_id": "c1", "output": "paid", "type": "function_call_output"}


def test_an_output_other_than_the_recorded_result_is_stored_in_its_late_evidence(tmp_path: Path) -> None:
    """The hooks recorded ``paid``; the runner saves another output for the call (a guardrail's):
    the call refers to the hooks' answer, and the output is carried by the ``tool_result_late``
    G5 makes of it -- stored once, and the typed result stays the first."""
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
        ask = {"content": "", "tool_calls": [{"id": "c1", "name": "pay", "arguments": {"cents": 1}}]}
        j.append_many(
            "s",
            [
                ("assistant_message", ask, "oa-calls:c1"),
                ("tool_result", {"tool_call_id": "c1", "content": "paid"}, None),
            ],
        )
    session = JournalSession("s", path)
    other = {**OUT1, "output": "blocked by a guardrail"}
    run(session.add_items([FC1, other]))
    assert run(session.get_items()) == [FC1, other]
    session.close()
    with journal.open(path, readonly=True) as j:
        events = j.events("s")
        assert [e.type for e in events] == ["assistant_message", "tool_result", REF, "tool_result_late"]
        assert events[2].data == {"items": [[0, {"$": 0}]]}
        assert events[3].data["content"] == "blocked by a guardrail"
        assert sum(dumps(e.data).count("guardrail") for e in events) == 1


def test_items_added_again_are_stored_again_and_a_purged_session_starts_over(tmp_path: Path) -> None:
    """The same call and output added twice (as ``SQLiteSession`` keeps them, twice): the second
    copy's typed events are stored already (its answer's key, its result), so it refers to them or
    is stored whole -- never a carrier the journal would skip. After a purge the same items are
    new again: carried by their typed events."""
    path = tmp_path / "j.db"
    session = JournalSession("s", path)
    run(session.add_items([FC1, OUT1]))
    run(session.add_items([{"role": "user", "content": "again"}]))
    run(session.add_items([FC1, OUT1]))
    assert run(session.get_items()) == [FC1, OUT1, {"role": "user", "content": "again"}, FC1, OUT1]
    with journal.open(path, readonly=True) as j:
        # The second copy: whole, and nothing typed (the same answer and result are stored).
        assert [e.type for e in j.events("s")] == ["assistant_message", "tool_result", "user_message", ITEM, ITEM]
    run(session.add_items([{**OUT1, "output": "paid twice?"}]))  # another output: late evidence, carrying it
    assert run(session.get_items())[-1] == {**OUT1, "output": "paid twice?"}
    with journal.open(path, readonly=True) as j:
        assert [e.type for e in j.events("s")][-1] == "tool_result_late"
    run(session.purge())
    run(session.add_items([FC1, OUT1]))  # the same session id, a new session: what it knew is void
    assert run(session.get_items()) == [FC1, OUT1]
    session.close()
    with journal.open(path, readonly=True) as j:
        assert [e.type for e in j.events("s")] == ["assistant_message", "tool_result"]


def test_reads_of_the_last_n_items_agree_with_the_whole_read_over_references_and_pops(target: str) -> None:
    """A run of tool steps (each step's call and output refer to the hooks' events): every
    ``get_items(limit=n)`` is the whole read's last n, and pops take the items back newest
    first (the referenced ones too), retracting only a message that carried its item."""
    paid: list[int] = []

    def respond(items: list[Any]) -> list[Any]:
        if items[-1].get("type") == "function_call_output":
            return [assistant_message(f"done {len(items)}", item_id=f"m{len(items)}")]
        return [assistant_message("paying", item_id="p"), function_call("pay", {"cents": 1}, call_id=f"c{len(items)}")]

    session = JournalSession("bot", target)
    try:
        agent = _pays(ScriptedModel(respond), paid)
        for step in range(8):
            run(journal_run(agent, f"pay {step}", session=session))
        items = run(session.get_items())
        assert len(items) == 8 * 5 and paid == [1] * 8
        for limit in range(1, len(items) + 2):
            assert run(session.get_items(limit=limit)) == items[-limit:]
        popped = [run(session.pop_item()) for _ in range(7)]
        assert popped == items[::-1][:7]
        assert run(session.get_items()) == items[:-7]
        for limit in (1, 2, 5, 33):
            assert run(session.get_items(limit=limit)) == items[:-7][-limit:]
        with journal.open(target) as j:
            assert j.check() == [] and j.scan().clean
            assert [m.content for m in j.messages("bot")][-3:] == ["pay 7", "paying", "paid 1 cents"]
    finally:
        session.close()
