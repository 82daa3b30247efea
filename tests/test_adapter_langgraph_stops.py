"""LangGraph: a tool node that stopped without finishing -- it raised, paused at ``interrupt()`` and
was resumed by a process that died, or was recovered while paused, or ran as one ``Send`` task a
call -- reads, after any recovery, with its calls answered and its task finished: no restart
path runs a paid tool again, and the model gets one answer per call (DESIGN §14: one recovery,
the framework's view a projection)."""

from __future__ import annotations

import operator
import os
import shutil
import signal
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

from click.testing import CliRunner
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent, tools_condition
from langgraph.types import Command, interrupt

import journal
from journal.adapters.langgraph import JournalSaver, repair
from journal.cli import main
from journal.testing import Ledger

from .conftest import run_child
from .test_adapter_langgraph_matrix import OneCall

THREAD = {"configurable": {"thread_id": "t1"}}


def _resumed(db: str) -> bool:
    """Whether LangGraph stored the resume of the paused task (it does so beside the node's run)."""
    with journal.open(db, readonly=True) as j:
        return any(e.data.get("channel") == "__resume__" for e in j.events("t1", types=["x.langgraph.write"]))


def stopping_graph(db: str, ledger_path: str, mode: str) -> tuple[Any, OneCall]:
    """An agent -> tools loop whose ``pay`` records its payment in the ledger. ``mode``:
    ``approve``: it first asks a human (``interrupt()``); ``die``: the same, and once paid its
    process dies (after LangGraph stored the resume); ``raise``: it raises after paying, with
    ``ToolNode(handle_tool_errors=False)``; ``plain``: it pays and returns."""
    ledger, model = Ledger(ledger_path), OneCall()

    @tool
    def pay(cents: int, ref: str) -> str:
        """Pay an amount, in cents, once per ref."""
        if mode in ("approve", "die") and interrupt({"approve?": cents}) != "yes":
            return "not approved"
        ledger.record(cents=cents)
        if mode == "raise":
            raise ConnectionResetError("connection reset after the charge")
        if mode == "die":
            deadline = time.monotonic() + 30
            while not _resumed(db) and time.monotonic() < deadline:
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGKILL)
        return f"paid {cents}"

    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([pay], handle_tool_errors=mode != "raise"))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=JournalSaver(db)), model


CHILD = """
import sys
from langgraph.types import Command
from tests.test_adapter_langgraph_stops import THREAD, stopping_graph

db, ledger, mode = sys.argv[1:4]
graph, _ = stopping_graph(db, ledger, mode)
start = Command(resume="yes") if mode == "die" else {"messages": [("user", "pay the bill")]}
try:
    graph.invoke(start, THREAD, durability="sync")
except ConnectionResetError:
    pass  # mode raise: the run raised, and the process ends normally
graph.checkpointer.close()
"""


def _copy(src: Path, dst: Path) -> Path:
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")
    return dst


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three files, each made once by real child processes: ``paused`` (a run paused at
    ``interrupt()``, its process ended normally), ``resumed`` (then resumed by a process killed
    after its tool paid) and ``raised`` (a tool that raised after paying, its process ended)."""
    root = tmp_path_factory.mktemp("stops")
    paused = root / "paused.db"
    done = run_child(CHILD, str(paused), str(root / "paused.ledger"), "approve")
    assert done.returncode == 0, done.stderr
    resumed = _copy(paused, root / "resumed.db")
    done = run_child(CHILD, str(resumed), str(root / "resumed.ledger"), "die")
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    raised = root / "raised.db"
    done = run_child(CHILD, str(raised), str(root / "raised.ledger"), "raise")
    assert done.returncode == 0, done.stderr
    return {"paused": paused, "resumed": resumed, "raised": raised}


def _one_answer_each(seen: list[BaseMessage]) -> bool:
    """Every call of an ``AIMessage`` answered by exactly one ``ToolMessage`` after it, none other."""
    asked = [c["id"] for m in seen if m.type == "ai" for c in m.tool_calls]
    answered = [m.tool_call_id for m in seen if m.type == "tool"]
    return sorted(asked) == sorted(answered)


def _newest_config(db: Path) -> dict[str, Any]:
    with journal.open(db, readonly=True) as j:
        (newest,) = j.events("t1", types=["x.langgraph.checkpoint"], newest_first=True, limit=1)
    return {"configurable": {"thread_id": "t1", "checkpoint_id": newest.data["id"]}}


def _cli_recover(db: Path) -> None:
    result = CliRunner().invoke(main, ["recover", "--db", str(db)])
    assert result.exit_code == 0, result.output


# Each restart: what runs first (nothing, the shell's recover, j.recover(), repair), then the run.
RESTARTS: dict[str, Callable[[Path, Any], Any]] = {
    "invoke_none": lambda db, g: g.invoke(None, THREAD, durability="sync"),
    "resume_again": lambda db, g: g.invoke(Command(resume="yes"), THREAD, durability="sync"),
    "cli_recover_then_resume": lambda db, g: (_cli_recover(db), g.invoke(Command(resume="yes"), THREAD)),
    "j_recover_then_invoke_none": lambda db, g: (g.checkpointer.journal.recover(), g.invoke(None, THREAD)),
    "repair_then_resume": lambda db, g: (repair(g, THREAD), g.invoke(Command(resume="yes"), THREAD)),
    # The head's own config (it names the checkpoint): LangGraph replays from it, running again
    # any task still pending there, whatever writes it stored.
    "head_config": lambda db, g: g.invoke(None, g.get_state(THREAD).config, durability="sync"),
    # The head's id as a stream of checkpoints gave it before the crash: no read of the thread
    # comes first (that read would recover the dead turn).
    "head_id_first": lambda db, g: g.invoke(None, _newest_config(db), durability="sync"),
    "cli_recover_then_head_config": lambda db, g: (_cli_recover(db), g.invoke(None, g.get_state(THREAD).config)),
}


@pytest.mark.parametrize("restart", list(RESTARTS))
def test_g9_a_resumed_tool_killed_after_paying_is_answered_and_never_paid_again(
    stopped: dict[str, Path], tmp_path: Path, restart: str
) -> None:
    """Paused at ``interrupt()``, resumed by another process that died after the tool paid: the
    resume stored after the pause says the run went on, so every restart path reads the call
    answered (MAY have run), the task finished, and pays nothing again."""
    db = _copy(stopped["resumed"], tmp_path / "j.db")
    ledger = shutil.copy(stopped["resumed"].with_suffix(".ledger"), tmp_path / "ledger")
    graph, model = stopping_graph(str(db), str(ledger), "approve")
    RESTARTS[restart](db, graph)
    assert [e["cents"] for e in Ledger(ledger).entries()] == [4200]
    seen = model.inputs[-1]
    assert _one_answer_each(seen)
    assert [m.type for m in seen] == ["human", "ai", "tool"] and "MAY have run" in str(seen[-1].content)
    assert graph.checkpointer.journal.scan().clean
    graph.checkpointer.close()


@pytest.mark.parametrize("restart", ["cli_recover_then_resume", "repair_then_resume"])
def test_g8_a_paused_run_recovered_reads_the_same_whichever_recovery_ran(
    stopped: dict[str, Path], tmp_path: Path, restart: str
) -> None:
    """A recovery run while a thread is paused at ``interrupt()`` answers its call (MAY have run,
    as the docs warn): the resume then finds the task finished -- the tool does not run and the
    model gets one answer, the journal's -- the same after ``journal recover`` as after
    ``repair`` (it ran the tool and handed the model two answers)."""
    db = _copy(stopped["paused"], tmp_path / "j.db")
    graph, model = stopping_graph(str(db), str(tmp_path / "ledger"), "approve")
    RESTARTS[restart](db, graph)
    assert Ledger(tmp_path / "ledger").entries() == []
    (seen,) = model.inputs
    assert _one_answer_each(seen) and [m.type for m in seen] == ["human", "ai", "tool"]
    assert "MAY have run" in str(seen[-1].content)
    graph.checkpointer.close()


@pytest.mark.parametrize("restart", ["invoke_none", "j_recover_then_invoke_none", "head_config", "head_id_first"])
def test_g9_a_tool_that_raised_after_paying_is_answered_and_not_run_again(
    stopped: dict[str, Path], tmp_path: Path, restart: str
) -> None:
    """``ToolNode(handle_tool_errors=False)``: the tool raised after paying and its process ended
    with the turn open. The error LangGraph stored for the task does not send it to run again:
    the next run goes on to the model with the call answered (MAY have run)."""
    db = _copy(stopped["raised"], tmp_path / "j.db")
    ledger = shutil.copy(stopped["raised"].with_suffix(".ledger"), tmp_path / "ledger")
    graph, model = stopping_graph(str(db), str(ledger), "plain")
    RESTARTS[restart](db, graph)
    assert [e["cents"] for e in Ledger(ledger).entries()] == [4200]
    (seen,) = model.inputs
    assert _one_answer_each(seen) and "MAY have run" in str(seen[-1].content)
    graph.checkpointer.close()


def test_g9_the_recovered_head_reads_the_same_by_its_id_once_the_thread_moved_on_and_a_replay_pays_nothing(
    stopped: dict[str, Path], tmp_path: Path
) -> None:
    """The head a user saw after the crash (its tool task shown run, ``next`` the model) reads the
    same by its id after the thread went on from it -- in ``get_state`` and in the history -- so
    replaying it later does not run the paid tool again (it read as stored, the call unanswered)."""
    db = _copy(stopped["raised"], tmp_path / "j.db")
    ledger = shutil.copy(stopped["raised"].with_suffix(".ledger"), tmp_path / "ledger")
    graph, model = stopping_graph(str(db), str(ledger), "plain")
    seen = graph.get_state(THREAD)
    assert seen.next == ("agent",)
    graph.invoke(None, THREAD, durability="sync")  # the thread moves on from it
    again = graph.get_state(seen.config)
    assert (again.next, again.values) == (seen.next, seen.values)
    (listed,) = [
        s
        for s in graph.get_state_history(THREAD)
        if s.config["configurable"]["checkpoint_id"] == seen.config["configurable"]["checkpoint_id"]
    ]
    assert (listed.next, listed.values) == (seen.next, seen.values)
    graph.invoke(None, seen.config, durability="sync")  # a replay of it, later
    assert [e["cents"] for e in Ledger(ledger).entries()] == [4200]
    assert all(_one_answer_each(sent) for sent in model.inputs)
    graph.checkpointer.close()


def test_the_first_read_of_a_crashed_thread_by_list_shows_what_get_state_shows(
    stopped: dict[str, Path], tmp_path: Path
) -> None:
    """``list`` (``get_state_history``) read first after the crash recovers the dead process's
    turn as ``get_tuple`` does: its head holds the answer, as ``get_state`` then shows it."""
    db = _copy(stopped["resumed"], tmp_path / "j.db")
    graph, _ = stopping_graph(str(db), str(tmp_path / "ledger"), "approve")
    (head,) = graph.checkpointer.list(THREAD, limit=1)
    listed = [(m.type, getattr(m, "tool_call_id", None)) for m in head.checkpoint["channel_values"]["messages"]]
    state = [(m.type, getattr(m, "tool_call_id", None)) for m in graph.get_state(THREAD).values["messages"]]
    assert listed == state == [("human", None), ("ai", None), ("tool", "call-1")]
    graph.checkpointer.close()


# -- a tool node run by Send, one task per call (the prebuilt agent's version "v2") -----------------


class TwoCalls(OneCall):
    """To a user message: two ``pay`` calls in one answer; to their results: an answer."""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.inputs.append(list(messages))
        if messages[-1].type == "human":
            refs = (f"a{len(messages)}", f"b{len(messages)}")  # a model asked again asks the same
            calls = [{"id": ref, "name": "pay", "args": {"cents": 100, "ref": ref}} for ref in refs]
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=calls))])
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="done"))])

    def bind_tools(self, *args: Any, **kwargs: Any) -> TwoCalls:
        return self


def react_graph(db: str, ledger_path: str, *, kill: bool = False) -> tuple[Any, TwoCalls]:
    """LangGraph's prebuilt agent (``version="v2"``: a ``Send`` per tool call). With ``kill``,
    the call ``b…`` dies once it paid and ``a…`` has paid too."""
    ledger, model = Ledger(ledger_path), TwoCalls()

    @tool
    def pay(cents: int, ref: str) -> str:
        """Pay an amount, in cents, once per ref."""
        ledger.record(ref=ref)
        if kill and ref.startswith("b"):
            deadline = time.monotonic() + 30
            while not any(e["ref"].startswith("a") for e in ledger.entries()) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        return f"paid {ref}"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the prebuilt agent is deprecated in LangGraph 1.x, and still used
        graph = create_react_agent(model, [pay], checkpointer=JournalSaver(db), version="v2")
    return graph, model


REACT_CHILD = """
import sys
from tests.test_adapter_langgraph_stops import THREAD, react_graph

graph, _ = react_graph(sys.argv[1], sys.argv[2], kill=True)
graph.invoke({"messages": [("user", "pay both")]}, THREAD, durability="sync")
"""


@pytest.mark.parametrize("restart", ["invoke_none", "j_recover_then_invoke_none", "new_input", "head_config"])
def test_g9_calls_sent_to_the_tool_node_one_task_each_are_answered_and_not_run_again(
    tmp_path: Path, restart: str
) -> None:
    """A tool node run by ``Send`` (one task per call), killed inside the second call after
    both paid: each call's task reads as finished with its answer (the journal's, or the one a
    task stored), so ``invoke(None)`` pays nothing again and the model gets one answer a call."""
    db, ledger = tmp_path / "j.db", tmp_path / "ledger"
    done = run_child(REACT_CHILD, str(db), str(ledger))
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    graph, model = react_graph(str(db), str(ledger))
    if restart == "new_input":
        graph.invoke({"messages": [("user", "did both go through?")]}, THREAD, durability="sync")
    else:
        RESTARTS[restart](db, graph)
    paid = [e["ref"] for e in Ledger(ledger).entries()]
    assert sorted(set(paid)) == sorted(paid) and {"a1", "b1"} <= set(paid)  # each call paid once
    seen = model.inputs[0]
    assert _one_answer_each(seen)
    assert "MAY have run" in str([m.content for m in seen if m.type == "tool" and m.tool_call_id == "b1"])
    assert graph.checkpointer.journal.scan().clean
    graph.checkpointer.close()


# -- a pause, read from the order LangGraph stored its writes in -------------------------------------


def _record(ns: str, checkpoint_id: str, parent: str | None) -> tuple[str, dict[str, Any], None]:
    return ("x.langgraph.checkpoint", {"ns": ns, "id": checkpoint_id, "parent_id": parent}, None)


def _write(checkpoint_id: str, channel: str, task_id: str) -> tuple[str, dict[str, Any], None]:
    data = {
        "ns": "",
        "checkpoint_id": checkpoint_id,
        "task_id": task_id,
        "task_path": "",
        "idx": -3,
        "channel": channel,
    }
    return ("x.langgraph.write", {**data, "value": ""}, None)


NULL = "00000000-0000-0000-0000-000000000000"
ORDERS = {
    # durability="async": the tool task's interrupt stored before its checkpoint's record, and
    # before that one's parent's (as LangGraph's lagging puts were seen to store them)
    "async_interrupt_before_the_records": ([_write("c", "__interrupt__", "t")], True),
    "resumed_then_died_inside_the_tool": ([_write("c", "__interrupt__", "t"), _write("c", "__resume__", NULL)], False),
    # a second interrupt() in the resumed tool: the task stores its own resume beside it
    "paused_again_at_a_second_interrupt": (
        [
            _write("c", "__interrupt__", "t"),
            _write("c", "__resume__", NULL),
            _write("c", "__interrupt__", "t"),
            _write("c", "__resume__", "t"),
        ],
        True,
    ),
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_a_thread_reads_as_paused_exactly_when_its_last_interrupt_was_not_resumed(tmp_path: Path, order: str) -> None:
    """Whether a dead process's turn is a pause (left for ``Command(resume=...)``) or a crash
    (recovered) follows the head's interrupt and resume writes, wherever LangGraph stored them."""
    writes, paused = ORDERS[order]
    with JournalSaver(tmp_path / "j.db") as saver:
        saver.journal.create_session("t1")
        early = writes[:1] if order.startswith("async") else []
        late = writes[len(early) :]
        saver.journal.append_many(
            "t1", [_record("", "a", None), *early, _record("", "b", "a"), _record("", "c", "b"), *late]
        )
        assert saver._paused("t1") is paused


# -- a human review between the model and the tools ----------------------------------------------------


def review_graph(db: str, ledger_path: str, *, kill: bool = False) -> tuple[Any, OneCall, list[str]]:
    """agent -> review (``interrupt()``: a human approves the calls) -> tools -> agent. With
    ``kill``, the tool's process dies once it paid. Returns the graph, the model, and the names
    of the nodes run in this process."""
    ledger, model, ran = Ledger(ledger_path), OneCall(), []

    @tool
    def pay(cents: int, ref: str) -> str:
        """Pay an amount, in cents, once per ref."""
        ledger.record(ref=ref)
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"paid {ref}"

    def review(state: MessagesState) -> dict[str, Any]:
        ran.append("review")
        interrupt({"approve?": [c["id"] for c in state["messages"][-1].tool_calls]})
        return {}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("review", review)
    builder.add_node("tools", ToolNode([pay]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "review", "__end__": "__end__"})
    builder.add_edge("review", "tools")
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=JournalSaver(db)), model, ran


REVIEW_CHILD = """
import sys
from langgraph.types import Command
from tests.test_adapter_langgraph_stops import THREAD, review_graph

db, ledger, step = sys.argv[1:4]
graph, _, _ = review_graph(db, ledger, kill=step == "resume")
start = Command(resume="yes") if step == "resume" else {"messages": [("user", "pay the bill")]}
graph.invoke(start, THREAD, durability="sync")
graph.checkpointer.close()
"""


def test_g9_after_a_kill_in_a_reviewed_tool_the_next_run_goes_back_to_the_model_not_the_review(
    tmp_path: Path,
) -> None:
    """The calls were approved at a review node, then the tool was killed after paying: the
    task reads finished and goes back to the node that asked for the calls (the model), not to
    the review that ran last (it would have met a transcript ending in a tool answer)."""
    db, ledger = tmp_path / "j.db", tmp_path / "ledger"
    assert run_child(REVIEW_CHILD, str(db), str(ledger), "pause").returncode == 0
    done = run_child(REVIEW_CHILD, str(db), str(ledger), "resume")
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    graph, model, ran = review_graph(str(db), str(ledger))
    graph.invoke(None, THREAD, durability="sync")
    assert ran == [] and [e["ref"] for e in Ledger(ledger).entries()] == ["call-1"]
    (seen,) = model.inputs
    assert _one_answer_each(seen) and "MAY have run" in str(seen[-1].content)
    graph.checkpointer.close()


def test_g5_an_answer_given_after_a_crash_takes_the_place_of_the_one_the_read_showed(
    stopped: dict[str, Path], tmp_path: Path
) -> None:
    """After the crash the operator records the call's real outcome the LangGraph way
    (``update_state`` as the tool node): the model gets that answer alone, not beside the
    journal's "MAY have run"; the typed log keeps the journal's as the result and the operator's
    as late evidence (G5)."""
    from langchain_core.messages import ToolMessage

    db = _copy(stopped["resumed"], tmp_path / "j.db")
    graph, model = stopping_graph(str(db), str(tmp_path / "ledger"), "approve")
    told = ToolMessage("verified with the provider: paid", tool_call_id="call-1")
    graph.update_state(THREAD, {"messages": [told]}, as_node="tools")
    graph.invoke(None, THREAD, durability="sync")
    (seen,) = model.inputs
    assert _one_answer_each(seen) and seen[-1].content == "verified with the provider: paid"
    results = [
        (e.type, e.data["content"][:5]) for e in graph.checkpointer.journal.events("t1") if "tool_result" in e.type
    ]
    assert results[0] == ("tool_result", "The c") and ("tool_result_late", "verif") in results
    graph.checkpointer.close()


# -- a tool node inside a subgraph ----------------------------------------------------------------------


class DiesOnceTheSubgraphsAnswerIsWritten(JournalSaver):
    """Dies right after LangGraph stored a subgraph's tool task's answer, before the subgraph's
    next checkpoint: the answer is a pending write only, stored without an id (as LangGraph
    stores it when its loop has not given the message one yet: a race seen in outside runs)."""

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        answer = bool(config["configurable"].get("checkpoint_ns")) and any(
            channel == "messages" and any(getattr(m, "type", None) == "tool" for m in value)
            for channel, value in writes
        )
        if answer:
            writes = [
                (ch, [m.model_copy(update={"id": None}) for m in value] if ch == "messages" else value)
                for ch, value in writes
            ]
        super().put_writes(config, writes, task_id, task_path)
        if answer:
            os.kill(os.getpid(), signal.SIGKILL)


def subgraph_graph(
    db: str, ledger_path: str, *, kill: bool = False, written: bool = False, answered: bool = False, depth: int = 1
) -> tuple[Any, OneCall]:
    """An outer graph whose one node is a compiled agent -> tools loop (its checkpoints live in
    a namespace of their own; ``depth`` 2: inside a middle subgraph of one node); ``pay``
    records its payment, and with ``kill`` its process dies after paying (``written``: once its
    answer is stored, a pending write of the subgraph's; ``answered``: in the model's call that
    follows the answer, stored in the subgraph's state)."""
    ledger, model = Ledger(ledger_path), OneCall()

    @tool
    def pay(cents: int, ref: str) -> str:
        """Pay an amount, in cents, once per ref."""
        ledger.record(cents=cents, ref=ref)
        if kill and not written and not answered:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"paid {cents}"

    def agent(state: MessagesState) -> dict[str, Any]:
        if kill and answered and state["messages"][-1].type == "tool":
            os.kill(os.getpid(), signal.SIGKILL)
        return {"messages": [model.invoke(state["messages"])]}

    inner = StateGraph(MessagesState)
    inner.add_node("agent", agent)
    inner.add_node("tools", ToolNode([pay]))
    inner.add_edge(START, "agent")
    inner.add_conditional_edges("agent", tools_condition)
    inner.add_edge("tools", "agent")
    node = inner.compile()
    for _ in range(depth - 1):
        middle = StateGraph(MessagesState)
        middle.add_node("assistant", node)
        middle.add_edge(START, "assistant")
        node = middle.compile()
    outer = StateGraph(MessagesState)
    outer.add_node("assistant", node)
    outer.add_edge(START, "assistant")
    saver = DiesOnceTheSubgraphsAnswerIsWritten(db) if kill and written else JournalSaver(db)
    return outer.compile(checkpointer=saver), model


SUBGRAPH_CHILD = """
import sys
from tests.test_adapter_langgraph_stops import THREAD, subgraph_graph

graph, _ = subgraph_graph(
    sys.argv[1], sys.argv[2], kill=True, written=sys.argv[3:] == ["written"], answered=sys.argv[3:] == ["answered"]
)
graph.invoke({"messages": [("user", "pay the bill")]}, THREAD, durability="sync")
"""


@pytest.fixture(scope="module")
def killed_in_a_subgraph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("subgraph")
    done = run_child(SUBGRAPH_CHILD, str(root / "j.db"), str(root / "j.ledger"))
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    return root / "j.db"


@pytest.mark.parametrize("restart", ["invoke_none", "cli_recover", "j_recover_then_invoke_none", "repair"])
def test_g6_g9_a_tool_node_inside_a_subgraph_killed_after_paying_is_answered_and_not_run_again(
    killed_in_a_subgraph: Path, tmp_path: Path, restart: str
) -> None:
    """The subgraph's checkpoint holding the model's call holds its dispatch too (its messages
    are typed events, as the root's are), so the journal sees the interrupted call: recovery
    answers it (MAY have run), the subgraph's head reads with the answer and its tool task run,
    and no restart path pays again."""
    db = _copy(killed_in_a_subgraph, tmp_path / "j.db")
    ledger = shutil.copy(killed_in_a_subgraph.with_suffix(".ledger"), tmp_path / "ledger")
    with journal.open(db, readonly=True) as j:
        assert [c.call_id for c in j.scan().pending_calls] == ["call-1"]  # dispatched before it ran
    graph, model = subgraph_graph(str(db), str(ledger))
    if restart == "repair":
        repair(graph, THREAD)
    elif restart == "cli_recover":
        _cli_recover(db)
    if restart in ("repair", "cli_recover"):
        graph.invoke(None, THREAD, durability="sync")
    else:
        RESTARTS[restart](db, graph)
    assert [e["ref"] for e in Ledger(ledger).entries()] == ["call-1"]
    (seen,) = model.inputs
    assert [m.type for m in seen] == ["human", "ai", "tool"] and _one_answer_each(seen)
    assert "MAY have run" in str(seen[-1].content)
    final = graph.get_state(THREAD).values["messages"]
    assert [m.type for m in final] == ["human", "ai", "tool", "ai"]
    j = graph.checkpointer.journal
    assert j.scan().clean and j.check() == []
    typed = [e.type for e in j.events("t1") if not e.type.startswith("x.")]
    assert typed == [
        "user_message", "turn_start", "assistant_message", "tool_call", "tool_result", "turn_end", "assistant_message",
    ]  # fmt: skip
    graph.checkpointer.close()


@pytest.mark.parametrize("restart", ["new_input", "head_config", "cli_recover_then_new_input"])
def test_g9_a_subgraphs_recovered_exchange_is_in_the_roots_messages_for_a_new_input_or_a_replay(
    killed_in_a_subgraph: Path, tmp_path: Path, restart: str
) -> None:
    """LangGraph's root holds a subgraph's messages only once it returns. The subgraph killed
    after its tool paid never returned, so a new input handed the model the thread without the
    call and its answer (the model asked for a new call: paid again), and a replay from the root
    head's own config ran the subgraph from its start (the same call paid twice). The root's
    head reads with the recovered exchange after its messages: the model sees the call answered
    (MAY have run), and the replay goes on to the model's answer."""
    db = _copy(killed_in_a_subgraph, tmp_path / "j.db")
    ledger = shutil.copy(killed_in_a_subgraph.with_suffix(".ledger"), tmp_path / "ledger")
    graph, model = subgraph_graph(str(db), str(ledger))
    if restart == "cli_recover_then_new_input":
        _cli_recover(db)
    shown = graph.get_state(THREAD)
    assert [m.type for m in shown.values["messages"]] == ["human", "ai", "tool"] and shown.next == ("assistant",)
    assert "MAY have run" in str(shown.values["messages"][-1].content)
    if restart == "head_config":
        RESTARTS[restart](db, graph)
        assert [e["ref"] for e in Ledger(ledger).entries()] == ["call-1"]  # not run again
    else:
        graph.invoke({"messages": [("user", "did the payment go through?")]}, THREAD, durability="sync")
    _handed_the_call_answered(graph, model)


@pytest.mark.parametrize("restart", ["invoke_none", "new_input", "head_config"])
def test_g9_a_subgraphs_answer_stored_only_as_a_pending_write_is_one_message_in_the_root(
    tmp_path: Path, restart: str
) -> None:
    """The subgraph's tool returned and its answer was stored (a pending write, without an id),
    then the process died. The root reads with the exchange lifted (nothing for recovery to
    answer: no live run goes on), and every copy of the answer -- the root's, the subgraph's
    resumed state, its return -- is one message: one answer for the call in the root, after any
    restart (the root had two, with different ids, once the subgraph returned)."""
    _the_subgraphs_paid_call_is_shown_once(tmp_path, "written", restart)


def _handed_the_call_answered(graph: Any, model: OneCall) -> None:
    """The model's first input holds the call answered right after it (MAY have run), the root
    ends with each message once, and the journal is clean; the saver is closed."""
    seen = model.inputs[0]
    assert [m.type for m in seen][:3] == ["human", "ai", "tool"] and _one_answer_each(seen)
    assert "MAY have run" in str(seen[2].content)
    final = graph.get_state(THREAD).values["messages"]
    assert _one_answer_each(final) and len({m.id for m in final}) == len(final)
    j = graph.checkpointer.journal
    assert j.scan().clean and j.check() == []
    graph.checkpointer.close()


def _the_subgraphs_paid_call_is_shown_once(tmp_path: Path, where: str, restart: str) -> None:
    """Killed ``where`` in the subgraph (``SUBGRAPH_CHILD``) after its tool paid and answered,
    then restarted: the root reads with the paid exchange, the call is paid once, the model's
    first input holds it answered by the tool, and the root ends with each message once."""
    db, ledger = tmp_path / "j.db", tmp_path / "ledger"
    done = run_child(SUBGRAPH_CHILD, str(db), str(ledger), where)
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    graph, model = subgraph_graph(str(db), str(ledger))
    shown = graph.get_state(THREAD).values["messages"]
    assert [(m.type, m.content) for m in shown][1:] == [("ai", ""), ("tool", "paid 4200")]
    if restart == "new_input":
        graph.invoke({"messages": [("user", "did the payment go through?")]}, THREAD, durability="sync")
    else:
        RESTARTS[restart](db, graph)
    paid = [e["ref"] for e in Ledger(ledger).entries()]
    assert paid[:1] == ["call-1"] and paid.count("call-1") == 1
    seen = model.inputs[0]
    assert [(m.type, m.content) for m in seen][1:3] == [("ai", ""), ("tool", "paid 4200")] and _one_answer_each(seen)
    final = graph.get_state(THREAD).values["messages"]
    assert _one_answer_each(final) and len({m.id for m in final}) == len(final)
    graph.checkpointer.close()


@pytest.mark.parametrize("restart", ["new_input", "head_config"])
def test_g9_a_subgraph_killed_in_its_model_after_its_tool_answered_is_in_the_roots_messages(
    tmp_path: Path, restart: str
) -> None:
    """Killed in the subgraph's model call after its tool paid and its answer was stored in the
    subgraph's state: nothing is owed, so recovery answers nothing; no live run goes on, so the
    root reads with the subgraph's exchange, and a new input or a replay of the root hands the
    model the paid call (it was handed the thread without it, and a replay paid again)."""
    _the_subgraphs_paid_call_is_shown_once(tmp_path, "answered", restart)


NESTED_CHILD = """
import sys
from tests.test_adapter_langgraph_stops import THREAD, subgraph_graph

graph, _ = subgraph_graph(sys.argv[1], sys.argv[2], kill=True, depth=2)
graph.invoke({"messages": [("user", "pay the bill")]}, THREAD, durability="sync")
"""


@pytest.mark.parametrize("restart", ["invoke_none", "new_input", "head_config"])
def test_g9_a_subgraph_inside_a_subgraph_killed_after_paying_is_in_the_roots_messages(
    tmp_path: Path, restart: str
) -> None:
    """The agent loop runs two subgraphs deep (root -> middle -> agent loop), and its tool died
    after paying. Its exchange comes up through the middle subgraph's head into the root's: a
    new input hands the model the call answered (it was handed the thread without it and asked
    again), a replay from the root head's own config does not pay again (it replayed the inner
    subgraph from its start), and ``invoke(None)`` goes on in the inner one."""
    db, ledger = tmp_path / "j.db", tmp_path / "ledger"
    done = run_child(NESTED_CHILD, str(db), str(ledger))
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    graph, model = subgraph_graph(str(db), str(ledger), depth=2)
    shown = graph.get_state(THREAD).values["messages"]
    assert [m.type for m in shown] == ["human", "ai", "tool"] and "MAY have run" in str(shown[-1].content)
    if restart == "new_input":
        graph.invoke({"messages": [("user", "did the payment go through?")]}, THREAD, durability="sync")
    else:
        RESTARTS[restart](db, graph)
    assert [e["ref"] for e in Ledger(ledger).entries()].count("call-1") == 1
    _handed_the_call_answered(graph, model)


# -- a tool that wrote state of its own (``Command(update=...)``) ---------------------------------------


class Paid(MessagesState):
    paid_total: Annotated[int, operator.add]
    receipts: Annotated[list[str], operator.add]
    audits: Annotated[list[str], operator.add]


class DiesOnceWritten(JournalSaver):
    """Dies right after LangGraph stored the writes of the tool task that paid ``last``, before
    the step's checkpoint."""

    last = "call-1"

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        super().put_writes(config, writes, task_id, task_path)
        if any(channel == "receipts" and value == [self.last] for channel, value in writes):
            os.kill(os.getpid(), signal.SIGKILL)


class TwoInTurn(OneCall):
    """To a user message: one ``pay`` call; to its answer: a second one; then an answer."""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.inputs.append(list(messages))
        answered = sum(1 for m in messages if m.type == "tool")
        if messages[-1].type != "human" and answered >= 2:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="done"))])
        ref = f"call-{answered + 1}"
        call = {"id": ref, "name": "pay", "args": {"cents": 4200, "ref": ref}}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=[call]))])


def command_graph(db: str, ledger_path: str, *, kill: bool = False, twice: bool = False) -> tuple[Any, OneCall]:
    """An agent -> tools loop whose ``pay`` returns ``Command(update=..., goto=...)``: its answer
    and a note after it, the amount and receipt it adds to state keys of its own, and the
    ``audit`` node to run next (beside the agent, which the tools' edge names). ``twice``: the
    model asks for a second call once the first is answered, so it runs beside ``audit``, and
    with ``kill`` the process dies after the second."""
    ledger, model = Ledger(ledger_path), (TwoInTurn() if twice else OneCall())

    @tool
    def pay(cents: int, ref: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:  # type: ignore[type-arg]
        """Pay an amount, in cents, once per ref."""
        ledger.record(ref=ref)
        answer = ToolMessage(f"paid {cents}", tool_call_id=tool_call_id)
        note = AIMessage(f"receipt {ref} noted")  # a message of its own after its answer
        return Command(update={"messages": [answer, note], "paid_total": cents, "receipts": [ref]}, goto="audit")

    builder = StateGraph(Paid)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([pay]))
    builder.add_node("audit", lambda state: {"audits": [state["receipts"][-1]]})
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    saver = DiesOnceWritten(db) if kill else JournalSaver(db)
    if kill and twice:
        saver.last = "call-2"
    return builder.compile(checkpointer=saver), model


COMMAND_CHILD = """
import sys
from tests.test_adapter_langgraph_stops import THREAD, command_graph

graph, _ = command_graph(sys.argv[1], sys.argv[2], kill=True, twice=sys.argv[3] == "twice")
graph.invoke(
    {"messages": [("user", "pay the bill")], "paid_total": 0, "receipts": [], "audits": []}, THREAD, durability="sync"
)
"""


@pytest.fixture(scope="module")
def killed_after_a_command(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("command")
    done = run_child(COMMAND_CHILD, str(root / "j.db"), str(root / "j.ledger"), "once")
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    return root / "j.db"


@pytest.mark.parametrize(
    "restart", ["invoke_none", "head_config", "head_id_first", "cli_recover_then_head_config", "repair", "new_input"]
)
def test_g9_a_tool_whose_command_was_stored_keeps_its_state_and_is_not_run_again(
    killed_after_a_command: Path, tmp_path: Path, restart: str
) -> None:
    """The tool paid and returned ``Command(update=..., goto=...)``; its process died once
    LangGraph stored the task's writes, before the step's checkpoint. The head reads with the
    tool's answer in the messages and its own writes applied before the next step: ``repair``
    keeps its state and its ``goto`` (it stored a checkpoint without them), a replay from the
    head's own config runs nothing again (it ran the tool again and handed the model two
    answers), and the model gets one answer."""
    db = _copy(killed_after_a_command, tmp_path / "j.db")
    ledger = shutil.copy(killed_after_a_command.with_suffix(".ledger"), tmp_path / "ledger")
    graph, model = command_graph(str(db), str(ledger))
    shown = graph.get_state(THREAD)
    assert shown.next == ("agent",) and (shown.values["paid_total"], shown.values["receipts"]) == (4200, ["call-1"])
    assert [m.type for m in shown.values["messages"]] == ["human", "ai", "tool", "ai"]
    if restart == "repair":
        repair(graph, THREAD)
        graph.invoke(None, THREAD, durability="sync")
    elif restart == "new_input":
        graph.invoke({"messages": [("user", "did it go through?")]}, THREAD, durability="sync")
    else:
        RESTARTS[restart](db, graph)
    paid = [e["ref"] for e in Ledger(ledger).entries()]
    assert paid[0] == "call-1" and len(set(paid)) == len(paid)  # (a new input asks for a new call)
    seen = model.inputs[0]
    assert [m.type for m in seen][:4] == ["human", "ai", "tool", "ai"] and _one_answer_each(seen)
    assert (seen[2].content, seen[3].content) == ("paid 4200", "receipt call-1 noted")  # as the tool returned them
    final = graph.get_state(THREAD).values
    assert [m.content for m in final["messages"]].count("receipt call-1 noted") == 1
    assert (final["paid_total"], final["receipts"]) == (4200 * len(paid), paid)
    # A new input runs from the input, not the nodes the head had next (LangGraph's rule): the
    # state the tool wrote holds, its ``goto`` goes with the rest of what the head had next.
    assert final["audits"] == (paid[1:] if restart == "new_input" else paid)
    assert graph.checkpointer.journal.scan().clean
    graph.checkpointer.close()


@pytest.mark.parametrize("restart", ["invoke_none", "head_config", "repair"])
def test_g9_a_command_task_is_shown_run_when_another_node_ran_beside_the_model_that_asked(
    tmp_path: Path, restart: str
) -> None:
    """The first call's ``goto`` runs ``audit`` in the same step as the model asking for the
    second: the step's records show two nodes run, and the asker is the one whose task wrote the
    call's message. The second call's task reads as run (it was left for LangGraph: a replay from
    the head's own config paid it again and handed the model two answers)."""
    db, ledger = tmp_path / "j.db", tmp_path / "ledger"
    done = run_child(COMMAND_CHILD, str(db), str(ledger), "twice")
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    graph, model = command_graph(str(db), str(ledger), twice=True)
    assert graph.get_state(THREAD).next == ("agent",)
    if restart == "repair":
        repair(graph, THREAD)
        graph.invoke(None, THREAD, durability="sync")
    else:
        RESTARTS[restart](db, graph)
    assert [e["ref"] for e in Ledger(ledger).entries()] == ["call-1", "call-2"]
    (seen,) = model.inputs
    assert _one_answer_each(seen) and [m.content for m in seen if m.type == "tool"] == ["paid 4200"] * 2
    final = graph.get_state(THREAD).values
    assert (final["paid_total"], final["receipts"], final["audits"]) == (
        8400,
        ["call-1", "call-2"],
        ["call-1", "call-2"],
    )
    assert graph.checkpointer.journal.scan().clean
    graph.checkpointer.close()


# -- two subgraphs side by side ---------------------------------------------------------------------


class Prefixed(OneCall):
    """``OneCall`` whose call ids start with ``prefix`` (two agents side by side ask their own)."""

    prefix: str = ""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.inputs.append(list(messages))
        if messages[-1].type == "human":
            ref = f"{self.prefix}{len(messages)}"
            answer = AIMessage(content="", tool_calls=[{"id": ref, "name": "pay", "args": {"cents": 100, "ref": ref}}])
        else:
            answer = AIMessage(content=f"{self.prefix}done")
        return ChatResult(generations=[ChatGeneration(message=answer)])


def side_by_side(
    db: str, ledger_path: str, *, kill: bool = False, nested_b: bool = False
) -> tuple[Any, dict[str, Prefixed]]:
    """Two agent -> tools subgraphs run side by side from the root. With ``kill``, ``a``'s tool
    pays once ``b``'s agent has answered (its turn-ending answer stored), then its process dies.
    With ``nested_b``, ``b``'s runs one level deeper (inside a middle subgraph) and its tool pays
    once ``a``'s model has answered."""
    ledger = Ledger(ledger_path)
    models = {"a": Prefixed(prefix="a-"), "b": Prefixed(prefix="b-")}
    outer = StateGraph(MessagesState)
    for name, model in models.items():

        @tool
        def pay(cents: int, ref: str) -> str:
            """Pay an amount, in cents, once per ref."""
            if kill and ref.startswith("a-"):
                _wait_for(db, "b-done")
            if nested_b and ref.startswith("b-"):
                _wait_for(db, "a-done")
            ledger.record(ref=ref)
            if kill and ref.startswith("a-"):
                os.kill(os.getpid(), signal.SIGKILL)
            return f"paid {ref}"

        inner = StateGraph(MessagesState)
        inner.add_node("agent", lambda state, model=model: {"messages": [model.invoke(state["messages"])]})
        inner.add_node("tools", ToolNode([pay]))
        inner.add_edge(START, "agent")
        inner.add_conditional_edges("agent", tools_condition)
        inner.add_edge("tools", "agent")
        node = inner.compile()
        if nested_b and name == "b":
            middle = StateGraph(MessagesState)
            middle.add_node("inner", node)
            middle.add_edge(START, "inner")
            node = middle.compile()
        outer.add_node(name, node)
        outer.add_edge(START, name)
    return outer.compile(checkpointer=JournalSaver(db)), models


SIDE_BY_SIDE_CHILD = """
import sys
from tests.test_adapter_langgraph_stops import THREAD, side_by_side

graph, _ = side_by_side(sys.argv[1], sys.argv[2], kill=True)
graph.invoke({"messages": [("user", "pay both")]}, THREAD, durability="sync")
"""


@pytest.mark.parametrize("restart", ["invoke_none", "head_config", "cli_recover_then_new_input"])
def test_g6_g9_a_subgraphs_answer_does_not_end_the_turn_while_a_side_by_side_ones_call_is_owed(
    tmp_path: Path, restart: str
) -> None:
    """``b``'s model answered (no calls) while ``a``'s tool ran; ``a``'s process died after it
    paid. ``b``'s answer ended the journal's turn with ``a-1`` dispatched and unanswered, so no
    recovery answered it (a closed turn owing a result is not a crash) and ``invoke(None)`` ran
    the tool again. The turn now ends only once no call of it is owed: recovery answers ``a-1``
    (MAY have run), and no restart pays it twice."""
    db, ledger = tmp_path / "j.db", tmp_path / "ledger"
    done = run_child(SIDE_BY_SIDE_CHILD, str(db), str(ledger))
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    with journal.open(db, readonly=True) as j:
        assert [c.call_id for c in j.scan().pending_calls] == ["a-1"]
        assert j.scan().open_turns  # b's answer did not end it (the two puts may each open one)
    graph, models = side_by_side(str(db), str(ledger))
    if restart == "cli_recover_then_new_input":
        _cli_recover(db)
        graph.invoke({"messages": [("user", "did both go through?")]}, THREAD, durability="sync")
    else:
        RESTARTS[restart](db, graph)
    paid = [e["ref"] for e in Ledger(ledger).entries()]
    assert paid.count("a-1") == 1 and paid.count("b-1") == 1
    seen = models["a"].inputs[0]
    assert _one_answer_each(seen) and "MAY have run" in str([m.content for m in seen if m.type == "tool"])
    final = graph.get_state(THREAD).values["messages"]
    assert _one_answer_each(final)
    assert graph.checkpointer.journal.scan().clean
    graph.checkpointer.close()


class AsksOnce(Prefixed):
    """``Prefixed`` that asks for a call the first time only, then answers without calls."""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.inputs:
            self.inputs.append(list(messages))
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"{self.prefix}done"))])
        return super()._generate(messages, stop, run_manager, **kw)


def _wait_for(db: str, text: str) -> None:
    """Until an ``assistant_message`` with ``text`` is stored (at most 30 s)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with journal.open(db, readonly=True) as j:
            if any(e.data.get("content") == text for e in j.events("t1", types=["assistant_message"])):
                return
        time.sleep(0.02)


def dropped_beside(db: str, ledger_path: str, *, end: bool = False) -> tuple[Any, dict[str, Prefixed]]:
    """Two subgraphs side by side: ``b``'s review drops its model's call (``RemoveMessage``)
    and its model answers without calls (``end``: ``b`` ends there, its model never answers);
    ``a``'s tool pays once ``b`` has answered (ended), then ``a``'s model answers."""
    from langchain_core.messages import RemoveMessage

    ledger = Ledger(ledger_path)
    models = {"a": Prefixed(prefix="a-"), "b": AsksOnce(prefix="b-")}

    @tool
    def pay(cents: int, ref: str) -> str:
        """Pay an amount, in cents, once per ref."""
        if end:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not ended:
                time.sleep(0.02)
        else:
            _wait_for(db, "b-done")
        ledger.record(ref=ref)
        return f"paid {ref}"

    ended: list[bool] = []

    def review(state: MessagesState) -> dict[str, Any]:
        ended.append(True)
        return {"messages": [RemoveMessage(id=state["messages"][-1].id), HumanMessage("not that one")]}

    a, b = StateGraph(MessagesState), StateGraph(MessagesState)
    a.add_node("agent", lambda state: {"messages": [models["a"].invoke(state["messages"])]})
    a.add_node("tools", ToolNode([pay]))
    a.add_edge(START, "agent")
    a.add_conditional_edges("agent", tools_condition)
    a.add_edge("tools", "agent")
    b.add_node("agent", lambda state: {"messages": [models["b"].invoke(state["messages"])]})
    b.add_node("review", review)
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", tools_condition, {"tools": "review", "__end__": "__end__"})
    b.add_edge("review", END if end else "agent")
    outer = StateGraph(MessagesState)
    outer.add_node("a", a.compile())
    outer.add_node("b", b.compile())
    outer.add_edge(START, "a")
    outer.add_edge(START, "b")
    return outer.compile(checkpointer=JournalSaver(db)), models


def test_g9_a_subgraph_that_dropped_its_call_and_ended_leaves_no_turn_open_beside_another(tmp_path: Path) -> None:
    """``b``'s review dropped its call and ``b`` ended without its model answering; ``a``'s model
    answered after it, its turn held open over ``b``'s dropped call (``b``'s latest calls). The
    root's checkpoint, once both returned, ends the turn: a clean run leaves none open (it
    stayed open, and the next read recovered it: the dropped call "MAY have run")."""
    db, ledger = tmp_path / "j.db", tmp_path / "ledger"
    graph, _ = dropped_beside(str(db), str(ledger), end=True)
    graph.invoke({"messages": [("user", "pay both")]}, THREAD, durability="sync")
    j = graph.checkpointer.journal
    assert j.turn_state("t1") is None and j.scan().open_turns == ()
    graph.invoke({"messages": [("user", "thanks")]}, THREAD, durability="sync")
    assert "MAY have run" not in str([m.content for m in graph.get_state(THREAD).values["messages"]])
    assert j.scan().open_turns == () and j.check() == []
    graph.checkpointer.close()


def test_g9_a_call_a_subgraph_dropped_does_not_hold_the_turn_open_beside_another(tmp_path: Path) -> None:
    """``b``'s review dropped its call and ``b``'s model answered; ``a`` answered after it. The
    dropped call is no call still running beside ``a``: the turn ends with the run (a turn held
    open over every owed call, the next read would have recovered it and answered the dropped
    call "MAY have run" in a healthy conversation)."""
    db, ledger = tmp_path / "j.db", tmp_path / "ledger"
    graph, _ = dropped_beside(str(db), str(ledger))
    graph.invoke({"messages": [("user", "pay both")]}, THREAD, durability="sync")
    j = graph.checkpointer.journal
    assert j.turn_state("t1") is None and [c.call_id for c in j.scan().pending_calls] == ["b-1"]
    graph.invoke({"messages": [("user", "thanks")]}, THREAD, durability="sync")
    shown = graph.get_state(THREAD).values["messages"]
    assert "MAY have run" not in str([m.content for m in shown])
    assert [e["ref"] for e in Ledger(ledger).entries()].count("a-1") == 1
    graph.checkpointer.close()


def test_g9_a_parents_copy_of_a_nested_subgraphs_messages_opens_no_turn(tmp_path: Path) -> None:
    """``a`` answered while ``b``'s inner subgraph still owed its call (the turn held open), then
    ``b``'s inner answer ended the turn; the middle subgraph's checkpoint holds the same messages.
    They are the journal's already, and so are their turn's start and end: a clean run leaves no
    turn open (the middle's copy of the call opened a turn whose end, stored, never came)."""
    db, ledger = tmp_path / "j.db", tmp_path / "ledger"
    graph, models = side_by_side(str(db), str(ledger), nested_b=True)
    for text in ("pay both", "and again"):
        graph.invoke({"messages": [("user", text)]}, THREAD, durability="sync")
        j = graph.checkpointer.journal
        assert j.turn_state("t1") is None and j.scan().open_turns == (), text
    assert all(_one_answer_each(seen) for model in models.values() for seen in model.inputs)
    assert [e["ref"] for e in Ledger(ledger).entries()].count("b-1") == 1 and j.check() == []
    graph.checkpointer.close()


@pytest.mark.parametrize("restart", ["none", "cli_recover"])
def test_g9_a_new_inputs_first_checkpoint_after_a_lifted_exchange_reads_back_answered(
    killed_in_a_subgraph: Path, tmp_path: Path, restart: str
) -> None:
    """The root read with a dead subgraph's exchange lifted into it (the call answered, MAY have
    run); a new input's first checkpoint, which writes no messages, names that list's version
    and reads back with it (it read back as the root's own list, the human message alone, and a
    fork from it handed the model the thread without the paid call)."""
    db = _copy(killed_in_a_subgraph, tmp_path / "j.db")
    ledger = shutil.copy(killed_in_a_subgraph.with_suffix(".ledger"), tmp_path / "ledger")
    graph, model = subgraph_graph(str(db), str(ledger))
    if restart == "cli_recover":
        _cli_recover(db)
    graph.invoke({"messages": [("user", "did the payment go through?")]}, THREAD, durability="sync")
    saver = graph.checkpointer
    first = next(t for t in saver.list(THREAD) if t.metadata.get("source") == "input" and t.metadata["step"] > 0)
    shown = first.checkpoint["channel_values"]["messages"]
    assert [m.type for m in shown] == ["human", "ai", "tool"] and "MAY have run" in str(shown[-1].content)
    model.inputs.clear()
    graph.invoke(None, first.config, durability="sync")  # a fork from it
    assert model.inputs and all(_one_answer_each(seen) for seen in model.inputs)
    assert "MAY have run" in str([m.content for m in model.inputs[0]])
    assert [e["ref"] for e in Ledger(ledger).entries()].count("call-1") == 1
    saver.close()
