"""pydantic-ai on the journal (``journal.adapters.pydantic_ai``, DESIGN §14 and §17).

- the round trip: every message stored verbatim comes back deep-equal, with the typed events
  (user_message, assistant_message with tool_calls, tool_result) and the messages view beside it;
- ``JournalAgent.run`` / ``run_sync`` in a real tool loop on pydantic-ai's own ``FunctionModel``
  (offline), on SQLite and PostgreSQL, through a path, a DSN, a ``Journal`` or an ``AsyncJournal``;
- what the capability adds: a turn per run, the response committed before its tool runs, the
  dispatch (G6) before the tool body;
- the ``ConversationStore`` face (load/save), the projection table-tested, bad input refused with
  typed errors before anything is written.

The crash matrix (forked children SIGKILLed at each point, then every recovery) is in
``test_adapter_pydantic_ai_matrix``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import journal
import journal.aio
from journal.adapters.pydantic_ai import (
    MESSAGE,
    JournalAgent,
    JournalConversationStore,
    JournalDurability,
    arepair,
    journal_session_id,
    repair,
)
from journal.adapters.pydantic_ai_messages import derive, project
from journal.model import Event
from journal.testing import Ledger

FIRST, SECOND = "Pay the 42 euro invoice.", "Did the payment go through?"


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the journal is: a file, or a DSN naming a fresh PostgreSQL schema."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_dsn"))
    return str(tmp_path / "j.db")


# -- an offline model: pydantic-ai's own FunctionModel, scripted -------------------------------------


def _returns(messages: list[ModelMessage]) -> dict[str, str]:
    """The tool returns the history shows, by call id."""
    return {
        p.tool_call_id: p.model_response_str()
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }


def orphans(messages: list[ModelMessage]) -> list[str]:
    """What would make a provider refuse the history: a call without a return after it, or a
    return without a call before it (ids)."""
    called: list[str] = []
    bad: list[str] = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, ToolCallPart):
                called.append(p.tool_call_id)
            elif isinstance(p, ToolReturnPart):
                if p.tool_call_id not in called:
                    bad.append(p.tool_call_id)
                else:
                    called.remove(p.tool_call_id)
    return bad + called


class Cashier:
    """A scripted model: asked to pay, it calls ``pay`` once (``pay-1``); told the result, it says
    so; asked again, it refuses to pay twice, quoting what the history says. It keeps every
    history it was handed (``seen``) and may run a callback on each (``on_call``)."""

    def __init__(self, on_call: Any = None) -> None:
        self.seen: list[list[ModelMessage]] = []
        self.on_call = on_call

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        if self.on_call is not None:
            self.on_call(messages)
        returns = _returns(messages)
        last = messages[-1]
        prompts = (
            [p.content for p in last.parts if isinstance(p, UserPromptPart)] if isinstance(last, ModelRequest) else []
        )
        if SECOND in prompts:
            return ModelResponse(parts=[TextPart(f"Not paying again: {returns.get('pay-1', 'no record')}")])
        if "pay-1" in returns:
            return ModelResponse(parts=[TextPart(f"Done: {returns['pay-1']}")])
        return ModelResponse(parts=[ToolCallPart("pay", {"cents": 4200}, tool_call_id="pay-1")])


def cashier_agent(
    ledger: Ledger, model: Cashier, *, kill: str | None = None, capabilities: Sequence[Any] = ()
) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        FunctionModel(model), name="cashier", instructions="Pay the invoice once.", capabilities=list(capabilities)
    )

    @agent.tool_plain
    def pay(cents: int) -> str:
        """Pay an amount in cents."""
        if kill == "before_effect":
            os.kill(os.getpid(), signal.SIGKILL)  # dispatched (G6), nothing paid yet
        ledger.record(call="pay", cents=cents)
        if kill == "after_effect":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"paid {cents} cents"

    return agent


def stored_messages(j: journal.Journal, sid: str) -> list[dict[str, Any]]:
    return [e.data["message"] for e in j.events(sid, types=[MESSAGE])]


# -- the round trip ----------------------------------------------------------------------------------


def test_a_tool_loop_is_stored_verbatim_and_typed_and_comes_back_deep_equal(target: str, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    model = Cashier()
    jagent = JournalAgent(cashier_agent(ledger, model), target)
    result = jagent.run_sync(FIRST, session_id="bot-1")
    assert result.output == "Done: paid 4200 cents" and ledger.count(call="pay") == 1

    history = asyncio.run(jagent.history("bot-1"))
    assert history == result.all_messages()  # deep-equal, timestamps and ids included
    conversation = asyncio.run(jagent.store.load("bot-1"))
    assert conversation is not None and conversation.messages == result.all_messages()

    j = jagent.journal
    assert isinstance(j, journal.Journal)
    types = [e.type for e in j.events("bot-1") if not e.type.startswith("x.")]
    assert types == [
        "turn_start",
        "step_start",
        "user_message",
        "assistant_message",
        "tool_call",
        "tool_result",
        "step_end",
        "step_start",
        "assistant_message",
        "step_end",
        "turn_end",
    ]
    (asked,) = [e for e in j.events("bot-1", types=["assistant_message"]) if e.data.get("tool_calls")]
    assert asked.data["tool_calls"] == [{"id": "pay-1", "name": "pay", "arguments": {"cents": 4200}}]
    # The response that asks for the call is committed before the dispatch (G6) and the result.
    seqs = {e.type: e.seq for e in j.events("bot-1") if e.type in ("tool_call", "tool_result")}
    assert asked.seq < seqs["tool_call"] < seqs["tool_result"]
    (answer,) = j.events("bot-1", types=["tool_result"])
    assert answer.data == {"tool_call_id": "pay-1", "content": "paid 4200 cents", "name": "pay"}
    # The messages view: the transcript a model should see, folded from the typed events.
    view = [(m.role, m.content) for m in j.messages("bot-1")]
    assert view[0] == ("user", FIRST) and view[-1] == ("assistant", "Done: paid 4200 cents")
    assert ("tool", "paid 4200 cents") in view
    assert j.scan().clean and j.check() == []
    jagent.close()


def test_run_and_run_sync_continue_one_conversation(target: str, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    model = Cashier()
    jagent = JournalAgent(cashier_agent(ledger, model), target)
    first = jagent.run_sync(FIRST, session_id="bot-1")
    second = asyncio.run(jagent.run(SECOND, session_id="bot-1"))
    assert second.output == "Not paying again: paid 4200 cents" and ledger.count(call="pay") == 1
    assert second.all_messages()[: len(first.all_messages())] == first.all_messages()
    assert model.seen[-1][:4] == first.all_messages()  # the model was handed the stored history
    jagent.close()
    again = JournalAgent(cashier_agent(ledger, Cashier()), target)  # a fresh process's view
    assert asyncio.run(again.history("bot-1")) == second.all_messages()
    again.close()


def test_an_async_journal_is_shared_and_run_sync_on_it_is_refused(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")

    async def main() -> None:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            jagent = JournalAgent(cashier_agent(ledger, Cashier()), aj)
            result = await jagent.run(FIRST, session_id="bot-1")
            assert result.output == "Done: paid 4200 cents"
            assert await jagent.history("bot-1") == result.all_messages()
            assert (await arepair(jagent, "bot-1")).recovered == ()
            with pytest.raises(journal.WrongLoop):
                jagent.run_sync(SECOND, session_id="bot-1")
            with pytest.raises(journal.WrongLoop):
                repair(jagent, "bot-1")

    asyncio.run(main())


def test_a_capability_on_the_agent_itself_is_used_and_a_plain_run_with_it_is_recorded(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    with journal.open(tmp_path / "j.db") as j:
        durability = JournalDurability(j)
        agent = Agent(FunctionModel(Cashier()), name="cashier", capabilities=[durability])

        @agent.tool_plain
        def pay(cents: int) -> str:
            ledger.record(call="pay", cents=cents)
            return f"paid {cents} cents"

        store = JournalConversationStore(j)

        async def main() -> Any:
            assert await store.load("bot-2") is None
            result = await agent.run(FIRST, conversation_id="bot-2")
            count = j.count("bot-2")
            await store.save(result)  # the capability stored it all: the save adds nothing
            assert j.count("bot-2") == count
            return result

        result = asyncio.run(main())
        assert ledger.count(call="pay") == 1
        assert asyncio.run(store.load("bot-2")).messages == result.all_messages()  # type: ignore[union-attr]
        assert JournalAgent(agent, j).capability is JournalDurability.from_agent(agent)


def test_the_store_alone_saves_a_conversation_once_verbatim_and_typed(tmp_path: Path) -> None:
    """Without the capability: pydantic-ai's own load/run/save loop on the store."""
    with journal.open(tmp_path / "j.db") as j:
        store = JournalConversationStore(j)
        agent = Agent(FunctionModel(Cashier()), name="plain")

        @agent.tool_plain
        def pay(cents: int) -> str:
            return f"paid {cents} cents"

        async def main() -> Any:
            result = await agent.run(FIRST, conversation_id="c-1")
            await store.save(result)
            loaded = await store.load("c-1")
            assert loaded is not None
            again = await agent.run(SECOND, conversation=loaded)
            await store.save(again)
            return again

        again = asyncio.run(main())
        assert stored_messages(j, "c-1") == [derive(i, m)[0][1]["message"] for i, m in enumerate(again.all_messages())]
        assert len(j.events("c-1", types=["tool_result"])) == 1
        assert [r.conversation_id for r in asyncio.run(store.list_conversations())] == ["c-1"]
        with pytest.raises(journal.InvalidArgument):
            asyncio.run(store.fork("c-1"))


def test_g6_the_response_and_its_dispatch_are_durable_before_the_tool_body_runs(target: str) -> None:
    """Read from inside the tool through a fresh connection: the response that asked for the
    call (verbatim and typed) and the call's dispatch are committed already."""
    seen: dict[str, Any] = {}
    agent: Agent[None, str] = Agent(FunctionModel(Cashier()), name="cashier")

    @agent.tool_plain
    def pay(cents: int) -> str:
        with journal.open(target) as fresh:
            events = fresh.events("bot-1")
            seen["types"] = [e.type for e in events]
            seen["message"] = [e.data["message"]["kind"] for e in events if e.type == MESSAGE]
            seen["turn"] = fresh.turn_state("bot-1")
        return f"paid {cents} cents"

    jagent = JournalAgent(agent, target)
    jagent.run_sync(FIRST, session_id="bot-1")
    jagent.close()
    assert seen["types"][-2:] == ["assistant_message", "tool_call"]
    assert seen["message"] == ["request", "response"]
    assert seen["turn"] is not None and seen["turn"].step_open  # scan sees the open turn


def test_parallel_calls_and_a_tool_retry_are_each_dispatched_once_and_answered(target: str) -> None:
    """Two calls in one response run concurrently (pydantic-ai's default); one asks the model to
    retry (``ModelRetry``): the return pydantic-ai makes of it (``outcome="retried"``) is that
    call's result, an error."""
    from pydantic_ai import ModelRetry

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart("look", {"q": "a"}, "c-a"), ToolCallPart("look", {"q": "b"}, "c-b")]
            )
        if len(messages) == 3:
            return ModelResponse(parts=[ToolCallPart("look", {"q": "c"}, "c-c")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="looker")

    @agent.tool_plain
    def look(q: str) -> str:
        if q == "b":
            raise ModelRetry("try another query")
        return f"found {q}"

    jagent = JournalAgent(agent, target)
    result = jagent.run_sync(FIRST, session_id="bot-1")
    j = jagent.journal
    assert isinstance(j, journal.Journal)
    dispatched = [e.data["id"] for e in j.events("bot-1", types=["tool_call"])]
    assert sorted(dispatched) == ["c-a", "c-b", "c-c"]
    results = {e.data["tool_call_id"]: e.data for e in j.events("bot-1", types=["tool_result"])}
    assert results["c-a"]["content"] == "found a" and results["c-c"]["content"] == "found c"
    assert results["c-b"]["is_error"] is True and "try another query" in results["c-b"]["content"]
    assert j.events("bot-1", types=["tool_result_late"]) == []
    assert asyncio.run(jagent.history("bot-1")) == result.all_messages()
    assert j.scan().clean and j.check() == []
    jagent.close()


def test_a_model_that_numbers_its_calls_afresh_has_each_call_run_under_an_id_of_its_own(target: str) -> None:
    """Some models give every response's first call the id ``call_0``, twice in one response
    too. Each such call is a call of its own: it runs (the journal answered the second with the
    first one's result, or refused it and left the session stuck on an unanswered call), and
    the model is handed a valid history in every run."""
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, UserPromptPart) for p in last.parts):
            cents = len(seen)
            twice = [ToolCallPart("pay", {"cents": cents}, "call_0"), ToolCallPart("pay", {"cents": -cents}, "call_0")]
            return ModelResponse(parts=twice)
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="renumbering")
    paid: list[int] = []

    @agent.tool_plain
    def pay(cents: int) -> str:
        paid.append(cents)
        return f"paid {cents}"

    jagent = JournalAgent(agent, target)
    for prompt in ("first", "second", "third"):
        assert jagent.run_sync(prompt, session_id="bot-1").output == "done"
    assert sorted(paid) == [-5, -3, -1, 1, 3, 5]
    assert all(orphans(history) == [] for history in seen)
    history = asyncio.run(jagent.history("bot-1"))
    ids = [p.tool_call_id for m in history for p in m.parts if isinstance(p, ToolCallPart)]
    assert len(ids) == 6 and len(set(ids)) == 6 and ids[0] == "call_0" and orphans(history) == []
    j = jagent.journal
    assert isinstance(j, journal.Journal)
    assert sorted(e.data["content"] for e in j.events("bot-1", types=["tool_result"])) == sorted(
        f"paid {c}" for c in paid
    )
    assert j.scan().clean and j.check() == [] and j.events("bot-1", types=["tool_result_late"]) == []
    jagent.close()


def test_g5_a_tool_returning_tool_return_is_recorded_as_the_value_the_model_is_shown(target: str) -> None:
    """A tool returning ``ToolReturn`` (a value for the model, content and metadata for the app):
    its result is the value, as pydantic-ai shows the model (it was the whole object, and after
    a crash the model was handed the app's metadata)."""
    agent: Agent[None, str] = Agent(FunctionModel(Cashier()), name="receipts")

    @agent.tool_plain
    def pay(cents: int) -> ToolReturn:
        return ToolReturn(return_value=f"paid {cents} cents", content="the receipt", metadata={"receipt": "R-1"})

    jagent = JournalAgent(agent, target)
    jagent.run_sync(FIRST, session_id="bot-1")
    j = jagent.journal
    assert isinstance(j, journal.Journal)
    assert [e.data["content"] for e in j.events("bot-1", types=["tool_result"])] == ["paid 4200 cents"]
    assert j.events("bot-1", types=["tool_result_late"]) == [] and j.check() == []
    jagent.close()


def test_concurrent_runs_of_different_sessions_keep_their_own_turns(tmp_path: Path) -> None:
    """One ``JournalAgent``, many sessions at once (a bot): each run records on its own copy of
    the capability (pydantic-ai's ``for_run``), so turns and messages never mix."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    jagent = JournalAgent(cashier_agent(ledger, Cashier()), tmp_path / "j.db")

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(jagent.run(FIRST, session_id=f"bot-{n}") for n in range(4))))

    results = asyncio.run(main())
    j = jagent.journal
    assert isinstance(j, journal.Journal)
    for n, result in enumerate(results):
        assert asyncio.run(jagent.history(f"bot-{n}")) == result.all_messages()
        assert [e.type for e in j.events(f"bot-{n}", types=["turn_start", "turn_end"])] == ["turn_start", "turn_end"]
    assert ledger.count(call="pay") == 4 and j.scan().clean and j.check() == []
    jagent.close()


# -- bad input: typed errors, nothing written ---------------------------------------------------------


def test_bad_input_is_refused_with_typed_errors_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    agent = cashier_agent(Ledger(tmp_path / "ledger.jsonl"), Cashier())
    with pytest.raises(journal.InvalidArgument, match="agent"):
        JournalAgent("not an agent", path)  # type: ignore[arg-type]
    with pytest.raises(journal.InvalidArgument, match="journal_or_path"):
        JournalAgent(agent, 42)  # type: ignore[arg-type]
    with journal.open(path) as j:
        jagent = JournalAgent(agent, j)
        with pytest.raises(journal.InvalidArgument, match="session_id"):
            jagent.run_sync(FIRST, session_id=7)  # type: ignore[arg-type]
        with pytest.raises(journal.InvalidArgument, match="message_history"):
            jagent.run_sync(FIRST, session_id="bot-1", message_history=[])
        with pytest.raises(journal.InvalidArgument, match="jagent_or_store"):
            repair(object(), "bot-1")
        with pytest.raises(journal.InvalidArgument, match="message_history"):  # a history the journal lacks
            asyncio.run(agent.run(SECOND, message_history=[_PROMPT], capabilities=[JournalDurability(j)]))
        assert j.sessions() == []
        # A run given a history shorter than the journal's is refused before its turn opens.
        jagent.run_sync(FIRST, session_id="bot-1")
        count = j.count("bot-1")
        with pytest.raises(journal.InvalidArgument, match="message_history"):
            asyncio.run(agent.run(SECOND, conversation_id="bot-1", capabilities=[JournalDurability(j)]))
        assert j.count("bot-1") == count


def test_long_or_odd_session_ids_map_to_stable_distinct_journal_ids() -> None:
    assert journal_session_id("bot-1") == "bot-1"
    odd = journal_session_id("a user with spaces")
    assert odd.startswith("pydantic-ai-") and odd == journal_session_id("a user with spaces")
    assert journal_session_id("x" * 300) != journal_session_id("x" * 301)
    assert journal_session_id(odd) != odd  # the reserved prefix is hashed too


# -- the projection, table-tested ------------------------------------------------------------------


def _events(*batches: list[Any]) -> list[Event]:
    out: list[Event] = []
    for batch in batches:
        for kind, data, key in batch:
            out.append(Event("s", len(out), kind, data, 1_700_000_000_000 + len(out), key))
    return out


_ASK = ModelResponse(parts=[ToolCallPart("pay", {"cents": 1}, tool_call_id="c1"), ToolCallPart("log", {}, "c2")])
_PROMPT = ModelRequest(parts=[UserPromptPart("pay")])
_SYNTH = ("tool_result", {"tool_call_id": "c1", "content": "MAY have run", "metadata": {"synthetic": True}}, None)


@pytest.mark.parametrize(
    ("extra", "shown", "unanswered"),
    [
        pytest.param([], [], ("c1", "c2"), id="no-results-both-unanswered"),
        pytest.param([_SYNTH], [("c1", "MAY have run")], ("c2",), id="one-result-projected-right-after"),
        pytest.param(
            [_SYNTH, ("tool_result", {"tool_call_id": "c2", "content": "did not run"}, None)],
            [("c1", "MAY have run"), ("c2", "did not run")],
            (),
            id="both-in-call-order",
        ),
        pytest.param(
            [_SYNTH, ("tool_result", {"tool_call_id": "c1", "content": "late"}, None)],
            [("c1", "MAY have run")],
            ("c2",),
            id="first-result-wins",
        ),
    ],
)
def test_the_history_projects_results_right_after_the_call(
    extra: list[Any], shown: list[tuple[str, str]], unanswered: tuple[str, ...]
) -> None:
    events = _events(derive(0, _PROMPT), derive(1, _ASK), extra)
    history = project(events)
    assert list(history.messages[:2]) == [_PROMPT, _ASK] and history.unanswered == unanswered
    assert history.stored == 2
    if shown:
        (projected,) = history.messages[2:]
        assert history.projected == (projected,)
        assert [(p.tool_call_id, p.content) for p in projected.parts] == shown
        assert project(events).messages == history.messages  # deterministic: two reads agree
    else:
        assert history.messages[2:] == () and history.projected == ()


def test_a_stored_answer_is_not_projected_again_and_adjacent_requests_merge_as_pydantic_ai_does() -> None:
    answer = ModelRequest(parts=[ToolReturnPart("pay", "ok", "c1"), ToolReturnPart("log", "ok", "c2")])
    events = _events(derive(0, _PROMPT), derive(1, _ASK), derive(2, answer), [_SYNTH])
    assert list(project(events).messages) == [_PROMPT, _ASK, answer]
    then = ModelRequest(parts=[UserPromptPart("and then?")])
    merged = project(_events(derive(0, _PROMPT), derive(1, _ASK), derive(2, answer), derive(3, then))).messages
    assert len(merged) == 3 and merged[2].parts == [*answer.parts, *then.parts]


def test_a_deferred_tool_ends_the_run_with_its_call_owed_and_its_result_lands_on_resume(target: str) -> None:
    """A tool that defers (``CallDeferred``: a human approves later) was dispatched; the run ends
    with ``DeferredToolRequests``. The turn closes with the call owed — not a crash, so nothing is
    invented for it — and the scan and the provider view say it is owed until the resumed run
    brings its result."""
    from pydantic_ai import CallDeferred, DeferredToolRequests, DeferredToolResults

    def asker(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
            return ModelResponse(parts=[TextPart("approved")])
        return ModelResponse(parts=[ToolCallPart("ask", {"q": "ok?"}, tool_call_id="ask-1")])

    agent: Agent[None, Any] = Agent(FunctionModel(asker), name="hitl", output_type=[str, DeferredToolRequests])

    @agent.tool_plain
    def ask(q: str) -> str:
        raise CallDeferred()

    jagent = JournalAgent(agent, target)
    first = jagent.run_sync("go", session_id="c1")
    assert isinstance(first.output, DeferredToolRequests)
    j = jagent.journal
    assert isinstance(j, journal.Journal)
    sid = journal_session_id("c1")
    assert j.scan().open_turns == () and [c.call_id for c in j.scan().pending_calls] == ["ask-1"]
    assert [m.tool_call_id for m in j.provider_view(sid).missing] == ["ask-1"]
    assert all(not r.appended for r in j.recover())  # a closed turn: nothing to repair
    second = jagent.run_sync(session_id="c1", deferred_tool_results=DeferredToolResults(calls={"ask-1": "yes"}))
    assert second.output == "approved"
    assert j.scan().clean and j.provider_view(sid).missing == ()


def _payer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A model that asks for ``pay`` (call ``pay-1``) until a tool return is in the history."""
    if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
        return ModelResponse(parts=[TextPart("paid")])
    return ModelResponse(parts=[ToolCallPart("pay", {"cents": 42}, tool_call_id="pay-1")])


def test_g9_a_tool_that_asks_for_approval_in_its_body_is_not_run_again_when_approved(target: str) -> None:
    """A body that raises ``ApprovalRequired`` ran after its dispatch was committed (G6): the run
    given the approval is refused with ``ApprovedAfterDispatch`` naming ``requires_approval``,
    before the body runs again, and the call stays owed (nothing is invented for it)."""
    from pydantic_ai import ApprovalRequired, DeferredToolRequests, DeferredToolResults

    ran: list[int] = []

    agent: Agent[None, Any] = Agent(FunctionModel(_payer), name="hitl", output_type=[str, DeferredToolRequests])

    @agent.tool
    def pay(ctx: RunContext[None], cents: int) -> str:
        if not ctx.tool_call_approved:
            raise ApprovalRequired()
        ran.append(cents)
        return f"paid {cents}"

    jagent = JournalAgent(agent, target)
    first = jagent.run_sync("pay it", session_id="c1")
    assert isinstance(first.output, DeferredToolRequests) and ran == []
    with pytest.raises(journal.ApprovedAfterDispatch, match="requires_approval=True") as caught:
        jagent.run_sync(session_id="c1", deferred_tool_results=DeferredToolResults(approvals={"pay-1": True}))
    assert isinstance(caught.value, journal.AlreadyDispatched) and caught.value.tool == "pay"
    assert ran == []
    j = jagent.journal
    assert isinstance(j, journal.Journal)
    assert [m.tool_call_id for m in j.provider_view(journal_session_id("c1")).missing] == ["pay-1"]


def test_g6_a_tool_requiring_approval_runs_once_when_approved_dispatched_by_the_resumed_run(target: str) -> None:
    """``requires_approval=True``: the first run ends with the call awaiting a human; the run
    given the approval executes it, its dispatch committed first by that run's turn (the turn
    that requested it is closed), and the model gets its real result."""
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    ran: list[int] = []

    agent: Agent[None, Any] = Agent(FunctionModel(_payer), name="hitl", output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def pay(cents: int) -> str:
        ran.append(cents)
        return f"paid {cents}"

    jagent = JournalAgent(agent, target)
    first = jagent.run_sync("pay it", session_id="c1")
    assert isinstance(first.output, DeferredToolRequests) and ran == []
    j = jagent.journal
    assert isinstance(j, journal.Journal)
    sid = journal_session_id("c1")
    assert [m.tool_call_id for m in j.provider_view(sid).missing] == ["pay-1"]
    second = jagent.run_sync(session_id="c1", deferred_tool_results=DeferredToolResults(approvals={"pay-1": True}))
    assert second.output == "paid" and ran == [42]
    calls = [(e.type, e.seq) for e in j.events(sid) if e.type in ("turn_start", "tool_call", "tool_result")]
    assert [t for t, _ in calls] == ["turn_start", "turn_start", "tool_call", "tool_result"]
    assert j.scan().clean and j.provider_view(sid).missing == ()
