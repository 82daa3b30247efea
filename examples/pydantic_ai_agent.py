"""A pydantic-ai agent whose sessions live in a journal, offline (pydantic-ai's FunctionModel).

Run it:  python examples/pydantic_ai_agent.py [path/to/agent.db]

It plugs the journal in (one line: ``JournalAgent(agent, path)``), runs a turn that pays an
invoice, then simulates a crash in the middle of a second payment -- right after the side
effect, before anything reports back -- and restarts: ``scan`` names the call that may have run,
``arepair`` runs the journal's one recovery (``journal recover`` from a shell would do the same),
the history pydantic-ai is handed then shows the call answered ("MAY have run"), and the next run
does not pay again.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import journal
from journal.adapters.pydantic_ai import JournalAgent, arepair


class SimulatedCrash(BaseException):
    """Stands for the process dying: nothing in the run catches it."""


def cashier(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """An offline model: pays the invoice the user's last prompt names, unless the history
    already shows that call answered -- then it reports the answer."""
    prompts = [
        p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)
    ]
    invoice = str(prompts[-1]).split()[-1]
    calls = [p for m in messages for p in m.parts if isinstance(p, ToolCallPart)]
    answers = {p.tool_call_id: p.content for m in messages for p in m.parts if isinstance(p, ToolReturnPart)}
    mine = [c for c in calls if c.args_as_dict().get("invoice") == invoice]
    if not mine:
        return ModelResponse(parts=[ToolCallPart("pay", {"invoice": invoice}, tool_call_id=f"call-{len(calls) + 1}")])
    return ModelResponse(parts=[TextPart(f"Invoice {invoice}: {answers.get(mine[-1].tool_call_id, 'no answer yet')}")])


payments: list[str] = []  # the side effects (a real bot's bank)

agent = Agent(FunctionModel(cashier), name="cashier")


@agent.tool_plain
def pay(invoice: str) -> str:
    """Pay an invoice."""
    payments.append(invoice)
    if invoice == "B-2" and payments.count("B-2") == 1:
        raise SimulatedCrash()  # the money left; the process "dies" before reporting back
    return f"paid {invoice}"


async def main(path: Path) -> None:
    jagent = JournalAgent(agent, path)  # the plug-in line
    result = await jagent.run("Please pay invoice A-1", session_id="customer-7")
    print("run 1:", result.output)
    try:
        await jagent.run("Please pay invoice B-2", session_id="customer-7")
    except SimulatedCrash:
        print("run 2: crashed inside pay(B-2), after the payment")
    jagent.close()

    # -- the restart ---------------------------------------------------------------------------
    with journal.open(path) as j:
        for call in j.scan().pending_calls:
            print(f"scan: call {call.call_id} ({call.name}) was dispatched and has no result: it MAY have run")
    jagent = JournalAgent(agent, path)
    fixed = await arepair(jagent, "customer-7")  # run() would do it too; shown here to see what it did
    print("repair: recovery appended", [e.type for e in fixed.recovered])
    for message in await jagent.history("customer-7"):
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.tool_call_id == "call-2":
                text = str(part.content)
                print("the next run sees:", "..." + text[text.index("It MAY have run") :][:60], "...")
    result = await jagent.run("Did you pay invoice B-2", session_id="customer-7")
    print("run 3:", result.output[:80], "...")
    print("payments made:", payments, "(B-2 once)")
    jagent.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(scratch) / "agent.db"))
