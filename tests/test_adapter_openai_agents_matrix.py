"""openai-agents after a crash: one recovery, whichever face ran it (issue 31, DESIGN §14).

The matrix: {killed inside the tool before its side effect, after it, after the tool returned and
before the runner saved it, between turns} x {restart: ``journal_run`` alone; ``journal recover``
then ``journal_run``; ``j.recover()`` then a plain ``Runner.run`` with the hooks; ``reconcile()``
then ``journal_run``} x {SQLite, PostgreSQL} (on PostgreSQL each kill point and each restart
once, every pairing with ``-m slow``). Each cell checks the ledger (at most one payment),
every model input (no call without its output: no provider 400), the MAY HAVE RUN text where the
call may have run, and that the items read right after a recovery -- before any ``repair`` --
already show the call answered, before the next input.

The killed run is a forked child (the test process's imports, so a cell costs a fraction of a
second) that SIGKILLs itself at the chosen point; the model is scripted.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from click.testing import CliRunner

import journal
from journal.adapters.openai_agents import JournalRunHooks, JournalSession, arepair, journal_run, repair
from journal.cli.app import main as journal_cli
from journal.testing import Ledger

from .test_adapter_openai_agents import ScriptedModel, cashier, orphans

KILL_POINTS = ["before_effect", "after_effect", "after_result", "between_turns"]
RESTARTS = ["run_helper", "cli_then_run_helper", "recover_then_runner_with_hooks", "reconcile_then_run_helper"]
PAID = {"before_effect": 0, "after_effect": 1, "after_result": 1, "between_turns": 1}
FIRST, SECOND = "Pay the 42 euro invoice.", "Did the payment go through?"


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the journal is: a file, or a DSN naming a fresh PostgreSQL schema."""
    if request.param == "postgresql":
        return request.getfixturevalue("pg_dsn")
    return str(tmp_path / "j.db")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _cashier(ledger: Ledger, model: ScriptedModel, *, kill: str | None = None) -> Agent[Any]:
    @function_tool
    def pay(cents: int) -> str:
        """Pay an amount in cents."""
        if kill == "before_effect":
            _die()  # dispatched (G6), nothing paid yet
        ledger.record(call="pay", cents=cents)
        if kill == "after_effect":
            _die()
        return f"paid {cents} cents"

    return Agent(name="cashier", instructions="Pay the invoice once.", model=model, tools=[pay])


class _DieAfterTheResult(JournalRunHooks):
    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        await super().on_tool_end(context, agent, tool, result)
        _die()  # the result is recorded; the runner never saved the call or its output


def _killed_run(target: str, ledger: Ledger, point: str) -> None:
    """Run the cashier in a forked child that SIGKILLs itself at ``point``."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            session = JournalSession("bot-1", target)
            hooks = _DieAfterTheResult(session) if point == "after_result" else session.run_hooks()
            agent = _cashier(ledger, ScriptedModel(cashier), kill=point)
            asyncio.run(journal_run(agent, FIRST, session=session, hooks=hooks))
            if point == "between_turns":
                _die()  # the turn is complete; the next one never started
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def _answered(items: list[Any]) -> dict[str, Any]:
    """The outputs the items show, by call id."""
    return {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}


def _recover_from_a_shell(target: str) -> None:
    """``journal recover --db TARGET`` (the command itself, run in this process)."""
    done = CliRunner().invoke(journal_cli, ["recover", "--db", target])
    assert done.exit_code == 0, (done.output, done.exception)


# Every pairing on SQLite; on PostgreSQL (the same adapter and recovery code over another store)
# each kill point once and each restart once, the other pairings marked slow.
CELLS = [
    pytest.param(backend, point, restart, id=f"{backend}-{point}-{restart}", marks=marks)
    for backend in ("sqlite", "postgresql")
    for p, point in enumerate(KILL_POINTS)
    for r, restart in enumerate(RESTARTS)
    for marks in [() if backend == "sqlite" or p == r else pytest.mark.slow]
]


@pytest.mark.parametrize(("target", "point", "restart"), CELLS, indirect=["target"])
def test_g9_any_recovery_then_any_run_pays_once_and_shows_the_model_an_answered_call(
    target: str, tmp_path: Path, point: str, restart: str
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    _killed_run(target, ledger, point)
    assert ledger.count(call="pay") == PAID[point]

    if restart == "cli_then_run_helper":
        _recover_from_a_shell(target)
    elif restart == "recover_then_runner_with_hooks":
        with journal.open(target) as j:
            j.recover()
    elif restart == "reconcile_then_run_helper":
        with journal.open(target) as j:
            j.reconcile()  # it settles submissions: these turns had none, and the run helper repairs
    if restart in ("cli_then_run_helper", "recover_then_runner_with_hooks"):
        # Right after the recovery, before any repair: the framework's view shows the call answered.
        fresh = JournalSession("bot-1", target)
        view = asyncio.run(fresh.get_items())
        fresh.close()
        assert orphans(view) == [] and "pay-1" in _answered(view), view

    model = ScriptedModel(cashier)
    agent = _cashier(ledger, model)
    session = JournalSession("bot-1", target)
    if restart == "recover_then_runner_with_hooks":
        result = asyncio.run(Runner.run(agent, SECOND, session=session, hooks=session.run_hooks()))
    else:
        result = asyncio.run(journal_run(agent, SECOND, session=session))
    items = asyncio.run(session.get_items())
    session.close()

    assert ledger.count(call="pay") == PAID[point]  # at most once, and not again
    assert result.final_output.startswith("Not paying again")
    assert all(orphans(sent) == [] for sent in model.inputs)  # every transcript valid: no provider 400
    shown = _answered(model.inputs[0])["pay-1"]
    if point in ("before_effect", "after_effect"):
        assert "MAY have run" in shown and "verify before retrying" in shown  # the marker reaches the model
    else:
        assert shown == "paid 4200 cents"  # the real result
    # The answered call stands before the next input, however late the recovery ran.
    users = [k for k, i in enumerate(items) if i.get("role") == "user"]
    outputs = [k for k, i in enumerate(items) if i.get("call_id") == "pay-1"]
    assert len(users) == 2 and max(outputs) < users[1]
    with journal.open(target) as j:
        assert j.scan().clean and j.check() == []


@pytest.mark.parametrize("hooks", [True, False], ids=["with-hooks", "without-hooks"])
def test_a_plain_run_right_after_a_crash_reads_the_dead_runs_call_answered_and_pays_nothing_twice(
    target: str, tmp_path: Path, hooks: bool
) -> None:
    """``Runner.run`` with no recovery first, with the session's hooks or without them: the
    runner's read of the items recovers the turn the killed process left open (its owner is
    gone), so the model is handed the call answered -- MAY have run -- before the new input, and
    nothing is paid again; ``repair`` afterwards has nothing to do."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    _killed_run(target, ledger, "after_effect")
    model = ScriptedModel(cashier)
    session = JournalSession("bot-1", target)
    extra = {"hooks": session.run_hooks()} if hooks else {}
    result = asyncio.run(Runner.run(_cashier(ledger, model), SECOND, session=session, **extra))
    assert result.final_output.startswith("Not paying again") and ledger.count(call="pay") == 1
    first = model.inputs[0]
    assert [i.get("role") or i["type"] for i in first] == ["user", "function_call", "function_call_output", "user"]
    assert "MAY have run" in _answered(first)["pay-1"]
    assert all(orphans(sent) == [] for sent in model.inputs)
    done = repair(session)
    assert (done.recovered, done.added, done.unanswered) == ((), (), ())
    session.close()
    with journal.open(target, readonly=True) as j:
        assert j.scan().clean and j.check() == []


def test_pop_item_right_after_a_crash_takes_back_the_item_get_items_shows_last(target: str, tmp_path: Path) -> None:
    """The user's first call after the kill is ``pop_item`` (no read before it): it recovers the
    dead process's turn as ``get_items`` does, so it takes back what that read shows last -- the
    answer recovery gave the call -- not the item before the call (it took the prompt)."""
    _killed_run(target, Ledger(tmp_path / "ledger.jsonl"), "after_effect")
    session = JournalSession("bot-1", target)
    popped = asyncio.run(session.pop_item())
    assert popped is not None and popped["type"] == "function_call_output" and "MAY have run" in popped["output"]
    left = asyncio.run(session.get_items())
    assert [i.get("role") or i["type"] for i in left] == ["user", "function_call"]
    assert left[0]["content"] == FIRST
    session.close()


def test_a_run_refused_on_a_turn_this_process_left_open_names_repair_and_a_late_repair_keeps_the_order(
    target: str, tmp_path: Path
) -> None:
    """A turn whose owner is alive -- here this very process, whose earlier run's hooks left it
    open -- is not a crash to recover on a read: ``Runner.run`` with new hooks is refused at the
    agent's start (the runner has read the items by then) with an error naming ``repair``. Its
    input was saved; the call that ``repair`` answers afterwards still stands before it."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    with journal.open(target) as j:
        j.create_session("bot-1", meta={"adapter": "openai-agents", "session_id": "bot-1"})
        turn = j.turn_start("bot-1")
        turn.step_start()
        turn.assistant("", tool_calls=[{"id": "pay-1", "name": "pay", "arguments": {"cents": 4200}}])
        turn.dispatch("pay-1")
    model = ScriptedModel(cashier)
    session = JournalSession("bot-1", target)
    with pytest.raises(journal.OpenTurnError, match=r"repair\(session\)"):
        asyncio.run(Runner.run(_cashier(ledger, model), SECOND, session=session, hooks=session.run_hooks()))
    assert model.inputs == []  # refused before the model was asked
    done = repair(session)
    assert [e.type for e in done.recovered] == ["tool_result", "turn_end"]
    assert repair(session).recovered == ()  # idempotent
    result = asyncio.run(journal_run(_cashier(ledger, model), SECOND, session=session))
    session.close()
    assert ledger.count(call="pay") == 0 and all(orphans(sent) == [] for sent in model.inputs)
    assert result.final_output


def test_arepair_and_a_recovery_by_any_face_agree_and_append_once(target: str, tmp_path: Path) -> None:
    """``arepair`` after ``j.recover()`` appends nothing; the view is the same before and after."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    _killed_run(target, ledger, "before_effect")
    with journal.open(target) as j:
        (result,) = j.recover()
        assert [e.type for e in result.appended] == ["tool_result", "turn_end"]
    session = JournalSession("bot-1", target)
    before = asyncio.run(session.get_items())
    done = asyncio.run(arepair(session))
    assert (done.recovered, done.added, done.unanswered, done.live_owner) == ((), (), (), None)
    assert asyncio.run(session.get_items()) == before
    assert asyncio.run(session.get_items(limit=2)) == before[-2:]
    session.close()


def test_g9_the_async_faces_recovery_is_projected_and_a_session_sharing_an_async_journal_runs_on(
    target: str, tmp_path: Path
) -> None:
    """``aj.recover()`` on the async face, then a session that shares that ``AsyncJournal``: the
    items show the call answered before any repair, and ``journal_run`` does not pay again."""
    import journal.aio

    ledger = Ledger(tmp_path / "ledger.jsonl")
    _killed_run(target, ledger, "after_effect")

    async def restart() -> tuple[list[Any], Any, ScriptedModel]:
        async with journal.aio.open(target) as aj:
            await aj.recover()
            session = JournalSession("bot-1", aj)
            view = await session.get_items()
            model = ScriptedModel(cashier)
            result = await journal_run(_cashier(ledger, model), SECOND, session=session)
            return view, result, model

    view, result, model = asyncio.run(restart())
    assert orphans(view) == [] and "MAY have run" in _answered(view)["pay-1"]
    assert result.final_output.startswith("Not paying again") and ledger.count(call="pay") == 1
    assert all(orphans(sent) == [] for sent in model.inputs)
