"""Google ADK after a crash: one recovery, whichever way the restart goes (DESIGN §14, §17).

The matrix: {killed inside the tool before its side effect, after it, after the tool returned
(its result stored, ADK's function response not), between turns} x {restart: the next run alone;
``journal recover`` (the CLI) then the next run; a resumable app's ``run_async(invocation_id=...)``}
x {SQLite, PostgreSQL} (on PostgreSQL each kill point and each restart once, every pairing with
``-m slow``). Each cell checks the ledger (at most one payment per intended call), every model
request (each function call answered right after it), and the MAY HAVE RUN marker where the call
may have run. Beside it, ADK's own ``DatabaseSessionService`` (sqlite+aiosqlite) under the same
kills, without the journal: what it pays, asserted as a documented fact.

The killed run is a forked child (the test process's imports) that SIGKILLs itself; the model is
scripted (``tests.test_adapter_adk.Cashier``).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions.database_session_service import DatabaseSessionService

import journal
from journal.adapters.adk import JournalPlugin, JournalSessionService
from journal.adapters.adk_events import ADK_EVENT, restore
from journal.cli.app import main as journal_cli
from journal.testing import Ledger

from .test_adapter_adk import (
    APP,
    FIRST,
    SECOND,
    USER,
    Cashier,
    answers_in,
    cashier_agent,
    die,
    killed_run,
    make_app,
    orphans,
    run,
)

KILL_POINTS = ["before_effect", "after_effect", "after_result", "between_turns"]
RESTARTS = ["next_run", "cli_then_next_run", "resume_invocation"]
PAID = {"before_effect": 0, "after_effect": 1, "after_result": 1, "between_turns": 1}


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_dsn"))
    return str(tmp_path / "j.db")


CELLS = [
    pytest.param(backend, point, restart, id=f"{backend}-{point}-{restart}", marks=marks)
    for backend in ("sqlite", "postgresql")
    for p, point in enumerate(KILL_POINTS)
    for r, restart in enumerate(RESTARTS)
    for marks in [() if backend == "sqlite" or p % len(RESTARTS) == r else pytest.mark.slow]
]


def _invocation(target: str, sid: str) -> str:
    with journal.open(target) as j:
        first = j.events(sid, types=[ADK_EVENT])[0]
    return str(restore(first.data).invocation_id)


@pytest.mark.parametrize(("target", "point", "restart"), CELLS, indirect=["target"])
def test_g9_any_restart_pays_at_most_once_and_every_model_request_is_valid(
    target: str, tmp_path: Path, point: str, restart: str
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    sid = killed_run(target, ledger, point, resumable=True)
    assert ledger.count(call="pay") == PAID[point]
    invocation = _invocation(target, sid)
    if restart == "cli_then_next_run":
        done = CliRunner().invoke(journal_cli, ["recover", "--db", target])
        assert done.exit_code == 0, (done.output, done.exception)

    async def restart_run() -> tuple[Cashier, list[Any]]:
        service = JournalSessionService(target)
        model = Cashier()
        model.requests = []
        runner = Runner(
            app=make_app(cashier_agent(ledger, model), [JournalPlugin(service)], resumable=True),
            session_service=service,
        )
        if restart == "resume_invocation":
            await run(runner, "s", None, invocation_id=invocation)
        else:
            await run(runner, "s", SECOND)
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        await service.close()
        assert got is not None
        return model, got.events

    model, events = asyncio.run(restart_run())
    assert ledger.count(call="pay") == PAID[point]  # at most once, and not again
    assert all(orphans(r) == [] for r in model.requests)  # every function call answered right after it
    shown = answers_in(events)["pay-1"]
    if point in ("before_effect", "after_effect"):
        assert "MAY have run" in shown["result"] and "verify before retrying" in shown["result"]
    else:
        assert shown == {"result": "paid 4200 cents"}  # the real result
    if restart != "resume_invocation" or point != "between_turns":
        assert model.requests, "the restart asked the model"
        said = [p.function_response for c in model.requests[0] for p in c.parts or [] if p.function_response]
        assert said and said[0].id == "pay-1"  # the model was told about the first call
    with journal.open(target) as j:
        assert j.scan().clean and j.check() == []


# -- ADK's own DatabaseSessionService under the same kills ---------------------------------------------

DB_PAID = {  # what it pays in all, measured: the call it saved unanswered is dropped (or re-run) and paid again
    ("before_effect", "next_run"): 1,
    ("after_effect", "next_run"): 2,
    ("after_result", "next_run"): 2,
    ("between_turns", "next_run"): 1,
    ("before_effect", "resume_invocation"): 1,
    ("after_effect", "resume_invocation"): 2,
    ("after_result", "resume_invocation"): 2,
    ("between_turns", "resume_invocation"): 1,
}


class _DieAfterTool(BasePlugin):
    def __init__(self) -> None:
        super().__init__("die-after-tool")

    async def after_tool_callback(self, **kwargs: Any) -> None:
        die()


def _db_killed_run(url: str, ledger: Ledger, point: str) -> None:
    pid = os.fork()
    if pid == 0:
        try:

            def kill(here: str) -> None:
                if here == point:
                    die()

            async def child() -> None:
                service = DatabaseSessionService(url)
                plugins = [_DieAfterTool()] if point == "after_result" else []
                runner = Runner(
                    app=make_app(cashier_agent(ledger, Cashier(), kill=kill), plugins, resumable=True),
                    session_service=service,
                )
                await service.create_session(app_name=APP, user_id=USER, session_id="s")
                await run(runner, "s", FIRST)

            asyncio.run(child())
            if point == "between_turns":
                die()
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


@pytest.mark.parametrize(("point", "restart"), sorted(DB_PAID), ids=lambda v: str(v))
def test_database_session_service_alone_pays_again_after_a_kill_inside_or_after_the_tool(
    tmp_path: Path, point: str, restart: str
) -> None:
    """The documented fact the journal's matrix stands beside: ADK's ``DatabaseSessionService``
    (SQLite) saves the function call before the tool runs, and nothing answers it after a kill,
    so the next run drops the call and the model asks again, or a resumed invocation re-runs it:
    a payment made before the kill is made twice."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    url = f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}"
    _db_killed_run(url, ledger, point)

    async def restart_run() -> None:
        service = DatabaseSessionService(url)
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert got is not None
        invocation = got.events[0].invocation_id
        runner = Runner(app=make_app(cashier_agent(ledger, Cashier()), [], resumable=True), session_service=service)
        if restart == "resume_invocation":
            await run(runner, "s", None, invocation_id=invocation)
        else:
            await run(runner, "s", SECOND)
        await service.close()

    asyncio.run(restart_run())
    assert ledger.count(call="pay") == DB_PAID[(point, restart)]
