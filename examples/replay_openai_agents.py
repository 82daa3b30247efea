"""An openai-agents session, crash included, replayed as a test of the agent, offline.

Run it:  python examples/replay_openai_agents.py

The agent is an openai-agents ``Agent`` whose session is a ``JournalSession``. It takes its model
and its tools from its caller, so production (an offline stand-in for a provider, the real
``pay``) and the replay (the recording's scripted ``Model``, ``pay`` answered from the
recording) run the same code. The production session pays A-1, crashes inside ``pay(B-2)``
after the payment (a real process would have died; the journal's recovery says the call MAY
have run), and then answers a question about B-2 without paying again.

The replay plays the three turns from the export file: it stops the agent inside ``pay(B-2)``
where the recorded run died, runs the journal's recovery, carries on with the third turn, and
finds every request as recorded: matched, nothing paid, no connection opened. From a shell:
``journal replay customer-7 --from case.jsonl --agent replay_openai_agents:agent``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.testing.model import assistant_message, function_call
from agents.usage import Usage

import journal
from journal import transfer
from journal.adapters.openai_agents import JournalSession, journal_run
from journal.testing.replay import Recording

SESSION = "customer-7"
INPUTS = ["Please pay invoice A-1", "Please pay invoice B-2", "Did you pay invoice B-2"]
payments: list[str] = []  # the side effects (a real bot's bank)


class SimulatedCrash(BaseException):
    """Stands for the process dying inside the tool: nothing in the run catches it."""


def pay(invoice: str) -> str:
    """Pay an invoice."""
    payments.append(invoice)
    if invoice == "B-2" and payments.count("B-2") == 1:
        raise SimulatedCrash()  # the money left; the process "dies" before reporting back
    return f"paid {invoice}"


# -- the agent: the same code in production and under replay ---------------------------------------


def agent(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
    """One ``journal_run`` per input. ``model.openai_agents()`` is the ``Model``; ``tools.wrap``
    gives the function the tool runs (under replay: checked, and answered from the recording)."""
    set_tracing_disabled(True)
    bot = Agent(name="cashier", model=model.openai_agents(), tools=[function_tool(tools.wrap(pay))])
    session = JournalSession(session_id, j)

    async def run() -> None:
        for text in inputs:
            await journal_run(bot, text, session=session)

    asyncio.run(run())


# -- production: an offline "provider" and the real tool -------------------------------------------


class Cashier(Model):
    """An offline model: pays the invoice the user names unless the conversation shows that call."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        user = [i for i in items if i.get("role") == "user"][-1]["content"]
        calls = [i for i in items if i.get("type") == "function_call"]
        outputs = {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}
        invoice = user.split()[-1]
        mine = [c for c in calls if json.loads(c["arguments"])["invoice"] == invoice]
        if not mine:
            output = [function_call("pay", {"invoice": invoice}, call_id=f"call-{len(calls) + 1}")]
        else:
            output = [assistant_message(f"Invoice {invoice}: {outputs.get(mine[-1]['call_id'], 'no answer yet')}")]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Production:
    """What production hands the agent: the provider's model, the real tools."""

    def openai_agents(self) -> Model:
        return Cashier()

    def wrap(self, fn: Any) -> Any:
        return fn


def record(j: journal.Journal) -> None:
    """The production session: two turns, a crash inside the second, recovery, a third turn."""
    try:
        agent(j, SESSION, INPUTS[:2], Production(), Production())
    except SimulatedCrash:
        print("production: crashed inside pay(B-2), after the payment")
    j.recover()  # what a restarted bot does (journal recover, or the adapter's repair)
    agent(j, SESSION, INPUTS[2:], Production(), Production())


def main(scratch: Path) -> None:
    with journal.open(scratch / "bot.db") as j:
        record(j)
        transfer.export_file(j, str(scratch / "case.jsonl"), [SESSION])  # = journal export --session
    print("production payments:", payments)

    before = list(payments)
    verdict = Recording.from_export(scratch / "case.jsonl").replay(agent)  # tools answered from the recording
    print("replay:", "matched" if verdict.matched else verdict.divergence)
    print("  reproduced:", "; ".join(verdict.crashes))
    print(f"  {verdict.steps} recorded responses, {verdict.real_calls} tool calls run for real,",
          f"payments made by the replay: {len(payments) - len(before)}")  # fmt: skip


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(scratch))
