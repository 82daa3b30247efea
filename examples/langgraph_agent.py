"""A LangGraph agent on the journal, offline: a run, a crash inside a tool, and the repair.

    python examples/langgraph_agent.py

The agent (a scripted model, no network) asks to pay a bill; the tool pays, and in the second run
the process is killed right after the payment, before LangGraph could store the tool's result.
The restart scan names the call that may have run; ``repair`` answers it in LangGraph's shape,
and the next ``invoke`` goes on without paying again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from journal.adapters.langgraph import JournalSaver, repair


class ScriptedModel(BaseChatModel):
    """Asks for ``pay`` after a user message; otherwise answers with the tool's result."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        last = messages[-1]
        if last.type == "human":
            answer = AIMessage("", tool_calls=[{"id": f"call-{len(messages)}", "name": "pay", "args": {"cents": 4200}}])
        else:
            answer = AIMessage(f"Done. The tool said: {last.content[:60]}...")
        return ChatResult(generations=[ChatGeneration(message=answer)])


def build(db: Path, *, crash: bool = False) -> Any:
    @tool
    def pay(cents: int) -> str:
        """Pay the bill."""
        with open(db.with_suffix(".payments"), "a") as payments:  # the side effect, outside the journal
            payments.write(f"paid {cents}\n")
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # dies before LangGraph stores the result
        return f"paid {cents} cents"

    model = ScriptedModel()
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([pay]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=JournalSaver(db))  # <- the one line that plugs the journal in


def run(db: Path, thread: str, *, crash: bool = False) -> list[BaseMessage]:
    graph = build(db, crash=crash)
    out = graph.invoke(
        {"messages": [HumanMessage("Pay the electricity bill")]},
        {"configurable": {"thread_id": thread}},
        durability="sync",
    )
    return out["messages"]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--crash"]:  # the child process: runs until its tool kills it
        run(Path(sys.argv[2]), "bill-2", crash=True)
        sys.exit("unreachable")
    db = Path(tempfile.mkdtemp()) / "agent.db"

    print("1. a run:", " -> ".join(m.type for m in run(db, "bill-1")))

    child = subprocess.run([sys.executable, __file__, "--crash", str(db)], check=False)
    print(f"2. a second run, killed inside its tool (exit {child.returncode})")

    graph = build(db)
    journal = graph.checkpointer.journal
    for call in journal.scan().pending_calls:
        print(f"3. the restart scan: call {call.call_id} to {call.name!r} was dispatched and has no result")
    config = {"configurable": {"thread_id": "bill-2"}}
    for message in repair(graph, config).added:
        print(f"4. repair stores a ToolMessage for {message.tool_call_id}: {message.content[:80]}...")
    out = graph.invoke(None, config, durability="sync")
    print("5. the run goes on:", out["messages"][-1].content[:70])
    print("6. payments made:", db.with_suffix(".payments").read_text().count("paid"), "(one per run: none repeated)")
    print("   the journal's transcript of bill-2:", [m.role for m in journal.messages("bill-2")])
    print(f"   see it all:  journal show bill-2 --db {db}")
