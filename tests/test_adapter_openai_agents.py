"""openai-agents on the journal (``journal.adapters.openai_agents``, DESIGN §14).

- a contract module: the behaviour of openai-agents' own ``SQLiteSession`` tests, run against both
  ``agents.SQLiteSession`` and ``JournalSession``, so the two behave alike;
- what the journal adds: items verbatim plus typed events, pops and clears that delete nothing,
  the hooks' turn and dispatch barrier (G6) in a real ``Runner.run`` with an offline model;
- crash safety: a child process killed right after a tool's side effect, then ``scan``,
  ``repair`` (the journal's one recovery, which the items then project in the framework's shape)
  and a second run that does not pay twice (the full matrix: ``test_adapter_openai_agents_matrix``);
- the projection itself, table-tested (``openai_items.project``), one shape of ``repair``
  (sync, ``arepair``), and ids that never collide.

Each test runs its own event loop (``asyncio.run``); the model is scripted, never a network.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.memory import SessionSettings
from agents.models.interface import Model
from agents.testing.model import assistant_message, function_call
from agents.usage import Usage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal.adapters.openai_agents import (
    CLEAR,
    ITEM,
    POP,
    REF,
    JournalSession,
    arepair,
    journal_run,
    journal_session_id,
    repair,
)
from journal.adapters.openai_items import READ, cut_tail, project, shown_items
from journal.model import Event
from journal.testing import Ledger

from .conftest import python_child, run_child

set_tracing_disabled(True)  # offline: nothing to export


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- an offline model --------------------------------------------------------------------------------


class ScriptedModel(Model):
    """A ``Model`` that answers from a script: ``respond(input_items)`` returns the output items
    of each call (or a list of canned outputs, one per call). It keeps every input it was given."""

    def __init__(self, respond: Callable[[list[Any]], list[Any]] | list[list[Any]]) -> None:
        self._respond = respond
        self.inputs: list[list[Any]] = []

    async def get_response(
        self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **_: Any
    ):
        items = [{"role": "user", "content": input}] if isinstance(input, str) else [dict(i) for i in input]
        self.inputs.append(items)
        output = self._respond(items) if callable(self._respond) else self._respond.pop(0)
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("the scripted model does not stream")


def cashier(items: list[Any]) -> list[Any]:
    """A model that pays once: it calls ``pay`` unless the conversation shows a ``pay`` call with
    its output. Shown a call without output (what a provider refuses with a 400) it calls pay
    again, so a missing repair shows up in the ledger."""
    calls = [i for i in items if i.get("type") == "function_call" and i.get("name") == "pay"]
    outputs = {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}
    unanswered = [c for c in calls if c["call_id"] not in outputs]
    if unanswered or not calls:
        return [function_call("pay", {"cents": 4200}, call_id=f"pay-{len(calls) + 1}")]
    return [assistant_message(f"Not paying again. Last time: {outputs[calls[-1]['call_id']]}")]


def orphans(items: list[Any]) -> list[str]:
    """The ids of function calls without an output in a model input."""
    answered = {i.get("call_id") for i in items if i.get("type") == "function_call_output"}
    return [i["call_id"] for i in items if i.get("type") == "function_call" and i["call_id"] not in answered]


def make_agent(model: Model, ledger_path: str | Path, *, kill_in_tool: bool = False) -> Agent[Any]:
    """An agent with one tool, ``pay``, whose side effect is a line in the ledger (fsynced)."""
    ledger = Ledger(ledger_path)

    @function_tool
    def pay(cents: int) -> str:
        """Pay an amount in cents."""
        ledger.record(call="pay", cents=cents)
        if kill_in_tool:
            os.kill(os.getpid(), signal.SIGKILL)  # right after the side effect
        return f"paid {cents} cents"

    return Agent(name="cashier", instructions="Pay the invoice once.", model=model, tools=[pay])


ROUND_TRIP: list[dict[str, Any]] = [
    {"role": "user", "content": "Hello"},
    {"role": "user", "content": [{"type": "input_text", "text": "こんにちは 😊"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "Robert'); DROP TABLE students;--", "annotations": [], "logprobs": []}
        ],
    },
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup", "arguments": '{"q": "O\'Reilly"}'},
    {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "lookup", "arguments": "not json"},
    {"type": "function_call_output", "call_id": "call_1", "output": "found"},
    {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "structured"}]},
    {"role": "assistant", "content": '"SELECT * FROM users WHERE name = "admin";"'},
    {"role": "system", "content": "be brief", "nested": {"deep": [1, 2.5, None, True, {"x": ""}]}},
]


# -- the contract: SQLiteSession and JournalSession behave alike ------------------------------------


@pytest.fixture(params=["sqlite", "journal"])
def make(request: pytest.FixtureRequest, tmp_path: Path):
    """A session factory for one implementation; every session made shares one file."""
    made: list[Any] = []

    def factory(session_id: str, **kwargs: Any) -> Any:
        if request.param == "sqlite":
            session = SQLiteSession(session_id, tmp_path / "sqlite.db", **kwargs)
        else:
            session = JournalSession(session_id, tmp_path / "journal.db", **kwargs)
        made.append(session)
        return session

    yield factory
    for session in made:
        session.close()


def contents(items: list[Any]) -> list[Any]:
    return [i.get("content") for i in items]


def test_contract_items_come_back_deep_equal_in_order_with_their_ids_and_shapes(make) -> None:
    session = make("round-trip")

    async def go() -> None:
        await session.add_items(ROUND_TRIP[:3])
        await session.add_items(ROUND_TRIP[3:])
        assert await session.get_items() == ROUND_TRIP

    run(go())


ODD: list[dict[str, Any]] = [
    {"type": "function_call", "name": "no_id", "arguments": "{}"},
    {"type": "function_call", "call_id": "dup", "name": "t", "arguments": "{}"},
    {"type": "function_call", "call_id": "dup", "name": "t", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "dup", "output": None},
    {"role": "user", "content": None},
    {"type": "computer_call", "call_id": "cc", "action": {"type": "click", "x": 1, "y": 2}},
    {"type": "item_reference", "id": "ref_1"},
]


def test_contract_items_of_odd_or_unknown_shapes_are_kept_as_they_are(make) -> None:
    session = make("odd")

    async def go() -> None:
        await session.add_items(ODD)
        assert await session.get_items() == ODD
        assert await session.pop_item() == ODD[-1]

    run(go())


def test_contract_a_limit_gives_the_latest_items_in_order(make) -> None:
    session = make("limit")
    items = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i}"} for i in range(6)]

    async def go() -> None:
        await session.add_items(items)
        assert await session.get_items() == items
        assert await session.get_items(limit=2) == items[-2:]
        assert await session.get_items(limit=4) == items[-4:]
        assert await session.get_items(limit=10) == items
        assert await session.get_items(limit=0) == []
        assert await session.get_items(limit=-1) == items  # SQLite's LIMIT -1: no limit

    run(go())


def test_contract_session_settings_limit_is_the_default_and_an_explicit_limit_wins(make) -> None:
    session = make("settings", session_settings=SessionSettings(limit=3))
    items = [{"role": "user", "content": f"Message {i}"} for i in range(10)]

    async def go() -> None:
        assert session.session_settings.limit == 3
        await session.add_items(items)
        assert await session.get_items() == items[-3:]
        assert await session.get_items(limit=2) == items[-2:]

    run(go())
    assert make("defaults").session_settings == SessionSettings()


def test_contract_pop_item_takes_items_back_newest_first_until_empty(make) -> None:
    session = make("pop")
    items = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
        {"role": "user", "content": "How are you?"},
    ]

    async def go() -> None:
        assert await session.pop_item() is None
        await session.add_items(items)
        assert await session.pop_item() == items[2]
        assert await session.get_items() == items[:2]
        assert await session.pop_item() == items[1]
        await session.add_items([{"role": "user", "content": "again"}])
        assert contents(await session.get_items()) == ["Hello", "again"]
        assert await session.pop_item() == {"role": "user", "content": "again"}
        assert await session.pop_item() == items[0]
        assert await session.pop_item() is None
        assert await session.get_items() == []

    run(go())


def test_contract_clear_session_empties_it_and_it_takes_new_items(make) -> None:
    session = make("clear")

    async def go() -> None:
        await session.add_items([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}])
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.get_items(limit=1) == []
        assert await session.pop_item() is None
        await session.add_items([{"role": "user", "content": "after"}])
        assert contents(await session.get_items()) == ["after"]
        await session.clear_session()
        await session.clear_session()
        assert await session.get_items() == []

    run(go())


def test_contract_sessions_sharing_a_file_are_isolated(make) -> None:
    one, two = make("session_1"), make("session_2")

    async def go() -> None:
        await one.add_items([{"role": "user", "content": "Session 1 message"}])
        await two.add_items(
            [{"role": "user", "content": "Session 2 message 1"}, {"role": "user", "content": "Session 2 message 2"}]
        )
        assert (await two.pop_item())["content"] == "Session 2 message 2"
        assert contents(await one.get_items()) == ["Session 1 message"]
        assert contents(await two.get_items()) == ["Session 2 message 1"]
        await one.clear_session()
        assert contents(await two.get_items()) == ["Session 2 message 1"]
        assert await one.get_items() == []

    run(go())


def test_contract_an_empty_session_reads_empty_and_pops_nothing(make) -> None:
    session = make("empty")

    async def go() -> None:
        assert await session.get_items() == []
        assert await session.get_items(limit=3) == []
        assert await session.pop_item() is None
        await session.clear_session()
        await session.add_items([])
        assert await session.get_items() == []

    run(go())


def test_contract_many_add_items_keep_their_order(make) -> None:
    session = make("order")

    async def go() -> None:
        for i in range(30):
            await session.add_items([{"role": "user", "content": f"m{i}-{k}"} for k in range(i % 3 + 1)])
        expected = [f"m{i}-{k}" for i in range(30) for k in range(i % 3 + 1)]
        assert contents(await session.get_items()) == expected
        assert contents(await session.get_items(limit=5)) == expected[-5:]

    run(go())


def test_contract_concurrent_adds_from_threads_lose_nothing(make) -> None:
    session = make("threads")
    items = [{"role": "user", "content": f"Message {i}"} for i in range(10)]

    def add(item: dict[str, Any]) -> None:
        asyncio.run(session.add_items([item]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        list(pool.map(add, items))
    got = run(session.get_items())
    assert sorted(contents(got)) == sorted(contents(items))


def test_contract_two_concurrent_add_items_of_the_same_items_keep_each_batch_whole(make) -> None:
    first, second = make("race"), make("race")  # two handles on one session
    batch = [{"role": "user", "content": f"part {k}"} for k in range(20)] + [ROUND_TRIP[4], ROUND_TRIP[6]]

    async def go() -> None:
        await asyncio.gather(first.add_items(batch), second.add_items(batch), first.add_items(batch))
        assert await first.get_items() == batch * 3
        assert await second.get_items(limit=len(batch)) == batch

    run(go())


def test_contract_the_runner_sends_the_sessions_history_to_the_model(make) -> None:
    session = make("runner")
    model = ScriptedModel([[assistant_message("San Francisco")], [assistant_message("California")]])
    agent = Agent(name="test", model=model)

    async def go() -> None:
        first = await Runner.run(agent, "What city is the Golden Gate Bridge in?", session=session)
        second = await Runner.run(agent, "What state is it in?", session=session)
        assert (first.final_output, second.final_output) == ("San Francisco", "California")
        history = await session.get_items()
        assert model.inputs[1] == history[:-1]  # everything saved before the second answer
        assert contents(history)[0] == "What city is the Golden Gate Bridge in?"

    run(go())


@pytest.fixture(scope="module")
def twin_paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("twins")
    return base / "sqlite.db", base / "journal.db"


_OP = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 4)),
    st.tuples(st.just("pop"), st.just(0)),
    st.tuples(st.just("clear"), st.just(0)),
    st.tuples(st.just("get"), st.one_of(st.none(), st.integers(-1, 6))),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_OP, max_size=25))
def test_contract_any_sequence_of_adds_pops_clears_and_reads_answers_as_sqlite_does(twin_paths, ops) -> None:
    session_id = uuid.uuid4().hex
    reference, ours = SQLiteSession(session_id, twin_paths[0]), JournalSession(session_id, twin_paths[1])

    async def go() -> None:
        for n, (op, arg) in enumerate(ops):
            both = (reference, ours)
            if op == "add":
                items = [{"role": "user", "content": f"{n}.{k}", "id": f"i{n}{k}"} for k in range(arg)]
                for session in both:
                    await session.add_items(items)
            elif op == "pop":
                assert await ours.pop_item() == await reference.pop_item()
            elif op == "clear":
                for session in both:
                    await session.clear_session()
            else:
                assert await ours.get_items(limit=arg) == await reference.get_items(limit=arg)
        assert await ours.get_items() == await reference.get_items()

    try:
        run(go())
    finally:
        reference.close()
        ours.close()


# -- what the journal adds ------------------------------------------------------------------------------


def test_items_are_stored_once_in_their_typed_events_derived_in_the_same_batch(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    session = JournalSession("s", path)
    run(session.add_items(ROUND_TRIP))
    back = run(session.get_items())
    session.close()
    assert back == ROUND_TRIP and [json.dumps(i) for i in back] == [json.dumps(i) for i in ROUND_TRIP]  # key order too
    with journal.open(path, readonly=True) as j:
        events = j.events("s")
        assert ITEM not in [e.type for e in events]  # every item is in the typed event derived from it
        assert all(isinstance(e.data["metadata"]["openai_items"], list) for e in events)
        typed = [(e.type, e.data.get("content"), e.key) for e in events]
        assert typed == [
            ("user_message", "Hello", None),
            ("user_message", "こんにちは 😊", None),
            ("assistant_message", "Robert'); DROP TABLE students;--", "oa-calls:call_1"),
            ("tool_result", "found", None),
            ("tool_result", [{"type": "input_text", "text": "structured"}], None),
            ("assistant_message", '"SELECT * FROM users WHERE name = "admin";"', None),
            ("system_message", "be brief", None),
        ]
        request = next(e for e in events if e.type == "assistant_message").data
        assert request["tool_calls"] == [
            {"id": "call_1", "name": "lookup", "arguments": {"q": "O'Reilly"}},
            {"id": "call_2", "name": "lookup", "arguments": "not json"},
        ]
        view = j.provider_view("s")
        assert view.missing == () and [m.role for m in view.messages] == [
            "user",
            "user",
            "assistant",
            "tool",
            "tool",
            "assistant",
            "system",
        ]
        assert j.session("s").meta == {"framework": "openai-agents", "session_id": "s"}
        assert j.check() == []


def test_pop_item_deletes_nothing_and_retracts_the_message_it_took_back(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    session = JournalSession("s", path)

    async def go() -> None:
        await session.add_items([{"role": "user", "content": "keep"}, {"role": "user", "content": "take back"}])
        assert (await session.pop_item())["content"] == "take back"

    run(go())
    session.close()
    with journal.open(path, readonly=True) as j:
        assert [e.type for e in j.events("s")] == ["user_message", "user_message", POP, "retract"]
        assert [m.content for m in j.messages("s")] == ["keep"]


def test_clear_session_is_a_marker_and_purge_erases(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    session = JournalSession("s", path)
    run(session.add_items([{"role": "user", "content": "secret"}]))
    run(session.clear_session())
    with journal.open(path, readonly=True) as j:
        assert [e.type for e in j.events("s")] == ["user_message", CLEAR]  # nothing deleted
    assert run(session.get_items()) == []
    run(session.purge())
    with journal.open(path, readonly=True) as j, pytest.raises(journal.SessionNotFound):
        j.events("s")
    run(session.add_items([{"role": "user", "content": "new"}]))  # a purged session starts over
    assert contents(run(session.get_items())) == ["new"]
    session.close()


def test_get_items_with_a_limit_reads_the_newest_markers_not_the_whole_session(tmp_path: Path) -> None:
    session = JournalSession("long", tmp_path / "j.db", durability="normal")
    items = [{"role": "user", "content": f"m{i}"} for i in range(4000)]
    j = session.journal
    handed: list[int] = []  # how many events each read of the log handed the adapter
    read = j.events

    def counted(*args: Any, **kwargs: Any) -> list[Any]:
        found = read(*args, **kwargs)
        handed.append(len(found))
        return found

    async def go() -> tuple[int, int]:
        await session.add_items(items)
        for _ in range(3):
            await session.pop_item()
        j.events = counted  # type: ignore[method-assign]  # this instance's reads, counted
        handed.clear()
        every = await session.get_items()
        whole = sum(handed)
        handed.clear()
        last = await session.get_items(limit=3)
        tail = sum(handed)
        assert every == items[:-3] and last == items[-6:-3]
        return whole, tail

    whole, tail = run(go())
    session.close()
    # A count, not a clock: the tail read touches the newest markers only, not the 4,000 items.
    assert whole >= 4000 and tail <= 64, (whole, tail)


def test_framework_ids_the_journal_refuses_are_mapped_and_kept_in_the_meta(tmp_path: Path) -> None:
    weird = ["user 42", "ユーザー", "x" * 300, "tab\there"]
    ids = [journal_session_id(w) for w in weird]
    assert len(set(ids)) == len(ids) and all(i.startswith("openai-agents-") for i in ids)
    assert journal_session_id("user-42") == "user-42"
    with pytest.raises(journal.InvalidArgument):
        journal_session_id(42)  # type: ignore[arg-type]
    path = tmp_path / "j.db"
    for name in weird:
        session = JournalSession(name, path)
        run(session.add_items([{"role": "user", "content": name}]))
        assert contents(run(session.get_items())) == [name]
        session.close()
    with journal.open(path, readonly=True) as j:
        assert sorted(s.meta["session_id"] for s in j.sessions(meta={"framework": "openai-agents"})) == sorted(weird)


def test_an_open_journal_or_async_journal_can_be_given_and_is_left_open(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        session = JournalSession("sync", j)
        run(session.add_items([{"role": "user", "content": "a"}]))
        session.close()
        assert j.count("sync") == 1  # still open: the caller closes it

    async def with_async() -> None:
        async with journal.aio.open(path) as aj:
            session = JournalSession("async", aj)
            model = ScriptedModel([[function_call("pay", {"cents": 1}, call_id="c-1")], [assistant_message("ok")]])
            await journal_run(make_agent(model, tmp_path / "ledger"), "pay", session=session)
            assert contents(await session.get_items(limit=1))[0][0]["text"] == "ok"
            assert (await aj.scan()).clean

    run(with_async())
    with journal.open(path, readonly=True) as j:
        assert "tool_call" in [e.type for e in j.events("async")]


def test_a_run_records_its_turn_answer_dispatch_before_the_tool_result_and_end(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    seen_inside: list[list[str]] = []

    @function_tool
    def pay(cents: int) -> str:
        """Pay."""
        with journal.open(path, readonly=True) as fresh:  # another connection: what is durable
            seen_inside.append([e.type for e in fresh.events("bot")])
        return f"paid {cents}"

    model = ScriptedModel(
        [
            [assistant_message("paying", item_id="m1"), function_call("pay", {"cents": 4200}, call_id="call-1")],
            [assistant_message("done", item_id="m2")],
        ]
    )
    session = JournalSession("bot", path)
    hooks = session.run_hooks()  # the plug-in line with Runner.run itself
    result = run(Runner.run(Agent(name="a", model=model, tools=[pay]), "pay the invoice", session=session, hooks=hooks))
    assert result.final_output == "done"
    session.close()
    assert seen_inside and seen_inside[0][-3:] == ["step_start", "assistant_message", "tool_call"]  # G6
    with journal.open(path, readonly=True) as j:
        typed = [(e.type, e.data) for e in j.events("bot")]
        assert [t for t, _ in typed] == [
            "user_message", "turn_start", "step_start", "assistant_message", "tool_call", "tool_result",
            REF, "step_end", "step_start", "assistant_message", "step_end", "turn_end",
        ]  # fmt: skip
        # The items saved after the tool (the text, the call, its output) refer to the answer and
        # the result the hooks wrote: only the text item's id is not in them.
        assert dict(typed)[REF] == {"items": [[3, {"id": "m1"}], [3, {"$": 0}], [5]]}
        (request,) = [d for t, d in typed if t == "assistant_message" and d.get("tool_calls")]
        assert request["tool_calls"] == [{"id": "call-1", "name": "pay", "arguments": {"cents": 4200}}]
        assert dict(typed)["tool_call"]["id"] == "call-1"
        assert dict(typed)["tool_result"] == {"tool_call_id": "call-1", "content": "paid 4200"}
        assert dict(typed)["turn_end"]["reason"] == "complete"
        assert j.scan().clean and j.check() == []
        assert [m.content for m in j.messages("bot")] == ["pay the invoice", "paying", "paid 4200", "done"]


def test_a_reused_call_id_is_refused_at_dispatch_and_the_tool_does_not_run_twice(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    session = JournalSession("s", tmp_path / "j.db")
    model = ScriptedModel(
        lambda items: (
            [function_call("pay", {"cents": 1}, call_id="same")]
            if items[-1].get("role") == "user"
            else [assistant_message("ok")]
        )
    )
    agent = make_agent(model, ledger.path)
    run(journal_run(agent, "pay", session=session))
    with pytest.raises(Exception, match="dispatched"):
        run(journal_run(agent, "pay again", session=session))
    assert ledger.count(call="pay") == 1
    with journal.open(tmp_path / "j.db", readonly=True) as j:
        assert j.scan().clean and j.check() == []
    assert orphans(run(session.get_items())) == []
    session.close()


def test_a_run_that_raises_in_a_tool_is_closed_honestly_and_the_session_gets_no_orphan(tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    @function_tool(failure_error_function=None)
    def explode() -> str:
        """Fails after its side effect (maybe)."""
        raise RuntimeError("boom")

    model = ScriptedModel([[function_call("explode", {}, call_id="x-1")]])
    session = JournalSession("s", path)
    with pytest.raises(Exception, match="boom"):
        run(journal_run(Agent(name="a", model=model, tools=[explode]), "go", session=session))
    items = run(session.get_items())
    assert orphans(items) == [] and [i.get("type") for i in items[1:]] == ["function_call", "function_call_output"]
    assert "MAY have run" in items[-1]["output"]
    with journal.open(path, readonly=True) as j:
        assert j.scan().clean and j.check() == []
        (result,) = [e for e in j.events("s") if e.type == "tool_result"]
        assert result.data["metadata"]["risk"] == "tool_outcome_unknown"
    session.close()


def test_g5_a_result_that_returns_after_the_runs_repair_is_kept_as_late_evidence(tmp_path: Path) -> None:
    """``refund`` raises; ``pay`` has paid and its output guardrail is still checking it when the
    SDK gives up on it (it waits a tenth of a second) and raises: ``journal_run`` repairs the
    turn (pay: MAY have run). A second later the SDK hands the hooks pay's real result: kept, as
    ``tool_result_late`` beside the answer it came after (it was dropped: the turn was closed)."""
    from agents.tool_guardrails import ToolGuardrailFunctionOutput, tool_output_guardrail

    ledger = Ledger(tmp_path / "ledger")

    @tool_output_guardrail
    async def slow_check(data: Any) -> ToolGuardrailFunctionOutput:
        await asyncio.sleep(1.0)
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(tool_output_guardrails=[slow_check])
    async def pay(cents: int) -> str:
        """Pay."""
        ledger.record(cents=cents)
        return f"paid {cents}"

    @function_tool(failure_error_function=None)
    async def refund() -> str:
        """Refund."""
        await asyncio.sleep(0.3)
        raise RuntimeError("refund service down")

    model = ScriptedModel(
        [[function_call("pay", {"cents": 100}, call_id="pay-1"), function_call("refund", {}, call_id="refund-1")]]
    )
    session = JournalSession("s", tmp_path / "j.db")
    agent = Agent(name="a", model=model, tools=[pay, refund])

    async def go() -> None:
        with pytest.raises(Exception, match="refund service down"):
            await journal_run(agent, "pay and refund", session=session)
        for _ in range(100):  # pay's task goes on in the background after the run raised
            await asyncio.sleep(0.05)
            if session.journal.events("s", types=["tool_result_late"]):
                break

    run(go())
    assert [e["cents"] for e in ledger.entries()] == [100]
    events = session.journal.events("s")
    results = [
        (e.data["tool_call_id"], e.data.get("metadata", {}).get("risk")) for e in events if e.type == "tool_result"
    ]
    assert results == [("pay-1", "tool_outcome_unknown"), ("refund-1", "tool_outcome_unknown")]
    (late,) = [e for e in events if e.type == "tool_result_late"]
    assert late.data["tool_call_id"] == "pay-1" and late.data["content"] == "paid 100"
    assert session.journal.scan().clean and session.journal.check() == []
    session.close()


def test_repair_leaves_a_call_awaiting_approval_alone(tmp_path: Path) -> None:
    @function_tool(needs_approval=True)
    def transfer(cents: int) -> str:
        """Move money, with a human's approval."""
        return "moved"

    model = ScriptedModel([[function_call("transfer", {"cents": 5}, call_id="t-1")]])
    session = JournalSession("s", tmp_path / "j.db")
    result = run(journal_run(Agent(name="a", model=model, tools=[transfer]), "move it", session=session))
    assert result.interruptions
    done = repair(session)
    assert (done.added, done.unanswered) == ((), ("t-1",))
    assert orphans(run(session.get_items())) == ["t-1"]  # still the SDK's to resume
    session.close()


def _transfer_agent(ran: list[int]) -> Agent[Any]:
    """An agent whose model asks for one ``transfer`` (a tool a human must approve; it notes
    each run in ``ran``), then answers "done"."""

    @function_tool(needs_approval=True)
    def transfer(cents: int) -> str:
        """Move money, with a human's approval."""
        ran.append(cents)
        return f"moved {cents}"

    model = ScriptedModel([[function_call("transfer", {"cents": 5}, call_id="t-1")], [assistant_message("done")]])
    return Agent(name="a", model=model, tools=[transfer])


@pytest.mark.parametrize("approved", [True, False])
def test_g6_an_approved_tool_is_dispatched_before_it_runs_by_the_resumed_run(tmp_path: Path, approved: bool) -> None:
    """The SDK runs a call a human approved before the resumed run's agent starts: the hooks
    open the run's turn there and commit the dispatch first (it ran with none, so a kill inside
    it paid again on the next resume); a rejected call is never dispatched."""
    ran: list[int] = []
    agent = _transfer_agent(ran)
    path = tmp_path / "j.db"
    session = JournalSession("s", path)
    first = run(journal_run(agent, "move it", session=session))
    state = first.to_state()
    for interruption in first.interruptions:
        state.approve(interruption) if approved else state.reject(interruption)
    run(journal_run(agent, state, session=session))
    session.close()
    assert ran == ([5] if approved else [])
    with journal.open(path, readonly=True) as j:
        kinds = [e.type for e in j.events("s") if e.type in ("turn_start", "turn_end", "tool_call", "tool_result")]
        if approved:  # the resumed run's turn holds the dispatch, then the result
            assert kinds == ["turn_start", "turn_end", "turn_start", "tool_call", "tool_result", "turn_end"]
        else:  # the SDK's "not approved" answer, saved before the resumed run's agent starts
            assert kinds == ["turn_start", "turn_end", "tool_result", "turn_start", "turn_end"]
        assert j.scan().clean and j.provider_view("s").missing == () and j.check() == []


@pytest.mark.parametrize("resume", ["journal_run", "hooks"])
def test_g6_a_call_a_plain_run_paused_for_is_dispatched_by_the_hooked_run_that_resumes_it(
    tmp_path: Path, resume: str
) -> None:
    """A plain ``Runner.run`` (no hooks: no journal turn) paused for a human's approval; the
    approved call resumed with the hooks opens a turn and is dispatched there before it runs
    (the journal refused it as "requested outside a turn", the tool never ran and the call stayed
    unanswered)."""
    ran: list[int] = []
    agent = _transfer_agent(ran)
    path = tmp_path / "j.db"
    session = JournalSession("s", path)
    first = run(Runner.run(agent, "move it", session=session))
    state = first.to_state()
    state.approve(first.interruptions[0])
    if resume == "journal_run":
        done = run(journal_run(agent, state, session=session))
    else:
        done = run(Runner.run(agent, state, session=session, hooks=session.run_hooks()))
    assert done.final_output == "done" and ran == [5]
    items = run(session.get_items())
    assert [(i.get("type"), i.get("output")) for i in items if i.get("call_id") == "t-1"] == [
        ("function_call", None),
        ("function_call_output", "moved 5"),
    ]
    session.close()
    with journal.open(path, readonly=True) as j:
        kinds = [e.type for e in j.events("s") if e.type in ("turn_start", "turn_end", "tool_call", "tool_result")]
        assert kinds == ["turn_start", "tool_call", "tool_result", "turn_end"]
        assert j.scan().clean and j.provider_view("s").missing == () and j.check() == []


PAUSED_AND_GONE = """
import asyncio, json, sys
from agents import Agent, Runner, function_tool
from agents.testing.model import assistant_message, function_call
from journal.adapters.openai_agents import JournalSession
from tests.test_adapter_openai_agents import ScriptedModel


@function_tool(needs_approval=True)
def transfer(cents: int) -> str:
    \"\"\"Move money, with a human's approval.\"\"\"
    raise AssertionError("not approved here")


async def main():
    model = ScriptedModel([[function_call("transfer", {"cents": 5}, call_id="t-1")], [assistant_message("done")]])
    session = JournalSession("s", sys.argv[1])
    agent = Agent(name="a", model=model, tools=[transfer])
    paused = await Runner.run(agent, "move it", session=session, hooks=session.run_hooks())  # its turn stays open
    with open(sys.argv[2], "w") as out:
        json.dump(paused.to_state().to_json(), out)
    session.close()  # the process ends with the run paused: its turn's owner is gone


asyncio.run(main())
"""


def test_an_approval_that_comes_after_a_recovery_answered_its_call_says_so_and_runs_nothing(tmp_path: Path) -> None:
    """A run with the hooks (``Runner.run``, not ``journal_run``) paused for a human's approval and
    its process ended (documented: it reads as a crash, and the next read answers the waiting
    call "did not run"). The approved
    resume is refused, naming what happened and what to do (it said the call "already has a
    result (put_result keeps a later one as tool_result_late)"), and the tool does not run."""
    from agents import RunState

    path, saved = tmp_path / "j.db", tmp_path / "state.json"
    done = run_child(PAUSED_AND_GONE, str(path), str(saved))
    assert done.returncode == 0, done.stderr
    ran: list[int] = []

    @function_tool(needs_approval=True)
    def transfer(cents: int) -> str:
        """Move money, with a human's approval."""
        ran.append(cents)
        return f"moved {cents}"

    agent = Agent(name="a", model=ScriptedModel([[assistant_message("done")]]), tools=[transfer])
    session = JournalSession("s", path)
    state = run(RunState.from_json(agent, json.loads(saved.read_text())))
    state.approve(state.get_interruptions()[0])
    with pytest.raises(Exception, match="approved after a recovery answered it"):
        run(journal_run(agent, state, session=session))
    assert ran == []
    session.close()


RACER = """
import asyncio, sys
from journal.adapters.openai_agents import JournalSession

db, who, mode = sys.argv[1:4]
session = JournalSession("shared", db)
print("ready", flush=True)
sys.stdin.readline()  # both start together


async def go():
    if mode == "add":
        for _ in range(20):
            await session.add_items([{"role": "user", "content": f"part {k}"} for k in range(8)])
    else:
        for _ in range(30):
            print((await session.pop_item())["content"], flush=True)


asyncio.run(go())
session.close()
"""


def _race(path: Path, mode: str) -> list[str]:
    """Run two racers that start at the same moment; their output lines."""
    import subprocess

    racers = [python_child(RACER, str(path), name, mode, stdin=subprocess.PIPE) for name in ("a", "b")]
    for racer in racers:
        assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    outs = []
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        outs += out.splitlines()
    return outs


def test_two_processes_adding_the_same_items_keep_each_batch_whole_and_lose_nothing(tmp_path: Path) -> None:
    _race(tmp_path / "j.db", "add")
    session = JournalSession("shared", tmp_path / "j.db")
    got = contents(run(session.get_items()))
    session.close()
    assert got == [f"part {k}" for k in range(8)] * 40


def test_two_processes_popping_at_once_take_different_items(tmp_path: Path) -> None:
    session = JournalSession("shared", tmp_path / "j.db")
    items = [{"role": "user", "content": f"m{i:03}"} for i in range(100)]
    run(session.add_items(items))
    popped = _race(tmp_path / "j.db", "pop")
    assert len(popped) == 60 and len(set(popped)) == 60  # none taken twice
    assert run(session.get_items()) == items[:40]
    session.close()


HOLDER = """
import sys, time, journal
j = journal.open(sys.argv[1])
j.create_session("busy")
j.turn_start("busy")
print("holding", flush=True)
time.sleep(60)
"""


def test_a_session_another_live_process_is_running_is_refused_before_the_model_is_called(tmp_path: Path) -> None:
    holder = python_child(HOLDER, str(tmp_path / "j.db"))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        model = ScriptedModel([[assistant_message("never")]])
        session = JournalSession("busy", tmp_path / "j.db")
        with pytest.raises(journal.TurnHeld):
            run(journal_run(Agent(name="a", model=model), "hi", session=session))
        assert model.inputs == [] and repair(session).live_owner is not None
        session.close()
    finally:
        holder.kill()
        holder.wait()


def test_g9_hooks_reused_after_a_run_that_raised_refuse_the_next_run_until_it_is_repaired(tmp_path: Path) -> None:
    """One ``JournalRunHooks`` for every run: the first run's tool pays and raises (no error
    function), so the run ends with its turn open. The next run with the same hooks is refused
    before the model is asked (the runner has read the items: a repair then would come too late
    and the model, shown no call, would pay again); after ``repair`` the same hooks run it, and
    the model sees the call answered (MAY have run)."""
    ledger = Ledger(tmp_path / "ledger.jsonl")

    async def pay(cents: int) -> str:
        """Pay an amount in cents."""
        ledger.record(call="pay", cents=cents)
        raise ConnectionResetError("gateway timeout after charging")

    session = JournalSession("bot-1", tmp_path / "j.db")
    hooks = session.run_hooks()
    agent = Agent(name="cashier", model=ScriptedModel(cashier), tools=[function_tool(pay, failure_error_function=None)])
    with pytest.raises(Exception, match="gateway timeout"):
        run(Runner.run(agent, "Pay the 42 euro invoice.", session=session, hooks=hooks))
    model = ScriptedModel(cashier)
    again = make_agent(model, ledger.path)
    with pytest.raises(journal.OpenTurnError, match="repair"):
        run(Runner.run(again, "Did it go through?", session=session, hooks=hooks))
    assert model.inputs == [] and ledger.count(call="pay") == 1
    recovered = repair(session).recovered
    assert [e.data.get("tool_call_id") for e in recovered if e.type == "tool_result"] == ["pay-1"]
    run(Runner.run(again, "Did it go through?", session=session, hooks=hooks))
    assert ledger.count(call="pay") == 1
    (seen,) = model.inputs
    assert orphans(seen) == [] and "MAY have run" in str([i for i in seen if i.get("type") == "function_call_output"])
    session.close()


@pytest.mark.parametrize(
    ("approved", "same_hooks"), [(True, True), (False, True), (True, False)], ids=["approved", "rejected", "fresh"]
)
def test_hooks_reused_across_a_pause_for_approval_resume_the_run_and_are_never_refused(
    tmp_path: Path, approved: bool, same_hooks: bool
) -> None:
    """A run that pauses for a human's approval (no crash, nothing raised) leaves its turn open;
    the same hooks resume it from its state, approved or rejected, and the next run goes on: a
    pause is not the run that ended inside a tool that the hooks refuse to go on from. New hooks
    (``Runner.run(..., hooks=session.run_hooks())`` each time) take the paused turn over to run
    the approved call."""
    ledger = Ledger(tmp_path / "ledger.jsonl")

    @function_tool(needs_approval=True)
    async def refund(cents: int) -> str:
        """Refund an amount in cents (a human approves it first)."""
        ledger.record(call="refund", cents=cents)
        return f"refunded {cents}"

    def refunder(items: list[Any]) -> list[Any]:
        if items[-1].get("type") == "function_call_output":
            return [assistant_message("Done: " + str(items[-1]["output"])[:40])]
        return [function_call("refund", {"cents": 100}, call_id=f"ref-{len(items)}")]

    async def scenario() -> tuple[Any, Any]:
        session = JournalSession("bot-1", tmp_path / "j.db")
        hooks = session.run_hooks()
        agent = Agent(name="refunder", model=ScriptedModel(refunder), tools=[refund])
        paused = await Runner.run(agent, "Refund the order.", session=session, hooks=hooks)
        state = paused.to_state()
        for interruption in paused.interruptions:
            (state.approve if approved else state.reject)(interruption)
        if not same_hooks:
            hooks = session.run_hooks()
        resumed = await Runner.run(agent, state, session=session, hooks=hooks)
        again = await Runner.run(agent, "And the next one.", session=session, hooks=hooks)
        session.close()
        return resumed, again

    resumed, again = run(scenario())
    assert ledger.count(call="refund") == (1 if approved else 0)
    assert str(resumed.final_output).startswith("Done: " + ("refunded 100" if approved else ""))
    assert again.interruptions  # the next run asks for its own approval: not refused


def test_g9_an_approved_tool_that_raised_after_paying_leaves_the_next_run_refused_until_repair(tmp_path: Path) -> None:
    """The approved call's tool pays, then raises (no error function): the resumed run ends
    inside it. The hooks' next run is refused naming ``repair`` (it went on in the open turn, and
    the call was left owed in a turn closed as complete: no recovery answered it); after
    ``repair`` the model is told the call MAY have run and nothing is paid again."""
    ledger = Ledger(tmp_path / "ledger.jsonl")

    async def refund(cents: int) -> str:
        """Refund an amount in cents (a human approves it first)."""
        ledger.record(call="refund", cents=cents)
        raise ConnectionResetError("gateway timeout after the refund")

    def refunder(items: list[Any]) -> list[Any]:
        if any(i.get("type") == "function_call_output" for i in items):
            return [assistant_message("status: " + str(items[-1].get("output"))[:60])]
        if any(i.get("type") == "function_call" for i in items):
            return [assistant_message("status: nothing seen")]
        return [function_call("refund", {"cents": 100}, call_id="ref-1")]

    async def scenario() -> ScriptedModel:
        session = JournalSession("bot-1", tmp_path / "j.db")
        hooks = session.run_hooks()
        tool = function_tool(refund, needs_approval=True, failure_error_function=None)
        agent = Agent(name="refunder", model=ScriptedModel(refunder), tools=[tool])
        paused = await Runner.run(agent, "Refund the order.", session=session, hooks=hooks)
        state = paused.to_state()
        state.approve(paused.interruptions[0])
        with pytest.raises(Exception, match="gateway timeout"):
            await Runner.run(agent, state, session=session, hooks=hooks)
        model = ScriptedModel(refunder)
        later = Agent(name="refunder", model=model, tools=[tool])
        with pytest.raises(journal.OpenTurnError, match="repair"):
            await Runner.run(later, "Did it go through?", session=session, hooks=hooks)
        assert model.inputs == []
        await arepair(session)
        await Runner.run(later, "Did it go through?", session=session, hooks=hooks)
        session.close()
        return model

    (seen,) = run(scenario()).inputs
    assert ledger.count(call="refund") == 1 and orphans(seen) == []
    assert "MAY have run" in str([i.get("output") for i in seen if i.get("type") == "function_call_output"])


# -- killed mid-run ---------------------------------------------------------------------------------------

KILLED = """
import asyncio, os, signal, sys
from agents import set_tracing_disabled
from journal.adapters.openai_agents import JournalRunHooks, JournalSession, journal_run
from tests.test_adapter_openai_agents import ScriptedModel, cashier, make_agent

db, ledger, point = sys.argv[1:4]
set_tracing_disabled(True)


class DieAfterTheResult(JournalRunHooks):
    async def on_tool_end(self, context, agent, tool, result):
        await super().on_tool_end(context, agent, tool, result)
        os.kill(os.getpid(), signal.SIGKILL)  # the result is recorded, the runner never saved it


session = JournalSession("bot-1", db)
hooks = DieAfterTheResult(session) if point == "after_result" else session.run_hooks()
agent = make_agent(ScriptedModel(cashier), ledger, kill_in_tool=point == "in_tool")
asyncio.run(journal_run(agent, "Pay the 42 euro invoice.", session=session, hooks=hooks))
print("not killed")
"""


@pytest.mark.parametrize("point", ["in_tool", "after_result"])
def test_g9_killed_right_after_a_payment_the_repaired_session_never_pays_twice(tmp_path: Path, point: str) -> None:
    db, ledger = tmp_path / "j.db", Ledger(tmp_path / "ledger.jsonl")
    done = run_child(KILLED, str(db), str(ledger.path), point)
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    assert ledger.count(call="pay") == 1

    with journal.open(db) as j:
        report = j.scan()
        assert report.sessions == ["bot-1"]
        pending = [(c.session_id, c.call_id) for c in report.pending_calls]
        assert pending == ([("bot-1", "pay-1")] if point == "in_tool" else [])

    session = JournalSession("bot-1", db)
    # The runner saved no call and no recovery ran yet, but the killed process is gone: the read
    # recovers the turn it left open first, and the items project what that recovery wrote.
    _, call, answer = run(session.get_items())
    assert [call["type"], answer["type"]] == ["function_call", "function_call_output"]
    assert call["call_id"] == answer["call_id"] == "pay-1"
    assert call["arguments"] == '{"cents":4200}'  # the call as the model sent it
    output = answer["output"]
    if point == "in_tool":
        assert "MAY have run" in output and "verify before retrying" in output
        with journal.open(db, readonly=True) as j:
            synthetic = [e for e in j.events("bot-1", types=["tool_result"])]
        assert synthetic[0].data["metadata"]["risk"] == "tool_outcome_unknown"
    else:
        assert output == "paid 4200 cents"  # the real result, recorded before the kill
    fixed = repair(session)  # nothing left to do, and it says so
    assert (fixed.recovered, fixed.added, fixed.unanswered) == ((), (), ())

    model = ScriptedModel(cashier)
    result = run(journal_run(make_agent(model, ledger.path), "Did the payment go through?", session=session))
    assert result.final_output.startswith("Not paying again")
    assert all(orphans(sent) == [] for sent in model.inputs)  # no provider 400
    assert ledger.count(call="pay") == 1  # the tool was not run again
    session.close()
    with journal.open(db, readonly=True) as j:
        assert j.scan().clean and j.check() == [] and j.integrity_check() == ["ok"]
        assert [m.role for m in j.messages("bot-1")][-2:] == ["user", "assistant"]


KILLED_AT = """
import asyncio, os, signal, sys
from agents import set_tracing_disabled
from journal.adapters.openai_agents import JournalSession, journal_run
from tests.test_adapter_openai_agents import ScriptedModel, cashier, make_agent

db, ledger, model_call = sys.argv[1:4]
set_tracing_disabled(True)


class DiesInCall(ScriptedModel):
    async def get_response(self, *args, **kwargs):
        if len(self.inputs) + 1 == int(model_call or 0):
            os.kill(os.getpid(), signal.SIGKILL)  # the model is being asked: nothing answered
        return await super().get_response(*args, **kwargs)


session = JournalSession("bot-1", db)
asyncio.run(journal_run(make_agent(DiesInCall(cashier), ledger), "Pay the 42 euro invoice.", session=session))
print("not killed")
"""

# Where a run of the cashier commits (JOURNAL_CRASH_AT points), and whether the tool has paid
# by then: the input; the turn; the step with the answer asking to pay; the dispatch (G6: the
# tool runs after it); the result; the step's items with step_end; the answer with turn_end.
COMMIT_POINTS = [
    ("append_many.after_commit:1", False),
    ("turn_start.after_commit", False),
    ("append_many.before_commit:2", False),
    ("append_many.after_commit:2", False),
    ("dispatch.before_commit", False),
    ("dispatch.after_commit", False),  # the tool has not run yet: the kill comes first
    ("put_result.before_commit", True),
    ("put_result.after_commit", True),
    ("append_many.after_commit:3", True),
    ("append_many.before_commit:4", True),
]


def _second_run_after_repair(db: Path, ledger: Ledger) -> tuple[Any, list[Any], Any]:
    """Repair the killed session, check it is idempotent, and run the cashier again: what repair
    did, the items the second run was shown, and its result."""
    session = JournalSession("bot-1", db)
    fixed = repair(session)
    assert repair(session).recovered == () and fixed.added == ()
    shown = run(session.get_items())
    model = ScriptedModel(cashier)
    result = run(journal_run(make_agent(model, ledger.path), "Did the payment go through?", session=session))
    assert all(orphans(sent) == [] for sent in model.inputs)  # no provider 400
    session.close()
    with journal.open(db, readonly=True) as j:
        assert j.scan().clean and j.check() == [] and j.integrity_check() == ["ok"]
    return fixed, shown, result


@pytest.mark.parametrize("model_call", [1, 2])
def test_killed_during_a_model_call_the_turn_has_no_open_step_and_repair_closes_it(
    tmp_path: Path, model_call: int
) -> None:
    db, ledger = tmp_path / "j.db", Ledger(tmp_path / "ledger.jsonl")
    done = run_child(KILLED_AT, str(db), str(ledger.path), str(model_call))
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    with journal.open(db) as j:
        report = j.scan()
        assert report.sessions == ["bot-1"] and report.pending_calls == ()
        state = j.turn_state("bot-1")
        # Nothing is written on the way to the model: the turn's steps are all closed.
        assert state is not None and not state.step_open and state.steps == model_call - 1
    fixed, shown, result = _second_run_after_repair(db, ledger)
    assert orphans(shown) == []  # the runner had saved the first step's call with its output
    assert [e.type for e in fixed.recovered] == ["turn_end"] and fixed.recovered[0].data["reason"] == "interrupted"
    assert ledger.count(call="pay") == 1  # paid in the second run (1) or in the first, not again (2)
    if model_call == 2:
        assert result.final_output.startswith("Not paying again")


@pytest.mark.parametrize("point, paid", COMMIT_POINTS)
def test_killed_at_any_commit_of_a_run_repair_leaves_no_orphan_and_never_pays_twice(
    tmp_path: Path, point: str, paid: bool
) -> None:
    db, ledger = tmp_path / "j.db", Ledger(tmp_path / "ledger.jsonl")
    done = run_child(KILLED_AT, str(db), str(ledger.path), "", env={"JOURNAL_CRASH_AT": point})
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    assert ledger.count(call="pay") == int(paid)
    with journal.open(db) as j:
        dispatched = {c.call_id for c in j.scan().pending_calls}
    _, shown, result = _second_run_after_repair(db, ledger)
    outputs = [i["output"] for i in shown if i.get("type") == "function_call_output"]
    if paid or dispatched:  # the call may have run: the model is told so, and does not pay again
        assert ledger.count(call="pay") == int(paid) and result.final_output.startswith("Not paying again")
        assert all(o == "paid 4200 cents" or "MAY have run" in o for o in outputs)
    else:
        assert ledger.count(call="pay") <= 1


def test_a_one_tool_step_costs_seven_commits(tmp_path: Path) -> None:
    """The hooks' bookkeeping rides on the writes a step needs: a regression shows up here."""
    from journal import crash

    ledger = Ledger(tmp_path / "ledger.jsonl")
    session = JournalSession("s", tmp_path / "j.db")
    commits: list[str] = []

    def seen(point: str) -> None:
        if point.endswith(".after_commit"):
            commits.append(point.partition(".")[0])

    async def steps() -> list[list[str]]:
        per_step = []
        for n in range(3):
            agent = make_agent(ScriptedModel(cashier_per_message), ledger.path)
            with crash.observing(seen):
                await journal_run(agent, f"pay invoice {n}", session=session)
            per_step.append(sorted(commits))
            commits.clear()
        return per_step

    per_step = run(steps())
    session.close()
    expected = sorted(["append_many"] * 4 + ["turn_start", "dispatch", "put_result"])
    assert per_step[1:] == [expected, expected]  # the first step also creates the session
    assert per_step[0] == sorted(expected + ["create_session"])
    with journal.open(tmp_path / "j.db", readonly=True) as j:
        assert j.scan().clean and j.check() == []
        assert ledger.count(call="pay") == 3


def cashier_per_message(items: list[Any]) -> list[Any]:
    """Pays once per user message: a call after it, then an answer once the call has output."""
    if items[-1].get("type") == "function_call_output":
        return [assistant_message(f"Paid: {items[-1]['output']}")]
    calls = sum(1 for i in items if i.get("type") == "function_call")
    return [function_call("pay", {"cents": 100}, call_id=f"pay-{calls + 1}")]


def test_a_write_by_someone_else_during_the_turn_is_checked_and_a_closed_turn_is_not_written_to(tmp_path: Path) -> None:
    """The hooks fence their bookkeeping by the session's count: another writer's event sends
    the write through a read of the turn, which goes on while the turn is the run's and raises
    ``LeaseLost`` once recovery closed it (nothing of the run lands after its turn_end)."""
    path = tmp_path / "j.db"
    mode: list[str] = ["note"]

    @function_tool
    def pay(cents: int) -> str:
        """Pay."""
        with journal.open(path) as other:  # another connection, as another process would be
            if mode[0] == "note":
                other.append("s", "x.note", {"by": "someone else"})
            else:
                other.recover("s")  # this process owns the turn, so recovery closes it
        return f"paid {cents}"

    session = JournalSession("s", path)
    agent = Agent(name="a", model=ScriptedModel(cashier_per_message), tools=[pay])
    run(journal_run(agent, "pay", session=session))
    with journal.open(path, readonly=True) as j:
        typed = [e.type for e in j.events("s")]
        assert typed == [
            "user_message", "turn_start", "step_start", "assistant_message", "tool_call", "x.note", "tool_result",
            REF, "step_end", "step_start", "assistant_message", "step_end", "turn_end",
        ]  # fmt: skip
        assert j.scan().clean and j.check() == []
        assert [e.data["reason"] for e in j.events("s", types=["turn_end"])] == ["complete"]

    mode[0] = "recover"
    with pytest.raises(journal.LeaseLost):
        run(journal_run(agent, "pay again", session=session))
    with journal.open(path, readonly=True) as j:
        events = j.events("s")
        (end,) = [e for e in events if e.type == "turn_end" and e.data["reason"] == "interrupted"]
        after = [e.type for e in events if e.seq > end.seq]
        assert "step_end" not in after and "turn_end" not in after  # not written to a closed turn
        assert (
            ITEM not in after and REF not in after
        )  # LeaseLost wrote nothing: a retried add_items cannot store them twice
        assert j.scan().clean and j.check() == []
    assert orphans(run(session.get_items())) == []
    session.close()


def test_the_example_runs_offline_and_pays_once(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "openai_agents_bot.py"
    done = run_child(example.read_text(), str(tmp_path / "agent.db"))
    assert done.returncode == 0, done.stderr
    assert "MAY have run" in done.stdout
    assert "payments made: ['A-1', 'B-2']" in done.stdout


def test_importing_the_adapter_without_openai_agents_names_the_extra() -> None:
    done = run_child(
        """
        import sys
        sys.modules["agents"] = None  # as if openai-agents were not installed
        try:
            import journal.adapters.openai_agents
        except ImportError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "agent-journal[openai-agents]" in done.stdout


# -- the view is a projection of the typed log (pure, table-tested) -----------------------------------


def _log(*specs: tuple[str, dict[str, Any]]) -> list[Event]:
    """Events in seq order from (type, data) pairs."""
    return [Event("s", seq, kind, data, 0) for seq, (kind, data) in enumerate(specs)]


def _item(item: dict[str, Any], **extra: Any) -> tuple[str, dict[str, Any]]:
    return (ITEM, {"item": item, **extra})


U1, U2 = {"role": "user", "content": "pay"}, {"role": "user", "content": "again?"}
FC1 = {"type": "function_call", "call_id": "c1", "name": "pay", "arguments": '{"cents":1}'}
FC2 = {"type": "function_call", "call_id": "c2", "name": "pay", "arguments": '{"cents":2}'}
OUT1 = {"type": "function_call_output", "call_id": "c1", "output": "paid"}
ASK = ("assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": "pay", "arguments": {"cents": 1}}]})
MAY = ("tool_result", {"tool_call_id": "c1", "content": "c1 MAY have run", "metadata": {"synthetic": True}})
INTERRUPTED = ("turn_end", {"turn": 1, "steps": 1, "reason": "interrupted"})
START = ("turn_start", {"turn": 1})


def _carried(kind: str, data: dict[str, Any], *entries: Any) -> tuple[str, dict[str, Any]]:
    """A typed event that carries items (the format since issue 31 item 5)."""
    return (kind, {**data, "metadata": {"openai_items": list(entries)}})


C_U1 = _carried("user_message", {"content": "pay"}, {"$": "r"})
C_U2 = _carried("user_message", {"content": "again?"}, {"$": "r"})
C_ASK = ("assistant_message", {**ASK[1], "tool_calls": [*ASK[1]["tool_calls"]]})
PAID = ("tool_result", {"tool_call_id": "c1", "content": "paid"})
C_OUT1 = _carried("tool_result", PAID[1], {"$": "t"})

PROJECTIONS = {
    "carried and referred to: the items as stored": (
        [C_U1, START, C_ASK, PAID, (REF, {"items": [[2, {"$": 0, "$keys": list(FC1)}], [3, {"$": "t"}]]})],
        [U1, FC1, OUT1],
    ),
    "carried: a call never saved, answered by recovery": (
        [C_U1, START, C_ASK, ("tool_call", {"id": "c1", "name": "pay"}), MAY, INTERRUPTED],
        [U1, FC1, {"type": "function_call_output", "call_id": "c1", "output": "c1 MAY have run"}],
    ),
    "carried: recovered after the next input was saved, still before that input": (
        [C_U1, START, C_ASK, ("tool_call", {"id": "c1", "name": "pay"}), C_U2, MAY, INTERRUPTED],
        [U1, FC1, {"type": "function_call_output", "call_id": "c1", "output": "c1 MAY have run"}, U2],
    ),
    "carried: an output saved without its call gets the call, at the answer's place": (
        [C_U1, START, C_ASK, C_OUT1, INTERRUPTED],
        [U1, FC1, OUT1],
    ),
    "carried: a referred call without output, answered after its run": (
        [C_U1, START, C_ASK, (REF, {"items": [[2, {"$": 0, "$keys": list(FC1)}]]}), MAY, INTERRUPTED],
        [U1, FC1, {"type": "function_call_output", "call_id": "c1", "output": "c1 MAY have run"}],
    ),
    "carried: a popped reference stays popped": (
        [C_U1, START, C_ASK, PAID, (REF, {"items": [[2, {"$": 0}], [3]]}), (POP, {"seq": 4, "n": 1})],
        [U1, {**FC1, "type": "function_call"}],
    ),
    "no crash: the items as stored": (
        [_item(U1), START, ASK, ("tool_result", {"tool_call_id": "c1", "content": "paid"}), _item(FC1), _item(OUT1)],
        [U1, FC1, OUT1],
    ),
    "a call never saved, answered by recovery: call and output where the answer stood": (
        [_item(U1), START, ASK, ("tool_call", {"id": "c1", "name": "pay"}), MAY, INTERRUPTED],
        [U1, FC1, {"type": "function_call_output", "call_id": "c1", "output": "c1 MAY have run"}],
    ),
    "recovered after the next input was saved: still before that input": (
        [_item(U1), START, ASK, ("tool_call", {"id": "c1", "name": "pay"}), _item(U2), MAY, INTERRUPTED],
        [U1, FC1, {"type": "function_call_output", "call_id": "c1", "output": "c1 MAY have run"}, U2],
    ),
    "a stored call without output: the output right after its run of model items": (
        [_item(U1), _item(FC1), _item(FC2), _item(U2), MAY],
        [U1, FC1, FC2, {"type": "function_call_output", "call_id": "c1", "output": "c1 MAY have run"}, U2],
    ),
    "a call of a turn that ended complete is not invented": (
        [_item(U1), START, ASK, MAY, ("turn_end", {"turn": 1, "steps": 1, "reason": "complete"})],
        [U1],
    ),
    "an open turn (no recovery yet) is not projected": (
        [_item(U1), START, ASK, ("tool_result", {"tool_call_id": "c1", "content": "paid"})],
        [U1],
    ),
    "a projection stored by a later add_items stands at its place": (
        [_item(U1), START, ASK, MAY, INTERRUPTED, _item(FC1, at=2), _item(OUT1, at=2), _item(U2)],
        [U1, FC1, OUT1, U2],
    ),
    "a popped projection stays popped": (
        [_item(U1), START, ASK, MAY, INTERRUPTED, (POP, {"call_id": "c1", "part": "output"})],
        [U1, FC1],
    ),
    "a clear hides what recovery answered before it": (
        [_item(U1), START, ASK, MAY, INTERRUPTED, (CLEAR, {})],
        [],
    ),
}


@pytest.mark.parametrize("events, shown", list(PROJECTIONS.values()), ids=list(PROJECTIONS))
def test_g5_the_items_project_what_recovery_wrote_in_place_and_reads_agree(events, shown) -> None:
    log = _log(*events)
    marks = [e for e in log if e.type in READ]  # what the adapter reads (the item rows, pops, typed events)
    clears = [e.seq for e in log if e.type == CLEAR]
    since = clears[-1] + 1 if clears else 0
    tail, complete = cut_tail(log[::-1])
    assert complete or tail == log  # the tail reaches back only as far as it must
    assert [s.item for s in project([m for m in marks if m.seq >= since], tail, since=since)] == shown
    assert shown_items([m for m in marks if m.seq >= since], tail, since=since) == shown  # the fast read agrees
    # The whole log read as the tail gives the same view: the tail loses nothing.
    assert [s.item for s in project(marks, [e for e in log if e.seq >= since], since=since)] == shown


def test_the_tail_ends_at_the_last_item_and_reaches_back_to_an_interrupted_turns_start() -> None:
    log = _log(_item(U1), START, ASK, _item(U2), MAY, INTERRUPTED)
    tail, complete = cut_tail(log[::-1])
    assert complete and [e.seq for e in tail] == [1, 2, 3, 4, 5]
    tail, complete = cut_tail(_log(_item(U1), START, ASK)[::-1])
    assert complete and [e.seq for e in tail] == [0, 1, 2]


def test_a_projection_is_stored_when_new_items_bury_it_and_deep_reads_agree(tmp_path: Path) -> None:
    """After ``j.recover()`` the next ``add_items`` stores the projection at its place: later
    reads (all, or the last N) show it without looking back into the log."""
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
        j.append_many("s", [(ITEM, {"item": U1}, None), ("user_message", {"content": "pay"}, None)])
        turn = j.turn_start("s")
        j.append("s", *ASK)
        j.dispatch("s", "c1", turn=turn)
        j.recover("s")  # this process's turn: closed, c1 MAY have run
    session = JournalSession("s", path)
    before = run(session.get_items())
    assert [i.get("type") or i["role"] for i in before] == ["user", "function_call", "function_call_output"]
    for n in range(40):
        run(session.add_items([{"role": "user", "content": f"later {n}"}]))
    after = run(session.get_items())
    assert after[:3] == before and len(after) == 43
    for limit in (1, 2, 40, 41, 42, 43, 50):
        assert run(session.get_items(limit=limit)) == after[-limit:]
    with journal.open(path, readonly=True) as j:
        stored = [e for e in j.events("s", types=[ITEM]) if "at" in e.data]
        assert [e.data["item"]["type"] for e in stored] == ["function_call", "function_call_output"]
    session.close()


def test_popping_a_projected_item_hides_it_and_the_log_keeps_the_result(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
        j.append("s", ITEM, {"item": U1})
        turn = j.turn_start("s")
        j.append("s", *ASK)
        j.dispatch("s", "c1", turn=turn)
        j.recover("s")
    session = JournalSession("s", path)
    popped = run(session.pop_item())
    assert popped["type"] == "function_call_output" and "MAY have run" in popped["output"]
    assert run(session.pop_item())["type"] == "function_call"
    assert run(session.get_items()) == [U1]
    run(session.add_items([U2]))
    assert run(session.get_items()) == [U1, U2]  # popped stays popped, even once buried
    with journal.open(path, readonly=True) as j:
        assert [e.data["tool_call_id"] for e in j.events("s", types=["tool_result"])] == ["c1"]
    session.close()


# -- one shape of repair; ids -----------------------------------------------------------------------


def test_repair_is_sync_and_arepair_its_awaitable_twin_with_one_result_shape(tmp_path: Path) -> None:
    from journal.adapters.openai_agents import Repaired, arepair
    from journal.adapters.repaired import Repaired as Common

    assert Repaired is Common
    session = JournalSession("s", tmp_path / "j.db")
    assert repair(session) == Repaired("s") == run(arepair(session))  # an unknown session: nothing to do

    async def inside_a_loop() -> Repaired:
        return repair(session)  # a sync Journal: runs here, blocking this thread

    assert run(inside_a_loop()) == Repaired("s")
    session.close()


def test_a_sync_repair_of_a_session_on_an_async_journal_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    import journal.aio
    from journal.adapters.openai_agents import arepair

    async def go() -> None:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            session = JournalSession("s", aj)
            await session.add_items([U1])
            with pytest.raises(journal.WrongLoop, match="arepair"):
                repair(session)
            assert (await arepair(session)).session_id == "s"

    run(go())


def test_g12_ids_are_injective_even_an_id_that_looks_like_a_hashed_one(tmp_path: Path) -> None:
    """An id that itself starts with the hash prefix is hashed too: it can never land on the
    journal session of the id whose hashed form it spells."""
    other = "user 42"  # not an id the journal accepts: hashed
    spelled = journal_session_id(other)
    assert spelled.startswith("openai-agents-") and journal_session_id(spelled) != spelled
    first, second = JournalSession(other, tmp_path / "j.db"), JournalSession(spelled, tmp_path / "j.db")
    run(first.add_items([U1]))
    run(second.add_items([U2]))
    assert run(first.get_items()) == [U1] and run(second.get_items()) == [U2]
    clash = JournalSession("someone else", tmp_path / "j.db", journal_id=first.journal_id)
    with pytest.raises(journal.InvalidArgument, match="journal_id"):
        run(clash.add_items([U2]))
    assert run(first.get_items()) == [U1]  # refused before anything was written (G12)
    for session in (first, second, clash):
        session.close()


CALL_ITEMS = {
    "as the SDK sends it": {
        "type": "function_call", "call_id": "c1", "name": "pay", "arguments": '{"cents":1}', "id": "fc_1",
    },
    "spaced arguments and a status": {
        "type": "function_call", "call_id": "c1", "name": "pay", "arguments": '{"cents": 1}', "status": "completed",
    },
    "arguments that are not JSON": {"type": "function_call", "call_id": "c1", "name": "pay", "arguments": "one cent"},
    "non-ASCII arguments": {"type": "function_call", "call_id": "c1", "name": "pay", "arguments": '{"to":"Zoë 😊"}'},
}  # fmt: skip


@pytest.mark.parametrize("item", list(CALL_ITEMS.values()), ids=list(CALL_ITEMS))
def test_the_answer_keeps_only_what_rebuilds_its_call_items_exactly(item: dict[str, Any]) -> None:
    """The hooks' ``assistant_message`` does not store the call item a second time: only the
    fields its ``tool_calls`` do not rebuild, and the rebuilt item is deep-equal."""
    from journal.adapters.openai_items import assistant, call_items

    ((kind, data, _),) = assistant([item], keep_items=True)
    kept = data["metadata"]["openai_agents"]
    assert "items" not in kept and set(kept["call_items"]["c1"]) <= set(item) - {"type", "call_id", "name"}
    assert call_items(Event("s", 3, kind, data, 0)) == {"c1": item}
