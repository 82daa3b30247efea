"""A Google ADK agent whose sessions live in a journal, offline (a scripted model).

Run it:  python examples/adk_agent.py

It plugs the journal in (a session service and a plugin), runs a turn that pays an invoice, then
kills a second run in the middle of a payment -- right after the side effect, before anything
reports back (a forked child that SIGKILLs itself) -- and restarts: ``scan`` names the call that
may have run, and the next ``run_async`` alone (its ``get_session`` runs the journal's one
recovery) shows the model the call answered ("MAY have run ... verify before retrying"), so the
invoice is not paid twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

import journal
from journal.adapters.adk import JournalPlugin, JournalSessionService

warnings.filterwarnings("ignore")


class Cashier(BaseLlm):
    """An offline model: pays the invoice the user names unless the request shows that call answered."""

    model: str = "scripted-cashier"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        texts = [p.text for c in llm_request.contents for p in c.parts or [] if p.text and c.role == "user"]
        invoice = texts[-1].split()[-1]
        answers = {
            p.function_response.id: p.function_response.response
            for c in llm_request.contents
            for p in c.parts or []
            if p.function_response
        }
        calls = [
            p.function_call
            for c in llm_request.contents
            for p in c.parts or []
            if p.function_call and (p.function_call.args or {}).get("invoice") == invoice
        ]
        answered = [c for c in calls if c.id in answers]
        if not answered:
            call = types.FunctionCall(id=f"pay-{invoice}", name="pay", args={"invoice": invoice})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
            return
        said = (answers[answered[-1].id] or {}).get("result")
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"Invoice {invoice}: {said}")]))


def runner_for(service: JournalSessionService, bank: Path, *, die_after_paying: bool = False) -> Runner:
    def pay(invoice: str) -> str:
        """Pay an invoice."""
        with open(bank, "a") as f:  # the side effect (a real bot's bank)
            f.write(invoice + "\n")
            f.flush()
            os.fsync(f.fileno())
        if die_after_paying:
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies before anything reports back
        return f"paid {invoice}"

    agent = LlmAgent(name="cashier", model=Cashier(), instruction="Pay each invoice once.", tools=[pay])
    app = App(name="shop", root_agent=agent, plugins=[JournalPlugin(service)])
    return Runner(app=app, session_service=service)


async def ask(runner: Runner, text: str) -> str:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    said = ""
    async for event in runner.run_async(user_id="ada", session_id="chat", new_message=message):
        if event.content and event.content.parts and event.content.parts[0].text:
            said = event.content.parts[0].text
    return said


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = sys.argv[1] if len(sys.argv) > 1 else str(Path(tmp) / "agent.db")
        bank = Path(tmp) / "bank.txt"

        async def first() -> None:
            service = JournalSessionService(db)
            await service.create_session(app_name="shop", user_id="ada", session_id="chat")
            print(await ask(runner_for(service, bank), "Pay invoice B-1"))
            await service.close()

        asyncio.run(first())
        pid = os.fork()
        if pid == 0:  # the run that dies right after paying B-2
            try:
                service = JournalSessionService(db)
                asyncio.run(ask(runner_for(service, bank, die_after_paying=True), "Pay invoice B-2"))
            finally:
                os._exit(3)
        os.waitpid(pid, 0)
        print("killed while paying B-2")
        with journal.open(db) as j:
            for call in j.scan().pending_calls:
                print(f"scan: call {call.call_id} MAY HAVE RUN")

        async def restart() -> None:
            service = JournalSessionService(db)
            print(await ask(runner_for(service, bank), "Pay invoice B-2"))
            await service.close()

        asyncio.run(restart())
        paid = bank.read_text().split()
        print(f"bank: {paid}; B-2 paid {paid.count('B-2')} time(s)" + (" (B-2 once)" if paid.count("B-2") == 1 else ""))


if __name__ == "__main__":
    main()
