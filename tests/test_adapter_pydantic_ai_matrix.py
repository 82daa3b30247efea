"""pydantic-ai after a crash: one recovery, whichever face ran it (DESIGN §14, §17).

The matrix: {killed inside the tool before its side effect, after it, after the tool returned
(its result recorded), while the model reads the result (during the model request that follows
the tool), between turns} x {restart: the next ``JournalAgent.run`` alone; ``journal recover``
(the CLI) then the run; ``j.recover()`` then the run; ``reconcile()`` then the run} x {SQLite,
PostgreSQL} (on PostgreSQL a diagonal of the cells by default, every pairing with ``-m slow``).
Each cell checks the ledger (at most one payment per intended call), every history handed to the
model (every call answered, no orphan return, never pydantic-ai's own "interrupted before a
result was produced"), the MAY HAVE RUN text where the call may have run, and that no recorded
model response is requested again (the restart makes one model call, and it is handed every
recorded response, in order).

Side by side: the same kills under pydantic-ai's own DBOS durability (``DBOSDurability``, its
system database a SQLite file under ``tmp_path``): DBOS recovers the workflow by running it again,
and the tool -- not a DBOS step -- runs again: a kill after paying pays twice.

The killed run is a forked child (the test process's imports: a cell costs a fraction of a second)
that SIGKILLs itself at the chosen point; the model is pydantic-ai's ``FunctionModel``, scripted.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolReturnPart, repair_messages

import journal
from journal.adapters.pydantic_ai import MESSAGE, JournalAgent, JournalDurability, arepair, repair
from journal.adapters.pydantic_ai_messages import load
from journal.cli.app import main as journal_cli
from journal.testing import Ledger

from .test_adapter_pydantic_ai import FIRST, SECOND, Cashier, cashier_agent, orphans

KILL_POINTS = ["before_effect", "after_effect", "after_result", "model_reads_result", "between_turns"]
RESTARTS = ["run", "cli_then_run", "recover_then_run", "reconcile_then_run"]
PAID = {"before_effect": 0, "after_effect": 1, "after_result": 1, "model_reads_result": 1, "between_turns": 1}
MAY_HAVE_RUN = {"before_effect", "after_effect"}
PYDANTIC_AI_OWN = "interrupted before a result was produced"


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_dsn"))
    return str(tmp_path / "j.db")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _DieAfterTheResult(JournalDurability):
    async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any) -> Any:
        result = await super().wrap_tool_execute(ctx, call=call, tool_def=tool_def, args=args, handler=handler)
        _die()  # the result is recorded; pydantic-ai never built the request that carries it
        return result  # pragma: no cover


def _reads_result(messages: list[ModelMessage]) -> None:
    if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
        _die()  # the request with the tool's return is stored; its response never arrives


def _killed_run(target: str, ledger: Ledger, point: str) -> None:
    """Run the cashier in a forked child that SIGKILLs itself at ``point``."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            model = Cashier(on_call=_reads_result if point == "model_reads_result" else None)
            agent = cashier_agent(ledger, model, kill=point)
            jagent = JournalAgent(agent, target)
            if point == "after_result":
                jagent.capability = _DieAfterTheResult(jagent.journal)
            jagent.run_sync(FIRST, session_id="bot-1")
            if point == "between_turns":
                _die()  # the turn is complete; the next one never started
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def _recover_from_a_shell(target: str) -> None:
    """``journal recover --db TARGET`` (the command itself, run in this process)."""
    done = CliRunner().invoke(journal_cli, ["recover", "--db", target])
    assert done.exit_code == 0, (done.output, done.exception)


def _shown(messages: list[ModelMessage], call_id: str) -> str:
    (text,) = [
        p.model_response_str()
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.tool_call_id == call_id
    ]
    return text


CELLS = [
    pytest.param(backend, point, restart, id=f"{backend}-{point}-{restart}", marks=marks)
    for backend in ("sqlite", "postgresql")
    for p, point in enumerate(KILL_POINTS)
    for r, restart in enumerate(RESTARTS)
    for marks in [() if backend == "sqlite" or p % len(RESTARTS) == r else pytest.mark.slow]
]


@pytest.mark.parametrize(("target", "point", "restart"), CELLS, indirect=["target"])
def test_g9_any_recovery_then_the_next_run_pays_once_and_hands_the_model_an_answered_history(
    target: str, tmp_path: Path, point: str, restart: str
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    _killed_run(target, ledger, point)
    assert ledger.count(call="pay") == PAID[point]

    if restart == "cli_then_run":
        _recover_from_a_shell(target)
    elif restart == "recover_then_run":
        with journal.open(target) as j:
            j.recover()
    elif restart == "reconcile_then_run":
        with journal.open(target) as j:
            j.reconcile()  # it settles submissions: these turns had none, and the run repairs
    with journal.open(target) as j:
        recorded = [load(e.data["message"]) for e in j.events("bot-1", types=[MESSAGE])]
    if restart in ("cli_then_run", "recover_then_run"):
        # Right after the recovery, before any repair: the history shows the call answered.
        fresh = JournalAgent(cashier_agent(ledger, Cashier()), target)
        history = asyncio.run(fresh.history("bot-1"))
        fresh.close()
        assert orphans(history) == [] and _shown(history, "pay-1"), history

    model = Cashier()
    jagent = JournalAgent(cashier_agent(ledger, model), target)
    result = asyncio.run(jagent.run(SECOND, session_id="bot-1"))
    jagent.close()

    assert ledger.count(call="pay") == PAID[point]  # at most once, and not again
    assert len(model.seen) == 1  # one model call: the new prompt's answer
    (sent,) = model.seen
    # Every recorded response is handed back, in order: none is asked for again.
    assert [m for m in sent if isinstance(m, ModelResponse)] == [m for m in recorded if isinstance(m, ModelResponse)]
    assert orphans(sent) == []  # every call answered, no orphan return: no provider 400
    shown = _shown(sent, "pay-1")
    assert PYDANTIC_AI_OWN not in shown
    if point in MAY_HAVE_RUN:
        assert "MAY have run" in shown and "verify before retrying" in shown
    else:
        assert shown == "paid 4200 cents"  # the real result
    assert result.output == f"Not paying again: {shown}"
    with journal.open(target) as j:
        assert j.scan().clean and j.check() == []
        # The answered call stands right after the call, before the next prompt.
        again = asyncio.run(JournalAgent(cashier_agent(ledger, Cashier()), j).history("bot-1"))
        assert again == repair_messages(result.all_messages(), repair_last_response=False)


def test_run_none_continues_the_interrupted_run_to_its_answer(target: str, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    _killed_run(target, ledger, "after_effect")
    model = Cashier()
    jagent = JournalAgent(cashier_agent(ledger, model), target)
    result = asyncio.run(jagent.run(None, session_id="bot-1"))
    jagent.close()
    assert ledger.count(call="pay") == 1 and len(model.seen) == 1
    assert result.output.startswith("Done: ") and "MAY have run" in result.output
    assert orphans(model.seen[0]) == []


def test_a_plain_run_after_a_crash_is_refused_naming_repair_then_repair_is_idempotent(
    target: str, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    _killed_run(target, ledger, "after_effect")
    model = Cashier()
    agent = cashier_agent(ledger, model)
    with journal.open(target) as j:
        with pytest.raises(journal.OpenTurnError, match=r"repair\(jagent, session_id\)"):
            asyncio.run(agent.run(SECOND, conversation_id="bot-1", capabilities=[JournalDurability(j)]))
        assert model.seen == []  # refused before the model was asked
        jagent = JournalAgent(agent, j)
        done = repair(jagent, "bot-1")
        assert [e.type for e in done.recovered] == ["tool_result", "turn_end"] and done.added == ()
        assert "MAY have run" in done.recovered[0].data["content"]
        assert repair(jagent, "bot-1").recovered == ()  # idempotent
        result = jagent.run_sync(SECOND, session_id="bot-1")
    assert result.output.startswith("Not paying again") and ledger.count(call="pay") == 1


def test_arepair_after_a_recovery_by_another_face_appends_nothing(target: str, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    _killed_run(target, ledger, "before_effect")
    with journal.open(target) as j:
        (result,) = j.recover()
        assert [e.type for e in result.appended] == ["tool_result", "turn_end"]
    jagent = JournalAgent(cashier_agent(ledger, Cashier()), target)
    before = asyncio.run(jagent.history("bot-1"))
    done = asyncio.run(arepair(jagent, "bot-1"))
    assert (done.recovered, done.added, done.unanswered, done.live_owner) == ((), (), (), None)
    assert asyncio.run(jagent.history("bot-1")) == before
    jagent.close()


def test_a_call_never_dispatched_is_answered_did_not_run(tmp_path: Path) -> None:
    """Two calls in one response, run one after the other: killed inside the first, the second
    was never dispatched -- recovery says it did not run; the first MAY have run."""
    from pydantic_ai.messages import TextPart, ToolCallPart

    ledger = Ledger(tmp_path / "ledger.jsonl")
    path = str(tmp_path / "j.db")

    def two_calls(messages: list[ModelMessage], info: Any) -> ModelResponse:
        if isinstance(messages[-1], ModelRequest) and any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[
                ToolCallPart("pay", {"cents": 1}, tool_call_id="pay-1"),
                ToolCallPart("pay", {"cents": 2}, tool_call_id="pay-2"),
            ]
        )

    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    agent: Agent[None, str] = Agent(FunctionModel(two_calls), name="cashier")

    @agent.tool_plain
    def pay(cents: int) -> str:
        ledger.record(call="pay", cents=cents)
        if os.environ.get("PYD_TEST_CHILD"):
            _die()
        return f"paid {cents}"

    pid = os.fork()
    if pid == 0:
        try:
            os.environ["PYD_TEST_CHILD"] = "1"
            with agent.parallel_tool_call_execution_mode("sequential"):
                JournalAgent(agent, path).run_sync(FIRST, session_id="bot-1")
        finally:
            os._exit(3)
    os.waitpid(pid, 0)
    with journal.open(path) as j:
        done = repair(JournalAgent(agent, j), "bot-1")
        texts = {e.data["tool_call_id"]: e.data["content"] for e in done.recovered if e.type == "tool_result"}
        assert "MAY have run" in texts["pay-1"] and "did not run" in texts["pay-2"]
        history = asyncio.run(JournalAgent(agent, j).history("bot-1"))
    assert orphans(history) == [] and ledger.count(call="pay") == 1


# -- side by side: pydantic-ai's own DBOS durability --------------------------------------------------


def _dbos_child(tmp_path: Path, ledger: Ledger, *, kill: str | None) -> int:
    """In a forked child: launch DBOS on a SQLite system database, register the cashier workflow
    and either start it (killed at ``kill``) or let DBOS recover it at launch. Returns the exit
    status (a SIGKILL, or 0 after the recovered workflow finished)."""
    pid = os.fork()
    if pid == 0:
        try:
            from dbos import DBOS
            from pydantic_ai.durable_exec.dbos import DBOSDurability

            model = Cashier(on_call=lambda messages: ledger.record(call="model", history=len(messages)))
            agent = cashier_agent(ledger, model, kill=kill, capabilities=[DBOSDurability()])
            DBOS(config={"name": "pyd-cashier", "system_database_url": f"sqlite:///{tmp_path / 'dbos.sqlite'}"})

            @DBOS.workflow(name="cashier_run")
            async def cashier_run(prompt: str) -> str:
                return (await agent.run(prompt)).output

            DBOS.launch()
            if kill is not None:
                asyncio.run(cashier_run(FIRST))
            else:  # the restart: DBOS recovers the pending workflow on launch
                handles = DBOS.list_workflows()
                for status in handles:
                    if status.status != "SUCCESS":
                        DBOS.retrieve_workflow(status.workflow_id).get_result()
            DBOS.destroy()
            os._exit(0)
        except BaseException:
            import traceback

            traceback.print_exc()
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    return status


@pytest.mark.parametrize("kill", ["before_effect", "after_effect"])
def test_side_by_side_dbos_durability_reruns_the_tool_and_pays_twice_after_a_kill_after_paying(
    tmp_path: Path, kill: str
) -> None:
    """A documented fact about pydantic-ai's DBOS durability, not a journal guarantee: DBOS records
    model requests as steps, not function tools; recovering the workflow runs it again from the
    recorded steps, so the tool runs again (at least once). Killed after paying: two payments."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    status = _dbos_child(tmp_path, ledger, kill=kill)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    assert ledger.count(call="pay") == (1 if kill == "after_effect" else 0)
    status = _dbos_child(tmp_path, ledger, kill=None)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert ledger.count(call="pay") == (2 if kill == "after_effect" else 1)
    # The model's first response was a DBOS step: replayed, not requested again; the answer is new.
    assert [e["history"] for e in ledger.entries() if e["call"] == "model"] == [1, 3]
