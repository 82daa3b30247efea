"""Google ADK on the journal (DESIGN §17): the session service, the plugin, one recovery.

Real ADK classes throughout (``Runner``, ``App``, ``LlmAgent``, function tools); the model is an
offline scripted ``BaseLlm``. Each test runs on SQLite and on PostgreSQL (``target``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps.app import App, ResumabilityConfig
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event as AdkEvent
from google.adk.events.event_actions import EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types
from pydantic import Field

import journal
from journal.adapters.adk import JournalPlugin, JournalSessionService, arepair, journal_session_id, repair
from journal.adapters.adk_events import ADK_EVENT, derive, restore
from journal.errors import TurnHeld
from journal.testing import Ledger

from .conftest import python_child, run_child

warnings.filterwarnings("ignore", message=r".*\[EXPERIMENTAL\]")

APP, USER = "shop", "ada"
FIRST, SECOND = "Pay the 42 euro invoice.", "Did the payment go through?"


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the journal is: a file, or a DSN naming a fresh PostgreSQL schema."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_dsn"))
    return str(tmp_path / "j.db")


# -- an offline model and a cashier -----------------------------------------------------------------


class Cashier(BaseLlm):
    """A scripted model: asked with a user's text and no answered ``pay`` call in the request (or
    with a new text naming a "new invoice"), it calls ``pay`` (``pay-<n>`` for the n-th user
    text); otherwise it answers in text, quoting the
    last payment's answer. Every request is kept in ``requests``."""

    model: str = "scripted-cashier"
    requests: list[list[types.Content]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        contents = list(llm_request.contents)
        self.requests.append(contents)
        answers = [p.function_response for c in contents for p in c.parts or [] if p.function_response]
        texts = [p.text for c in contents if c.role == "user" for p in c.parts or [] if p.text]
        users = len(texts)
        if not answers or ("new invoice" in texts[-1] and contents[-1].role == "user" and contents[-1].parts[0].text):
            call = types.FunctionCall(id=f"pay-{users}", name="pay", args={"cents": 4200})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
            return
        said = str((answers[-1].response or {}).get("result", answers[-1].response))
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"Not paying again: {said}")]))


def cashier_agent(ledger: Ledger, model: Cashier, *, kill: Any = None) -> LlmAgent:
    def pay(cents: int) -> str:
        """Pay an amount in cents."""
        if kill is not None:
            kill("before_effect")
        ledger.record(call="pay", cents=cents)
        if kill is not None:
            kill("after_effect")
        return f"paid {cents} cents"

    return LlmAgent(name="cashier", model=model, instruction="Pay the invoice once.", tools=[pay])


def make_app(agent: LlmAgent, plugins: list[Any], *, resumable: bool = False) -> App:
    config = ResumabilityConfig(is_resumable=True) if resumable else None
    return App(name=APP, root_agent=agent, plugins=plugins, resumability_config=config)


async def run(runner: Runner, session_id: str, text: str | None, *, invocation_id: str | None = None) -> list[AdkEvent]:
    message = None if text is None else types.Content(role="user", parts=[types.Part(text=text)])
    out = []
    async for event in runner.run_async(
        user_id=USER, session_id=session_id, new_message=message, invocation_id=invocation_id
    ):
        out.append(event)
    return out


def orphans(contents: list[types.Content]) -> list[str]:
    """Function calls in a model request not answered by the content right after them."""
    out = []
    for index, content in enumerate(contents):
        calls = [p.function_call.id for p in content.parts or [] if p.function_call]
        if not calls:
            continue
        after = contents[index + 1] if index + 1 < len(contents) else None
        answered = {p.function_response.id for p in (after.parts or [] if after else []) if p.function_response}
        out.extend(c for c in calls if c not in answered)
    return out


def answers_in(events: list[AdkEvent]) -> dict[str, Any]:
    return {r.id: r.response for e in events for r in e.get_function_responses()}


# -- the service alone -------------------------------------------------------------------------------


def test_events_are_stored_verbatim_and_as_typed_events_in_one_transaction(target: str, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")

    async def go() -> tuple[list[AdkEvent], list[AdkEvent]]:
        service = JournalSessionService(target)
        runner = Runner(
            app=make_app(cashier_agent(ledger, Cashier()), [JournalPlugin(service)]), session_service=service
        )
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
        produced = await run(runner, session.id, FIRST)
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
        await service.close()
        assert got is not None
        return produced, got.events

    produced, stored = asyncio.run(go())
    assert ledger.count(call="pay") == 1
    assert [e.model_dump() for e in stored[1:]] == [e.model_dump() for e in produced if not e.partial]
    with journal.open(target) as j:
        sid = journal_session_id(APP, USER, "s1")
        raw = j.events(sid, types=[ADK_EVENT])
        assert [restore(e.data) for e in raw] == stored  # the round trip is deep-equal
        kinds = [e.type for e in j.events(sid) if not e.type.startswith("x.")]
        assert kinds == [
            "user_message",
            "turn_start",
            "step_start",
            "assistant_message",
            "tool_call",
            "tool_result",
            "step_end",
            "step_start",
            "assistant_message",
            "step_end",
            "turn_end",
        ]
        (call,) = [e for e in j.events(sid) if e.type == "assistant_message" and e.data.get("tool_calls")]
        assert call.data["tool_calls"] == [{"id": "pay-1", "name": "pay", "arguments": {"cents": 4200}}]
        assert j.scan().clean and j.check() == []
        assert not any(e.type == "tool_result_late" for e in j.events(sid))  # the event's copy is the same result


def test_state_scopes_app_shared_user_shared_temp_never_stored(target: str) -> None:
    async def go() -> None:
        service = JournalSessionService(target)
        s1 = await service.create_session(
            app_name=APP, user_id="u1", session_id="a", state={"app:tier": "gold", "user:lang": "fr", "n": 1}
        )
        assert s1.state == {"app:tier": "gold", "user:lang": "fr", "n": 1}
        delta = {"app:count": 2, "user:seen": True, "n": 5, "temp:scratch": "x"}
        event = AdkEvent(invocation_id="i1", author="user", actions=EventActions(state_delta=delta))
        await service.append_event(s1, event)
        assert s1.state["temp:scratch"] == "x"  # the live session sees temp: for its invocation
        assert "temp:scratch" not in event.actions.state_delta  # and it is not stored
        again = await service.get_session(app_name=APP, user_id="u1", session_id="a")
        assert again is not None
        assert again.state == {"app:tier": "gold", "app:count": 2, "user:lang": "fr", "user:seen": True, "n": 5}
        other_user = await service.create_session(app_name=APP, user_id="u2", session_id="b")
        assert other_user.state == {"app:tier": "gold", "app:count": 2}  # app: shared by the app's users
        same_user = await service.create_session(app_name=APP, user_id="u1", session_id="c")
        assert same_user.state == {"app:tier": "gold", "app:count": 2, "user:lang": "fr", "user:seen": True}
        assert await service.get_user_state(app_name=APP, user_id="u1") == {"lang": "fr", "seen": True}
        other_app = await service.create_session(app_name="other", user_id="u1", session_id="a")
        assert other_app.state == {}
        await service.close()

    asyncio.run(go())


def test_filters_listing_delete_and_errors(target: str) -> None:
    from google.adk.errors._stale_session_error import StaleSessionError
    from google.adk.errors.session_not_found_error import SessionNotFoundError

    async def go() -> None:
        service = JournalSessionService(target)
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        for i in range(5):
            await service.append_event(session, AdkEvent(invocation_id="i", author="user", timestamp=100.0 + i))
        got = await service.get_session(
            app_name=APP, user_id=USER, session_id="s", config=GetSessionConfig(num_recent_events=2)
        )
        assert got is not None and [e.timestamp for e in got.events] == [103.0, 104.0]
        got = await service.get_session(
            app_name=APP, user_id=USER, session_id="s", config=GetSessionConfig(after_timestamp=102.5)
        )
        assert got is not None and [e.timestamp for e in got.events] == [103.0, 104.0]
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name=APP, user_id=USER, session_id="s")
        stale = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert stale is not None
        await service.append_event(session, AdkEvent(invocation_id="i", author="user", timestamp=200.0))
        with pytest.raises(StaleSessionError):
            await service.append_event(stale, AdkEvent(invocation_id="i", author="user", timestamp=201.0))
        await service.create_session(app_name=APP, user_id="bob", session_id="t")
        assert [s.id for s in (await service.list_sessions(app_name=APP, user_id=USER)).sessions] == ["s"]
        assert sorted(s.id for s in (await service.list_sessions(app_name=APP)).sessions) == ["s", "t"]
        await service.delete_session(app_name=APP, user_id=USER, session_id="s")
        assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
        with pytest.raises(SessionNotFoundError):
            await service.append_event(session, AdkEvent(invocation_id="i", author="user", timestamp=300.0))
        with pytest.raises(journal.InvalidArgument):
            await service.create_session(app_name="", user_id=USER)
        await service.close()

    asyncio.run(go())


# -- the plugin ---------------------------------------------------------------------------------------


def test_g6_the_dispatch_is_committed_before_the_tool_runs_and_a_failed_dispatch_keeps_it_from_running(
    target: str, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    seen: list[list[str]] = []

    async def go() -> None:
        with journal.open(target) as j:
            service = JournalSessionService(j)
            sid = journal_session_id(APP, USER, "s")

            def pay(cents: int) -> str:
                """Pay an amount in cents."""
                # Read from another connection: the dispatch is durable before the tool body.
                with journal.open(target) as other:
                    seen.append([e.type for e in other.events(sid) if e.type == "tool_call"])
                ledger.record(call="pay", cents=cents)
                return "paid"

            agent = LlmAgent(name="cashier", model=Cashier(), tools=[pay])
            runner = Runner(app=make_app(agent, [JournalPlugin(service)]), session_service=service)
            await service.create_session(app_name=APP, user_id=USER, session_id="s")
            await run(runner, "s", FIRST)

            # A dispatch that cannot be written: the tool must not run.
            original = service._call

            async def failing(method: str, /, *args: Any, **kwargs: Any) -> Any:
                if method == "dispatch":
                    raise journal.JournalBusy(0)
                return await original(method, *args, **kwargs)

            service._call = failing  # type: ignore[assignment]
            with pytest.raises(RuntimeError, match="before_tool_callback"):
                await run(runner, "s", "pay again, please: a new invoice")

    asyncio.run(go())
    assert seen == [["tool_call"]]
    assert ledger.count(call="pay") == 1


# -- one recovery ---------------------------------------------------------------------------------------


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def killed_run(target: str, ledger: Ledger, point: str, *, resumable: bool = True, session_id: str = "s") -> str:
    """Run the cashier in a forked child (the test process's imports) that SIGKILLs itself at
    ``point``: ``before_effect`` / ``after_effect`` inside the tool, ``after_result`` once the
    plugin stored the result, ``between_turns`` after the run. Returns the journal session id."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:

            def kill(here: str) -> None:
                if here == point:
                    die()

            class DieAfterTheResult(JournalPlugin):
                async def after_tool_callback(self, **kwargs: Any) -> None:
                    await super().after_tool_callback(**kwargs)
                    die()  # the result is recorded; ADK never appended its function response

            async def child() -> None:
                service = JournalSessionService(target)
                plugin = DieAfterTheResult(service) if point == "after_result" else JournalPlugin(service)
                agent = cashier_agent(ledger, Cashier(), kill=kill)
                runner = Runner(app=make_app(agent, [plugin], resumable=resumable), session_service=service)
                await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
                await run(runner, session_id, FIRST)

            asyncio.run(child())
            if point == "between_turns":
                die()
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    return journal_session_id(APP, USER, session_id)


@pytest.mark.parametrize("how", ["recover", "cli", "repair", "arepair", "reconcile", "get_session"])
def test_g9_whichever_recovery_ran_get_session_shows_the_call_answered_right_after_it(
    target: str, tmp_path: Path, how: str
) -> None:
    from click.testing import CliRunner

    from journal.cli.app import main as journal_cli

    ledger = Ledger(tmp_path / "ledger.jsonl")
    killed_run(target, ledger, "after_effect")
    with journal.open(target) as j:
        if how == "recover":
            j.recover()
        elif how == "reconcile":
            j.reconcile()
            j.recover()  # these turns had no submission: reconcile leaves them to recovery
        elif how == "cli":
            done = CliRunner().invoke(journal_cli, ["recover", "--db", target])
            assert done.exit_code == 0, done.output
        elif how == "repair":
            fixed = repair(JournalSessionService(j), app_name=APP, user_id=USER, session_id="s")
            assert [e.type for e in fixed.recovered] == ["tool_result", "turn_end"] and fixed.unanswered == ()

    async def read() -> list[AdkEvent]:
        service = JournalSessionService(target)
        if how == "arepair":
            fixed = await arepair(service, app_name=APP, user_id=USER, session_id="s")
            assert [e.type for e in fixed.recovered] == ["tool_result", "turn_end"]
            assert (await arepair(service, app_name=APP, user_id=USER, session_id="s")).recovered == ()
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        await service.close()
        assert got is not None
        return got.events

    events = asyncio.run(read())
    kinds = [
        ("call" if e.get_function_calls() else "answer" if e.get_function_responses() else e.author) for e in events
    ]
    assert kinds == ["user", "call", "answer"]
    text = answers_in(events)["pay-1"]["result"]
    assert "MAY have run" in text and "verify before retrying" in text
    with journal.open(target) as j:
        assert j.scan().clean and all(not r.appended for r in j.recover())  # recovery ran once


class Renumbering(Cashier):
    """A model that numbers its calls afresh in every response, as some do: each user text asks
    for two ``pay`` calls, both with the id ``call_0``; answered, it quotes the answers."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        contents = list(llm_request.contents)
        self.requests.append(contents)
        last = contents[-1]
        if last.role == "user" and last.parts and last.parts[0].text:
            cents = int(last.parts[0].text.split()[-1])
            calls = [types.FunctionCall(id="call_0", name="pay", args={"cents": c}) for c in (cents, cents + 1)]
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=c) for c in calls]))
            return
        said = [p.function_response.response for p in last.parts or [] if p.function_response]
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"the tool said {said}")]))


def test_a_model_that_numbers_its_calls_afresh_has_each_call_run_under_an_id_of_its_own(
    target: str, tmp_path: Path
) -> None:
    """Every response's calls come as ``call_0``: each is renamed (``call_`` and a UUID) when the
    session or the response holds the id already, so each runs and gets its own answer (the
    second was answered with the first one's result and never ran)."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    model = Renumbering()

    async def go() -> list[AdkEvent]:
        service = JournalSessionService(target)
        agent = cashier_agent(ledger, Cashier())
        agent.model = model
        runner = Runner(app=make_app(agent, [JournalPlugin(service)]), session_service=service)
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        for cents in (100, 900):
            await run(runner, "s", f"pay {cents}")
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        await service.close()
        assert got is not None
        return got.events

    events = asyncio.run(go())
    assert sorted(e["cents"] for e in ledger.entries()) == [100, 101, 900, 901]
    ids = [c.id for e in events for c in e.get_function_calls()]
    assert len(ids) == 4 and len(set(ids)) == 4 and ids[0] == "call_0"
    answers = answers_in(events)
    assert sorted(str(answers[i]["result"]) for i in ids) == [
        "paid 100 cents",
        "paid 101 cents",
        "paid 900 cents",
        "paid 901 cents",
    ]
    assert model.requests and all(orphans(r) == [] for r in model.requests)
    # The model is handed each call and its response under the session's id (ADK strips its own
    # ``adk-`` ids from a request: a renamed call reached the model without one).
    handed = {p.function_call.id for c in model.requests[-1] for p in c.parts or [] if p.function_call}
    assert handed == set(ids)
    with journal.open(target) as j:
        sid = journal_session_id(APP, USER, "s")
        assert sorted(e.data["id"] for e in j.events(sid, types=["tool_call"])) == sorted(ids)
        assert j.scan().clean and j.check() == [] and j.events(sid, types=["tool_result_late"]) == []


SLOW_RUN = """
import asyncio, os, sys, time
from tests.test_adapter_adk import APP, USER, Cashier, cashier_agent, make_app, run
from google.adk.runners import Runner
from journal.adapters.adk import JournalPlugin, JournalSessionService
from journal.testing import Ledger

target, ledger, inside, go = sys.argv[1:5]


def kill(point):  # not a kill: the tool waits, inside its turn, until the test says go
    if point == "after_effect":
        open(inside, "w").close()
        while not os.path.exists(go):
            time.sleep(0.01)


async def main():
    service = JournalSessionService(target)
    runner = Runner(app=make_app(cashier_agent(Ledger(ledger), Cashier(), kill=kill), [JournalPlugin(service)]),
                    session_service=service)
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    events = await run(runner, "s", "Pay the 42 euro invoice.")
    print("finished:", events[-1].content.parts[0].text)
    await service.close()


asyncio.run(main())
"""


def test_a_run_of_a_session_another_live_process_is_running_is_refused_before_its_message_is_stored(
    target: str, tmp_path: Path
) -> None:
    """Process A is inside a paying tool; this process starts a run of the same session: it is
    refused (``TurnHeld``) before ADK's new message is written, and A's run finishes (the message
    was written inside A's turn first: A then met a stale session and died, its turn closed as a
    crash's)."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    inside, go = tmp_path / "inside", tmp_path / "go"
    a = python_child(SLOW_RUN, target, str(ledger.path), str(inside), str(go))
    try:
        deadline = time.monotonic() + 60
        while not inside.exists() and a.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert inside.exists(), a.communicate()

        async def second() -> None:
            service = JournalSessionService(target)
            runner = Runner(
                app=make_app(cashier_agent(ledger, Cashier()), [JournalPlugin(service)]), session_service=service
            )
            try:
                with pytest.raises(TurnHeld):
                    await run(runner, "s", "Did the payment go through?")
            finally:
                await service.close()

        asyncio.run(second())
    finally:
        go.touch()
        out, err = a.communicate(timeout=120)
    assert a.returncode == 0 and "finished: Not paying again" in out, err
    assert ledger.count(call="pay") == 1
    with journal.open(target) as j:
        sid = journal_session_id(APP, USER, "s")
        assert [e.data["content"] for e in j.events(sid, types=["user_message"])] == [FIRST]
        assert [e.data["reason"] for e in j.events(sid, types=["turn_end"])] == ["complete"]
        assert j.scan().clean and j.check() == []


def test_a_resumed_invocation_does_not_rerun_a_dispatched_call(target: str, tmp_path: Path) -> None:
    """A resumable app's ``run_async(invocation_id=...)`` re-runs a call it sees unanswered; with
    the journal the call is answered (the recovery's answer, projected) and ``pay`` is not run."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    sid = killed_run(target, ledger, "before_effect")
    with journal.open(target) as j:
        invocation = restore(j.events(sid, types=[ADK_EVENT])[0].data).invocation_id

    async def resume() -> Cashier:
        service = JournalSessionService(target)
        model = Cashier()
        model.requests = []
        runner = Runner(
            app=make_app(cashier_agent(ledger, model), [JournalPlugin(service)], resumable=True),
            session_service=service,
        )
        await run(runner, "s", None, invocation_id=invocation)
        await service.close()
        return model

    model = asyncio.run(resume())
    assert ledger.count(call="pay") == 0
    assert model.requests and all(orphans(r) == [] for r in model.requests)


def test_a_service_on_an_async_journal_runs_and_recovers(target: str, tmp_path: Path) -> None:
    """A ``JournalSessionService`` sharing an open ``AsyncJournal``: after a kill the next run
    alone answers the call (recovered through the async face) and does not pay again."""
    import journal.aio

    ledger = Ledger(tmp_path / "ledger.jsonl")
    killed_run(target, ledger, "after_effect")

    async def restart() -> tuple[Cashier, list[AdkEvent]]:
        async with journal.aio.open(target) as aj:
            service = JournalSessionService(aj)
            model = Cashier()
            runner = Runner(
                app=make_app(cashier_agent(ledger, model), [JournalPlugin(service)]), session_service=service
            )
            await run(runner, "s", SECOND)
            got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
            assert got is not None
            with pytest.raises(journal.WrongLoop):
                repair(service, app_name=APP, user_id=USER, session_id="s")
            return model, got.events

    model, events = asyncio.run(restart())
    assert ledger.count(call="pay") == 1
    assert model.requests and all(orphans(r) == [] for r in model.requests)
    assert "MAY have run" in answers_in(events)["pay-1"]["result"]


# -- a human in the loop: a tool awaiting confirmation, a long-running tool ----------------------------


class Asker(BaseLlm):
    """Calls ``pay`` (``pay-1``) for the user's text; answers with what the last response said."""

    model: str = "scripted-asker"
    tool: str = "pay"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        if last.role == "user" and any(p.text for p in last.parts or []):
            call = types.FunctionCall(id=f"{self.tool}-1", name=self.tool, args={"cents": 4200})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
            return
        said = [p.function_response.response for p in last.parts or [] if p.function_response]
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"tool said {said}")]))


async def _answer(runner: Runner, call_id: str, name: str, response: dict[str, Any]) -> list[AdkEvent]:
    message = types.Content(
        role="user",
        parts=[types.Part(function_response=types.FunctionResponse(id=call_id, name=name, response=response))],
    )
    return [e async for e in runner.run_async(user_id=USER, session_id="s", new_message=message)]


async def paused_for_confirmation(target: str, pay: Any) -> tuple[JournalSessionService, Runner, Any]:
    """Session ``s`` whose first run stopped at ADK's confirmation gate for ``pay`` (``Asker``
    asks for it): the service, the runner, and ADK's call asking the human."""
    from google.adk.tools.function_tool import FunctionTool

    service = JournalSessionService(target)
    agent = LlmAgent(name="cashier", model=Asker(), tools=[FunctionTool(pay, require_confirmation=True)])
    runner = Runner(app=make_app(agent, [JournalPlugin(service)]), session_service=service)
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    paused = await run(runner, "s", FIRST)
    (ask,) = [c for e in paused for c in e.get_function_calls() if c.name == "adk_request_confirmation"]
    return service, runner, ask


@pytest.mark.parametrize("confirmed", [True, False])
def test_a_tool_awaiting_confirmation_runs_once_when_a_human_confirms_and_never_when_rejected(
    target: str, tmp_path: Path, confirmed: bool
) -> None:
    """ADK's confirmation gate answers the call instead of the tool while it waits for a human:
    the plugin dispatches nothing then (the dispatch would make the confirmed call "already
    dispatched", never to run) and the journal records no result for it (it is not answered)."""

    ledger = Ledger(tmp_path / "ledger.jsonl")

    def pay(cents: int) -> str:
        """Pay an amount in cents."""
        ledger.record(call="pay", cents=cents)
        return f"paid {cents} cents"

    async def scenario() -> None:
        service, runner, ask = await paused_for_confirmation(target, pay)
        assert ledger.entries() == []
        sid = journal_session_id(APP, USER, "s")
        with journal.open(target, readonly=True) as j:
            assert [e.type for e in j.events(sid) if e.type in ("tool_call", "tool_result")] == []
            assert [m.tool_call_id for m in j.provider_view(sid).missing] == ["pay-1"]  # awaiting a human
        done = await _answer(runner, ask.id, ask.name, {"confirmed": confirmed})
        said = [p.text for e in done for p in (e.content.parts if e.content else []) or [] if p.text]
        with journal.open(target, readonly=True) as j:
            typed = [(e.type, e.data.get("content")) for e in j.events(sid) if e.type in ("tool_call", "tool_result")]
            assert j.scan().clean and j.provider_view(sid).missing == ()
        if confirmed:
            assert [e["cents"] for e in ledger.entries()] == [4200]
            assert said == ["tool said [{'result': 'paid 4200 cents'}]"]
            # dispatched by the invocation that runs it (the request's turn ended awaiting the human)
            assert typed == [("tool_call", None), ("tool_result", {"result": "paid 4200 cents"})]
        else:
            assert ledger.entries() == []
            assert typed == [("tool_result", {"error": "This tool call is rejected."})]
        await service.close()

    asyncio.run(scenario())


def test_g6_the_plugin_records_runs_of_another_service_over_the_same_journal(target: str, tmp_path: Path) -> None:
    """The runner's service and the plugin's are two ``JournalSessionService`` objects over one
    journal (the module's "share one journal" advice): the plugin still records the turn and the
    dispatch (it skips only runs whose sessions live outside any journal)."""
    ledger = Ledger(tmp_path / "ledger.jsonl")

    async def go() -> None:
        runner_service, plugin_service = JournalSessionService(target), JournalSessionService(target)
        agent = cashier_agent(ledger, Cashier())
        runner = Runner(app=make_app(agent, [JournalPlugin(plugin_service)]), session_service=runner_service)
        await runner_service.create_session(app_name=APP, user_id=USER, session_id="s1")
        await run(runner, "s1", FIRST)
        await runner_service.close()
        await plugin_service.close()

    asyncio.run(go())
    with journal.open(target) as j:
        typed = [e.type for e in j.events(journal_session_id(APP, USER, "s1")) if not e.type.startswith("x.")]
        assert "tool_call" in typed and typed.count("turn_start") == typed.count("turn_end") == 1


CONFIRMED_AND_KILLED = """
import asyncio, os, signal, sys
from journal.testing import Ledger
from tests.test_adapter_adk import _answer, paused_for_confirmation

target, ledger = sys.argv[1], Ledger(sys.argv[2])


def pay(cents: int) -> str:
    \"\"\"Pay an amount in cents.\"\"\"
    ledger.record(call="pay", cents=cents)
    os.kill(os.getpid(), signal.SIGKILL)


async def main():
    _service, runner, ask = await paused_for_confirmation(target, pay)
    await _answer(runner, ask.id, ask.name, {"confirmed": True})


asyncio.run(main())
"""


def test_g9_a_confirmed_call_killed_inside_its_tool_is_shown_may_have_run_not_the_gates_placeholder(
    target: str, tmp_path: Path
) -> None:
    """A human confirmed the call, and its tool was killed after paying: the next run hands the
    model the journal's answer (MAY have run) after the confirmation, where the tool's own answer
    would be -- not the gate's earlier placeholder ("requires confirmation"), which told the
    model the payment never went through -- and nothing is paid again."""
    from google.adk.tools.function_tool import FunctionTool

    ledger = Ledger(tmp_path / "ledger.jsonl")
    done = run_child(CONFIRMED_AND_KILLED, target, str(ledger.path))
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)

    def pay(cents: int) -> str:
        """Pay an amount in cents."""
        ledger.record(call="pay", cents=cents)
        return f"paid {cents} cents"

    class Status(Asker):
        """Answers a user's text in words, with the answers it was shown; keeps its requests."""

        requests: list[list[types.Content]] = Field(default_factory=list)

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            self.requests.append(list(llm_request.contents))
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="status")]))

    async def scenario() -> Status:
        service = JournalSessionService(target)
        model = Status()
        agent = LlmAgent(name="cashier", model=model, tools=[FunctionTool(pay, require_confirmation=True)])
        runner = Runner(app=make_app(agent, [JournalPlugin(service)]), session_service=service)
        shown = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert shown is not None
        answers = [(r.id, str(r.response)) for e in shown.events for r in e.get_function_responses()]
        assert answers[-1][0] == "pay-1" and "MAY have run" in answers[-1][1]  # after the confirmation
        await run(runner, "s", SECOND)
        await service.close()
        return model

    (seen,) = asyncio.run(scenario()).requests
    said = [str(p.function_response.response) for c in seen for p in c.parts or [] if p.function_response]
    assert orphans(seen) == [] and any("MAY have run" in text for text in said)
    assert ledger.count(call="pay") == 1


def test_a_long_running_tool_is_answered_by_the_humans_answer_not_by_its_empty_return(target: str) -> None:
    """A ``LongRunningFunctionTool`` returning nothing has no answer yet (ADK builds no function
    response): the journal records none either, so the human's answer, when it comes, is the
    call's result, and until then the call is listed unanswered."""
    from google.adk.tools.long_running_tool import LongRunningFunctionTool

    def ask(cents: int) -> None:
        """Ask a human to approve a payment."""
        return None

    async def scenario() -> None:
        service = JournalSessionService(target)
        agent = LlmAgent(name="cashier", model=Asker(tool="ask"), tools=[LongRunningFunctionTool(ask)])
        runner = Runner(app=make_app(agent, [JournalPlugin(service)]), session_service=service)
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        await run(runner, "s", FIRST)
        sid = journal_session_id(APP, USER, "s")
        session = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert session is not None and answers_in(session.events) == {}
        assert (await arepair(service, app_name=APP, user_id=USER, session_id="s")).unanswered == ("ask-1",)
        await _answer(runner, "ask-1", "ask", {"status": "approved"})
        with journal.open(target, readonly=True) as j:
            typed = [(e.type, e.data.get("content")) for e in j.events(sid) if e.type.startswith("tool_result")]
        assert typed == [("tool_result", {"status": "approved"})]
        await service.close()

    asyncio.run(scenario())


class Delegator(BaseLlm):
    """A root model that hands the payment to a sub-agent (``AgentTool`` named ``cashier``),
    then answers with what it said."""

    model: str = "scripted-delegator"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        answers = [p.function_response for c in llm_request.contents for p in c.parts or [] if p.function_response]
        if answers:
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="done")]))
            return
        call = types.FunctionCall(id="delegate-1", name="cashier", args={"request": "pay 42 euros"})
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))


def test_g6_a_sub_agent_run_as_a_tool_runs_with_the_plugin_and_its_call_is_the_one_dispatched(
    target: str, tmp_path: Path
) -> None:
    """``AgentTool`` hands the plugin to the sub-agent's own runner (its session in memory): the
    plugin leaves that inner run alone (it failed the run: its session is not the service's),
    and records the ``AgentTool`` call of the outer session, dispatched before it runs."""
    from google.adk.tools.agent_tool import AgentTool

    ledger = Ledger(tmp_path / "ledger.jsonl")

    async def go() -> list[AdkEvent]:
        service = JournalSessionService(target)
        root = LlmAgent(
            name="root",
            model=Delegator(),
            instruction="Delegate.",
            tools=[AgentTool(agent=cashier_agent(ledger, Cashier()))],
        )
        runner = Runner(app=make_app(root, [JournalPlugin(service)]), session_service=service)
        await service.create_session(app_name=APP, user_id=USER, session_id="s1")
        produced = await run(runner, "s1", FIRST)
        await service.close()
        return produced

    produced = asyncio.run(go())
    assert ledger.count(call="pay") == 1 and "delegate-1" in answers_in(produced)
    with journal.open(target) as j:
        sid = journal_session_id(APP, USER, "s1")
        assert [e.data["id"] for e in j.events(sid) if e.type == "tool_call"] == ["delegate-1"]
        assert j.scan().clean


def test_a_confirmation_handshake_is_no_tool_call_of_the_typed_log() -> None:
    """ADK's request to a human (``adk_request_confirmation``), the human's answer, and the gate's
    reply to the call while it waits are no request and no result in the typed log: a crash
    while a confirmation is pending has recovery answer neither ADK's request nor the waiting call
    by that reply (the verbatim events keep all three for ADK)."""
    from google.adk.tools.tool_confirmation import ToolConfirmation

    ask = types.FunctionCall(id="adk-1", name="adk_request_confirmation", args={"originalFunctionCall": {}})
    request = AdkEvent(author="cashier", content=types.Content(role="model", parts=[types.Part(function_call=ask)]))
    assert derive(request) == []
    gate = types.FunctionResponse(id="pay-1", name="pay", response={"error": "This tool call requires confirmation."})
    waiting = AdkEvent(
        author="cashier",
        actions=EventActions(requested_tool_confirmations={"pay-1": ToolConfirmation(hint="approve?")}),
        content=types.Content(role="user", parts=[types.Part(function_response=gate)]),
    )
    assert derive(waiting) == []
    reply = types.FunctionResponse(id="adk-1", name="adk_request_confirmation", response={"confirmed": True})
    assert (
        derive(AdkEvent(author="user", content=types.Content(role="user", parts=[types.Part(function_response=reply)])))
        == []
    )
    paid = types.FunctionResponse(id="pay-1", name="pay", response={"result": "paid"})
    answer = AdkEvent(author="cashier", content=types.Content(role="user", parts=[types.Part(function_response=paid)]))
    assert derive(answer) == [
        ("tool_result", {"tool_call_id": "pay-1", "content": {"result": "paid"}, "name": "pay"}, None)
    ]
