"""A production session becomes a test: record an agent's session, replay it, catch a change.

Run it:  python examples/replay_plain.py

The agent is written against the journal's own API (``j.turn``, ``turn.assistant``,
``turn.dispatch``, ``put_result``) and takes its model and its tools as arguments, so the same
code runs in production (a model, real tools) and under replay (the recording's scripted model,
the recording's tool results). It runs offline: the "production" model is a small function.

What it shows: a session recorded in a journal and exported (``journal export --session``),
replayed from the export file with the same code -- matched, no tool run for real -- and then
replayed with an agent that changed one tool argument: diverged, at the turn and step of the
change, with the diff. From a shell, the same replay is
``journal replay shop-1 --from case.jsonl --agent replay_plain:agent`` (with this folder on
``PYTHONPATH``); ``--torture 50`` kills it at every crash point it reaches.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import journal
from journal import transfer
from journal.testing.replay import Recording, Response

SESSION = "shop-1"
INPUTS = ["Pay invoice A-1", "Pay invoice B-2", "Thanks!"]
PRICES = {"A-1": 1200, "B-2": 4200}
paid: list[tuple[str, int]] = []  # the real side effects (a bank)


# -- the tools -------------------------------------------------------------------------------------


def lookup(invoice: str) -> str:
    """Read an invoice's amount (no side effect)."""
    return json.dumps({"invoice": invoice, "cents": PRICES.get(invoice, 0)})


def pay(invoice: str, cents: int) -> str:
    """Pay an invoice: the side effect."""
    paid.append((invoice, cents))
    return f"paid {cents} cents for {invoice}"


TOOLS = {"lookup": lookup, "pay": pay}


# -- the agent: the same code in production and under replay ---------------------------------------


def agent(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any, *, tip: int = 0) -> None:
    """Play one turn per input: ask the model, record its answer, dispatch and run each call.

    ``model.respond(messages)`` returns a ``Response``; ``tools.call(name, arguments, call_id=,
    real=)`` runs a tool (under replay: checks it against the recording, then answers it)."""
    for text in inputs:
        with j.turn(session_id) as turn:
            j.append(session_id, "user_message", {"content": text})
            while True:
                with turn.step():
                    reply = model.respond(j.provider_view(session_id).messages)
                    turn.assistant(reply.content, **reply.fields())
                    for call in reply.tool_calls:
                        arguments = dict(call["arguments"])
                        if call["name"] == "pay" and tip:
                            arguments["cents"] += tip  # the "change" the replay is to catch
                        with turn.dispatch(call["id"]):
                            output = tools.call(call["name"], arguments, call_id=call["id"], real=TOOLS[call["name"]])
                            turn.put_result(call["id"], output, name=call["name"])
                if not reply.tool_calls:
                    break


def agent_with_a_tip(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
    """The agent after a change: it adds 1 cent to every payment."""
    agent(j, session_id, inputs, model, tools, tip=1)


# -- production: an offline "provider" and the real tools ------------------------------------------


class ShopModel:
    """The production model, offline: look the invoice up, pay what it says, then answer."""

    def respond(self, messages: list[journal.Message]) -> Response:
        last_user = max(i for i, m in enumerate(messages) if m.role == "user")
        invoice = str(messages[last_user].content).split()[-1]
        results = [m for m in messages[last_user:] if m.role == "tool"]
        n = sum(1 for m in messages if m.role == "assistant" and m.tool_calls)
        if invoice not in PRICES:
            return Response(0, 0, "You are welcome.", stop_reason="stop")
        if not results:
            call = {"id": f"call-{n + 1}", "name": "lookup", "arguments": {"invoice": invoice}}
            return Response(0, 0, "", (call,), "tool_use", {"input": 10 * len(messages), "output": 5})
        if len(results) == 1:
            cents = json.loads(str(results[0].content))["cents"]
            call = {"id": f"call-{n + 1}", "name": "pay", "arguments": {"invoice": invoice, "cents": cents}}
            return Response(0, 0, "", (call,), "tool_use", {"input": 10 * len(messages), "output": 5})
        return Response(0, 0, f"Done: {results[-1].content}.", stop_reason="stop")


class RealTools:
    """Production's tools: run each call for real."""

    def call(self, name: str, arguments: Any, *, call_id: str, real: Any) -> Any:
        return real(**arguments)


def record(j: journal.Journal) -> None:
    """The production session: the agent with its model and its real tools."""
    j.create_session(SESSION)
    agent(j, SESSION, INPUTS, ShopModel(), RealTools())


def main(scratch: Path) -> None:
    with journal.open(scratch / "shop.db") as j:
        record(j)
        transfer.export_file(j, str(scratch / "case.jsonl"), [SESSION])  # = journal export --session shop-1
    print("recorded:", len(INPUTS), "turns; payments made:", paid)

    recording = Recording.from_export(scratch / "case.jsonl")  # the case needs no database
    before = list(paid)
    verdict = recording.replay(agent)  # tools="recorded": answered from the recording
    print("replay, same code:", "matched" if verdict.matched else "diverged", f"({verdict.steps} steps,",
          f"{verdict.real_calls} tool calls run for real, payments made: {len(paid) - len(before)})")  # fmt: skip

    verdict = recording.replay(agent_with_a_tip)
    assert verdict.divergence is not None
    print("replay, one argument changed:", verdict.divergence.headline())
    for line in verdict.divergence.diff:
        print("   ", line)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(scratch))
