"""An openai-agents bot whose sessions live in a journal, offline (a scripted model).

Run it:  python examples/openai_agents_bot.py [path/to/agent.db]

It plugs the journal in (one line), runs a turn that pays an invoice, then simulates a crash in
the middle of a second payment -- right after the side effect, before anything reports back --
and restarts: ``scan`` names the call that may have run, ``arepair`` runs the journal's one
recovery (``journal recover`` from a shell would do the same), the session's items then show the
call answered in the framework's own shape, and the next run does not pay again.
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
from journal.adapters.openai_agents import JournalSession, arepair, journal_run


class SimulatedCrash(BaseException):
    """Stands for the process dying: nothing in the run catches it."""


class Cashier(Model):
    """An offline model: pays each invoice the user names unless the conversation already shows
    that call with its output."""

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


payments: list[str] = []  # the side effects (a real bot's bank)


@function_tool
def pay(invoice: str) -> str:
    """Pay an invoice."""
    payments.append(invoice)
    if invoice == "B-2":
        raise SimulatedCrash()  # the money left; the process "dies" before reporting back
    return f"paid {invoice}"


async def main(path: Path) -> None:
    set_tracing_disabled(True)
    agent = Agent(name="cashier", model=Cashier(), tools=[pay])

    session = JournalSession("customer-7", path)  # the plug-in line (instead of SQLiteSession)
    result = await journal_run(agent, "Please pay invoice A-1", session=session)
    print("run 1:", result.final_output)

    try:
        await journal_run(agent, "Please pay invoice B-2", session=session)
    except SimulatedCrash:
        print("run 2: crashed inside pay(B-2), after the payment")
    session.close()

    # -- the restart ---------------------------------------------------------------------------
    with journal.open(path) as j:
        for call in j.scan().pending_calls:
            print(f"scan: call {call.call_id} ({call.name}) was dispatched and has no result: it MAY have run")
    session = JournalSession("customer-7", path)
    fixed = await arepair(session)  # journal_run would do it too; shown here to see what it did
    print("repair: recovery appended", [e.type for e in fixed.recovered])
    for item in await session.get_items():
        if item.get("type") in ("function_call", "function_call_output"):
            print("the next run sees:", item["type"], item.get("output", item.get("arguments")))
    result = await journal_run(agent, "Did you pay invoice B-2", session=session)
    print("run 3:", result.final_output[:80], "...")
    print("payments made:", payments, "(B-2 once)")
    session.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(scratch) / "agent.db"))
