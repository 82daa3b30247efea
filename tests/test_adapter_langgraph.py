"""The LangGraph adapter (DESIGN §14): ``JournalSaver`` passes LangGraph's own conformance suite,
a real agent graph round-trips through it with its turns, dispatches and results in the journal,
state grows with what changed, and after a SIGKILL inside a tool ``repair`` answers the call in
LangGraph's shape so the next run neither sends an orphan call nor runs the tool again."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import statistics
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip(
    "langgraph.checkpoint.conformance", reason="the langgraph extra (and its conformance suite) is not installed"
)

from click.testing import CliRunner
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import Field

import journal
from journal.adapters.langgraph import CHECKPOINT, WRITE, JournalSaver, arepair, repair, session_id_for
from journal.cli import main
from journal.testing import Ledger

from .conftest import python_child, run_child

THREAD = {"configurable": {"thread_id": "t1"}}


# -- an offline agent: a scripted model and a paying tool --------------------------------------------


class ScriptedModel(BaseChatModel):
    """A chat model without a network: to a user message it answers with two ``pay`` calls, to
    tool results with a final answer quoting them. It records every input it was given."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.inputs.append(list(messages))
        last = messages[-1]
        if last.type == "human":
            n = len(messages)
            calls = [
                {"id": f"call-{n}-a", "name": "pay", "args": {"cents": 4200}},
                {"id": f"call-{n}-b", "name": "pay", "args": {"cents": 100}},
            ]
            answer = AIMessage(content="", tool_calls=calls)
        else:
            answer = AIMessage(content="done: " + " | ".join(str(m.content)[:20] for m in messages if m.type == "tool"))
        return ChatResult(generations=[ChatGeneration(message=answer)])


def build_agent(saver: JournalSaver, ledger_path: str, *, kill: bool = False) -> tuple[Any, ScriptedModel]:
    """An agent -> tools loop over ``MessagesState`` (LangGraph's prebuilt ``ToolNode``). The
    tool records its side effect in the ledger; with ``kill`` its process then dies at once."""
    ledger = Ledger(ledger_path)
    model = ScriptedModel()

    @tool
    def pay(cents: int) -> str:
        """Pay an amount, in cents."""
        ledger.record(cents=cents, pid=os.getpid())
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"paid {cents}"

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([pay]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver), model


def typed(j: journal.Journal, session_id: str) -> list[str]:
    return [e.type for e in j.events(session_id) if not e.type.startswith("x.")]


# -- LangGraph's conformance suite --------------------------------------------------------------------


def test_the_langgraph_conformance_suite_reports_full(tmp_path: Path) -> None:
    files = iter(range(1000))

    @checkpointer_test(name="JournalSaver")
    async def fresh_saver() -> Any:
        saver = JournalSaver(tmp_path / f"conformance-{next(files)}.db")
        yield saver
        saver.close()

    report = asyncio.run(validate(fresh_saver))
    summary = {name: (r.detected, r.passed, r.tests_passed, r.tests_failed) for name, r in report.results.items()}
    failures = [f for r in report.results.values() for f in r.failures]
    assert report.conformance_level() == "FULL", (summary, failures)
    assert len(report.results) == 8 and all(r.detected and r.passed for r in report.results.values()), summary
    assert sum(r.tests_passed for r in report.results.values()) >= 80


# -- a real graph ---------------------------------------------------------------------------------------


def test_a_graph_run_round_trips_and_the_journal_shows_its_turn_dispatches_and_results(tmp_path: Path) -> None:
    path, ledger = tmp_path / "j.db", tmp_path / "ledger"
    with JournalSaver(path) as saver:
        graph, _ = build_agent(saver, str(ledger))
        out = graph.invoke({"messages": [HumanMessage("pay the bill")]}, THREAD, durability="sync")
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "tool", "ai"]
    assert out["messages"][-1].content == "done: paid 4200 | paid 100"
    assert Ledger(ledger).count() == 2

    with JournalSaver(path) as saver:  # a fresh connection reads back what LangGraph stored
        graph, _ = build_agent(saver, str(ledger))
        snapshot = graph.get_state(THREAD)
        assert snapshot.values["messages"] == out["messages"]
        assert snapshot.next == ()
        history = list(graph.get_state_history(THREAD))
        assert len(history) == 5 and history[0].config == snapshot.config
        j = saver.journal
        assert typed(j, "t1") == [
            "user_message",
            "turn_start", "assistant_message", "tool_call", "tool_call",
            "tool_result", "tool_result",
            "assistant_message", "turn_end",
        ]  # fmt: skip
        ask = next(e for e in j.events("t1") if e.type == "assistant_message")
        assert ask.data["tool_calls"] == [
            {"id": "call-1-a", "name": "pay", "arguments": {"cents": 4200}},
            {"id": "call-1-b", "name": "pay", "arguments": {"cents": 100}},
        ]
        end = next(e for e in j.events("t1") if e.type == "turn_end")
        assert end.data == {"turn": 1, "steps": 2, "reason": "complete"}
        assert j.scan().clean and j.check() == []
        assert [(m.role, m.content) for m in j.messages("t1", provider=True)] == [
            ("user", "pay the bill"), ("assistant", ""), ("tool", "paid 4200"), ("tool", "paid 100"),
            ("assistant", "done: paid 4200 | paid 100"),
        ]  # fmt: skip
    shown = CliRunner().invoke(main, ["show", "t1", "--db", str(path)])
    assert shown.exit_code == 0 and "dispatch" in shown.output and "turn 1 ended: complete" in shown.output


def test_a_second_run_on_the_thread_opens_a_second_turn_and_a_retried_put_writes_nothing(tmp_path: Path) -> None:
    with JournalSaver(tmp_path / "j.db") as saver:
        graph, _ = build_agent(saver, str(tmp_path / "ledger"))
        graph.invoke({"messages": [HumanMessage("first")]}, THREAD, durability="sync")
        graph.invoke({"messages": [HumanMessage("second")]}, THREAD, durability="sync")
        j = saver.journal
        starts = [e.data for e in j.events("t1") if e.type == "turn_start"]
        assert starts == [{"turn": 1}, {"turn": 2}]
        count = j.count("t1")
        latest = saver.get_tuple(THREAD)
        assert latest is not None
        parent = latest.parent_config or THREAD
        saver.put(parent, latest.checkpoint, latest.metadata, latest.checkpoint["channel_versions"])
        assert j.count("t1") == count  # every event of a put is keyed: a retry adds nothing
        assert j.scan().clean


def test_a_typed_event_the_log_refuses_never_fails_langgraphs_put(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with JournalSaver(tmp_path / "j.db") as saver:
        j = saver.journal
        j.create_session("t1")
        j.append("t1", "turn_start", {"turn": 7})  # someone else dispatched call-1-a, without our keys
        j.append("t1", "tool_call", {"id": "call-1-a", "name": "pay"})
        graph, _ = build_agent(saver, str(tmp_path / "ledger"))
        out = graph.invoke({"messages": [HumanMessage("pay")]}, THREAD, durability="sync")
        assert graph.get_state(THREAD).values["messages"] == out["messages"]
        ours = [e for e in j.events("t1") if e.key is not None and e.key.startswith("lg.d")]
        assert ours == []  # that checkpoint was stored without its typed events
        assert "were not written" in caplog.text
        assert j.check() == []


def test_the_async_graph_runs_through_the_async_methods(tmp_path: Path) -> None:
    async def run() -> list[Any]:
        with JournalSaver(tmp_path / "j.db") as saver:
            graph, _ = build_agent(saver, str(tmp_path / "ledger"))
            out = await graph.ainvoke({"messages": [HumanMessage("pay")]}, THREAD, durability="sync")
            assert (await graph.aget_state(THREAD)).values["messages"] == out["messages"]
            return typed(saver.journal, "t1")

    assert asyncio.run(run())[-1] == "turn_end"


def test_any_thread_id_maps_to_a_session_that_keeps_it(tmp_path: Path) -> None:
    odd = "thread with spaces/é"
    config = {"configurable": {"thread_id": odd}}
    with JournalSaver(tmp_path / "j.db") as saver:
        graph, _ = build_agent(saver, str(tmp_path / "ledger"))
        graph.invoke({"messages": [HumanMessage("hi")]}, config, durability="sync")
        session = saver.journal.session(session_id_for(odd))
        assert session.id.startswith("lg~") and session.meta == {"adapter": "langgraph", "thread_id": odd}
        assert session_id_for("t1") == "t1" and session_id_for("lg~x") != "lg~x"
        listed = list(saver.list(None))
        assert {t.config["configurable"]["thread_id"] for t in listed} == {odd}
        assert graph.get_state(config).values["messages"][-1].content.startswith("done")
    # The command line shows the session's id whole (it was cut at 64 characters: no id to copy).
    shown = CliRunner().invoke(main, ["sessions", "--db", str(tmp_path / "j.db")])
    assert shown.exit_code == 0 and session.id in shown.output
    assert CliRunner().invoke(main, ["show", session.id, "--db", str(tmp_path / "j.db")]).exit_code == 0


# -- what the state table holds -------------------------------------------------------------------------


class Counter(TypedDict):
    big: str
    count: int


def state_bytes(path: Path, session_id: str) -> dict[str, int]:
    """Bytes of the keyed state by channel, read through a separate read-only connection."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT key, length(value) FROM state WHERE session_id = ?", (session_id,)).fetchall()
    finally:
        db.close()
    out: dict[str, int] = {}
    for key, size in rows:
        channel = key.split(",")[1].strip('"') if key.startswith("lg.v:") else key
        out[channel] = out.get(channel, 0) + size
    return out


def test_state_grows_with_the_changed_channel_only_over_200_steps(tmp_path: Path) -> None:
    path, big = tmp_path / "j.db", "x" * 100_000

    def step(state: Counter) -> dict[str, Any]:
        return {"count": state["count"] + 1}

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: END if s["count"] >= 200 else "step")
    with JournalSaver(path, durability="normal") as saver:
        graph = builder.compile(checkpointer=saver)
        out = graph.invoke({"big": big, "count": 0}, {**THREAD, "recursion_limit": 500}, durability="sync")
        assert out == {"big": big, "count": 200}
        assert len(list(saver.list(THREAD))) == 202
        by_channel = state_bytes(path, "t1")
    total = sum(by_channel.values())
    # The 100 kB value is stored twice, once each: in the input (LangGraph's __start__ channel,
    # written at the input checkpoint) and in its channel, never copied by a later step.
    assert 100_000 <= by_channel["big"] < 100_100 and 100_000 <= by_channel["__start__"] < 100_100
    # What the 200 steps changed (the counter, LangGraph's branch channel) is a few bytes each; a
    # full copy of every channel per step would be 200 x 100 kB = 20 MB.
    per_step = total - by_channel["big"] - by_channel["__start__"]
    assert per_step < 200 * 100, by_channel
    print(f"\nstate after 200 steps: {total} bytes, of which {per_step} written by the steps ({by_channel})")


# -- a crash inside a tool --------------------------------------------------------------------------------

CRASHING_RUN = """
import sys
from langchain_core.messages import HumanMessage
from journal.adapters.langgraph import JournalSaver
from tests.test_adapter_langgraph import THREAD, build_agent

saver = JournalSaver(sys.argv[1])
graph, _ = build_agent(saver, sys.argv[2], kill=True)
graph.invoke({"messages": [HumanMessage("pay the bill")]}, THREAD, durability="sync")
print("the tool did not kill its process")
"""


def test_g6_g9_after_a_kill_inside_a_tool_repair_answers_the_call_and_the_next_run_neither_orphans_nor_reruns_it(
    tmp_path: Path,
) -> None:
    path, ledger = tmp_path / "j.db", Ledger(tmp_path / "ledger")
    done = run_child(CRASHING_RUN, str(path), str(ledger.path))
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    paid = [e["cents"] for e in ledger.entries()]
    assert paid and len(paid) == len(set(paid))  # the side effect happened, each at most once

    calls = {"call-1-a", "call-1-b"}
    for suffix in ("", "-wal"):  # the same crash, to be left unrepaired
        if Path(f"{path}{suffix}").exists():
            shutil.copy(f"{path}{suffix}", tmp_path / f"control.db{suffix}")
    with JournalSaver(path) as saver:
        j = saver.journal
        report = j.scan()
        assert {c.call_id for c in report.pending_calls} == calls  # dispatched before the tool ran
        assert [t.session_id for t in report.open_turns] == ["t1"]

        # Copying the thread first recovers the turn its dead process left open (the owner the
        # saver recorded is gone), as a read of its head would: the copy, and the thread, then
        # read with every call answered, and neither runs a paid call again.
        saver.copy_thread("t1", "copy")
        assert j.turn_state("copy") is None and j.turn_state("t1") is None
        assert {e.type for e in j.events("t1")[-3:]} == {"tool_result", "turn_end"} and j.scan().clean
        copied = saver.get_tuple({"configurable": {"thread_id": "copy", "checkpoint_ns": ""}})
        head = saver.get_tuple(THREAD)
        assert copied is not None and head is not None and copied.checkpoint["id"] == head.checkpoint["id"]
        answers = [m for m in copied.checkpoint["channel_values"]["messages"] if m.type == "tool"]
        assert {m.tool_call_id for m in answers} == calls and all("MAY have run" in m.content for m in answers)

        graph, model = build_agent(saver, str(ledger.path))  # this process's tool would not die
        repaired = repair(graph, THREAD)
        assert {m.tool_call_id for m in repaired.added} == calls and repaired.unanswered == ()
        assert all("MAY have run" in m.content and m.status == "error" for m in repaired.added)
        assert repaired.recovered == ()  # the copy above ran the recovery
        assert j.scan().clean
        again = repair(graph, THREAD)  # idempotent: nothing is owed any more
        assert again.added == () and again.recovered == ()
        assert graph.get_state(THREAD).next == ("agent",)  # the tool node is done, not pending

        out = graph.invoke(None, THREAD, durability="sync")
        assert out["messages"][-1].content.startswith("done: The call")
        (seen,) = model.inputs  # the model ran once, and was sent a result for every call
        asked = {c["id"] for m in seen if m.type == "ai" for c in m.tool_calls}
        assert asked == calls and {m.tool_call_id for m in seen if m.type == "tool"} == calls
        events = j.events("t1")
        results = [e for e in events if e.type == "tool_result"]
        assert sorted(e.data["tool_call_id"] for e in results) == sorted(calls)  # G5: one each
        assert not [e for e in events if e.type == "tool_result_late"]  # repair's message is recovery's result
        assert all(e.data["metadata"]["risk"] == "tool_outcome_unknown" for e in results)
        assert j.scan().clean and j.check() == [] and j.integrity_check() == ["ok"]
    assert [e["cents"] for e in ledger.entries()] == paid  # G9: not run again

    # Without repair, a plain resume: LangGraph would run the pending tool node again (pay twice)
    # on the stored head; the saver's head read recovers the dead run's turn first, so the model
    # is told each call MAY have run and nothing is paid again.
    control = Ledger(tmp_path / "control-ledger")
    with JournalSaver(tmp_path / "control.db") as saver:
        graph, model = build_agent(saver, str(control.path))
        out = graph.invoke(None, THREAD, durability="sync")
        (seen,) = model.inputs
        assert {m.tool_call_id for m in seen if m.type == "tool"} == calls
        assert all("MAY have run" in m.content for m in seen if m.type == "tool")
        assert out["messages"][-1].content.startswith("done: The call") and saver.journal.scan().clean
    assert control.entries() == []


# -- two processes writing the same task ------------------------------------------------------------------

RACER = """
import sys
from langgraph.checkpoint.base import empty_checkpoint
from journal.adapters.langgraph import JournalSaver

with JournalSaver(sys.argv[1]) as saver:
    config = {"configurable": {"thread_id": "race", "checkpoint_ns": "", "checkpoint_id": sys.argv[2]}}
    writes = [("messages", {"n": i}) for i in range(5)]
    for _ in range(20):
        saver.put_writes(config, writes, "task-1", "path")
        saver.put_writes(config, [("other", "b")], "task-2")
print("done")
"""


def test_g2_two_processes_putting_the_same_task_writes_store_each_write_once(tmp_path: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    path = tmp_path / "j.db"
    with JournalSaver(path) as saver:
        checkpoint = empty_checkpoint()
        stored = saver.put({"configurable": {"thread_id": "race", "checkpoint_ns": ""}}, checkpoint, {"step": 0}, {})
    racers = [python_child(RACER, str(path), checkpoint["id"]) for _ in range(2)]
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0 and "done" in out, err
    with JournalSaver(path) as saver:
        writes = saver.journal.events("race", types=[WRITE])
        assert sorted((e.data["task_id"], e.data["idx"]) for e in writes) == [("task-1", i) for i in range(5)] + [
            ("task-2", 0)
        ]
        pending = saver.get_tuple(stored).pending_writes
        # in LangGraph's order (task path, task id, index): task-2 has no path
        assert pending == [("task-2", "other", "b")] + [("task-1", "messages", {"n": i}) for i in range(5)]
        assert len(saver.journal.events("race", types=[CHECKPOINT])) == 1


def test_importing_the_adapter_without_langgraph_names_the_extra() -> None:
    done = run_child(
        """
        import sys
        sys.modules["langgraph.checkpoint.base"] = None   # as if the extra were not installed
        try:
            import journal.adapters.langgraph
        except ImportError as exc:
            print(exc)
        """
    )
    assert "agent-journal[langgraph]" in done.stdout, done.stderr


# -- ids, the tool node, the projection ------------------------------------------------------------------


def test_issue25_thread_ids_map_injectively_even_one_spelled_as_anothers_hashed_form(tmp_path: Path) -> None:
    odd = "a thread/with spaces"
    hashed = session_id_for(odd)
    assert hashed.startswith("lg~")
    assert session_id_for(hashed) != hashed  # an id in the hashed form is hashed again, never kept
    with JournalSaver(tmp_path / "j.db") as saver:
        graph, _ = build_agent(saver, str(tmp_path / "ledger"))
        graph.invoke({"messages": [HumanMessage("first")]}, {"configurable": {"thread_id": odd}}, durability="sync")
        graph.invoke({"messages": [HumanMessage("second")]}, {"configurable": {"thread_id": hashed}}, durability="sync")
        first = graph.get_state({"configurable": {"thread_id": odd}}).values["messages"]
        second = graph.get_state({"configurable": {"thread_id": hashed}}).values["messages"]
        assert first[0].content == "first" and second[0].content == "second"
        metas = {s.id: s.meta["thread_id"] for s in saver.journal.sessions(meta={"adapter": "langgraph"})}
        assert metas == {hashed: odd, session_id_for(hashed): hashed}


def test_g12_repair_names_the_tool_nodes_when_it_cannot_tell_which_one_runs_the_tools(tmp_path: Path) -> None:
    @tool
    def noop() -> str:
        """Nothing."""
        return ""

    with JournalSaver(tmp_path / "j.db") as saver:
        builder = StateGraph(MessagesState)
        builder.add_node("left", ToolNode([noop]))
        builder.add_node("right", ToolNode([noop]))
        builder.add_edge(START, "left")
        builder.add_edge("left", "right")
        graph = builder.compile(checkpointer=saver)
        saver.journal.create_session("t1")
        saver.journal.append("t1", "turn_start", {"turn": 1})
        calls = [{"id": "c1", "name": "noop", "arguments": {}}]
        saver.journal.append("t1", "assistant_message", {"content": "", "tool_calls": calls})
        saver.journal.append("t1", "tool_call", {"id": "c1", "name": "noop"})
        ask = AIMessage("", tool_calls=[{"id": "c1", "name": "noop", "args": {}}])
        graph.update_state(THREAD, {"messages": [HumanMessage("go"), ask]}, as_node="right")  # nothing runs next
        count = saver.journal.count("t1")
        with pytest.raises(journal.ToolNodeNotFound) as caught:
            repair(graph, THREAD)
        assert caught.value.candidates == ("left", "right") and "tools_node=" in str(caught.value)
        assert saver.journal.count("t1") == count  # refused before anything was written (not even recovery)
        saver.journal.recover("t1")
        assert graph.get_state(THREAD).values["messages"][-1].tool_call_id == "c1"  # the read shows the answer
        with pytest.raises(journal.ToolNodeNotFound):
            repair(graph, THREAD, tools_node="nowhere")
        done = asyncio.run(
            arepair(graph, THREAD, tools_node="left")
        )  # the override, for a graph of several (async twin)
        assert [m.tool_call_id for m in done.added] == ["c1"] and "MAY have run" in done.added[0].content
        assert graph.get_state(THREAD).values["messages"][-1].tool_call_id == "c1"
    with pytest.raises(journal.InvalidArgument):
        repair(builder.compile(), THREAD)  # no JournalSaver: refused, nothing done
    with JournalSaver(tmp_path / "other.db") as saver:
        for config in ({"configurable": {}}, {}, {"configurable": {"thread_id": ""}}):
            with pytest.raises(journal.InvalidArgument, match="thread_id"):  # was a bare KeyError
                repair(builder.compile(checkpointer=saver), config)  # type: ignore[arg-type]


def _ai(*ids: str) -> AIMessage:
    return AIMessage("", id=f"ai-{'-'.join(ids)}", tool_calls=[{"id": i, "name": "pay", "args": {}} for i in ids])


def _tm(call_id: str, text: str = "ok") -> Any:
    from langchain_core.messages import ToolMessage

    return ToolMessage(text, tool_call_id=call_id, id=f"tm-{call_id}")


MAY = {"content": "It MAY have run", "is_error": True, "metadata": {"synthetic": True, "risk": "tool_outcome_unknown"}}
PROJECTIONS = [
    # (messages, saved answers, journal results, expected shape after, ids answered)
    ("nothing owed", [HumanMessage("h", id="h"), _ai("a"), _tm("a")], {}, {"a": MAY}, None),
    ("the journal answers", [HumanMessage("h", id="h"), _ai("a")], {}, {"a": MAY}, ["h", "ai-a", "journal-result:a"]),
    ("a stored write wins", [HumanMessage("h", id="h"), _ai("a")], {"a": _tm("a")}, {"a": MAY}, ["h", "ai-a", "tm-a"]),
    ("after its own answers", [_ai("a", "b"), _tm("a")], {}, {"b": MAY}, ["ai-a-b", "tm-a", "journal-result:b"]),
    ("before anything later", [_ai("a"), HumanMessage("n", id="n")], {}, {"a": MAY}, ["ai-a", "journal-result:a", "n"]),
    ("half answered: left alone", [_ai("a", "b")], {}, {"a": MAY}, None),
    ("no answer: left alone", [_ai("a")], {}, {}, None),
]


@pytest.mark.parametrize(
    ("messages", "saved", "results", "expected"), [p[1:] for p in PROJECTIONS], ids=[p[0] for p in PROJECTIONS]
)
def test_the_projection_puts_each_answer_right_after_its_call_and_never_drops_or_reorders(
    messages: list[Any], saved: dict[str, Any], results: dict[str, Any], expected: list[str] | None
) -> None:
    from journal.adapters import langgraph_projection as projection

    out = projection.answer(messages, saved, results)
    if expected is None:
        assert out is None
        return
    assert out is not None
    shown, added = out
    assert [m.id for m in shown] == expected
    assert [m for m in shown if m not in added] == messages  # every stored message, in its order
    assert projection.unanswered(shown) == []
    for m in added:
        if m.id.startswith(projection.ANSWER_ID):
            assert m.status == "error" and "MAY have run" in m.content and m.response_metadata["journal"]["synthetic"]


def test_a_read_answer_is_not_stored_when_its_call_is_answered_again_or_gone() -> None:
    from journal.adapters import langgraph_projection as projection

    shown = projection.tool_message("a", MAY)
    mine = _tm("a", "refunded")
    assert projection.superseded([HumanMessage("go", id="h"), _ai("a"), shown]) is None  # kept: it answers
    replaced = projection.superseded([_ai("a"), shown, mine])  # a later answer of the user's replaces it
    assert replaced is not None and [m.id for m in replaced] == ["ai-a", "tm-a"]
    misplaced = [_ai("a"), shown, AIMessage("done", id="later"), mine]  # an answer after a later message
    assert projection.superseded(misplaced) is None  # replaces nothing: the one in place stays
    # The user removed the AIMessage after the crash: the answer the read showed has no call left.
    orphan = projection.superseded([HumanMessage("go", id="h"), shown, HumanMessage("next", id="n")])
    assert orphan is not None and [m.id for m in orphan] == ["h", "n"]


# -- the messages channel stored as its delta ------------------------------------------------------------


def test_the_messages_channel_is_stored_as_its_delta_and_every_checkpoint_reads_back_exactly(tmp_path: Path) -> None:
    from langchain_core.messages import RemoveMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph.checkpoint.sqlite import SqliteSaver

    def edit(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        if last.content == "replace me":  # replaced by id: the stored prefix changes
            return {"messages": [HumanMessage("replaced", id=last.id)]}
        if last.content == "remove me":
            return {"messages": [RemoveMessage(id=last.id)]}
        n = len(state["messages"])
        return {"messages": [AIMessage(f"echo {n}", id=f"ai-{n}-{last.id}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("edit", edit)
    builder.add_edge(START, "edit")
    theirs_db = sqlite3.connect(tmp_path / "theirs.db", check_same_thread=False)
    theirs = SqliteSaver(theirs_db)
    inputs = [f"message {i} " + "x" * 400 for i in range(60)]
    inputs[20], inputs[40] = "replace me", "remove me"
    with JournalSaver(tmp_path / "j.db") as saver:
        ours = builder.compile(checkpointer=saver)
        reference = builder.compile(checkpointer=theirs)
        for text in inputs:
            for graph in (ours, reference):
                graph.invoke({"messages": [HumanMessage(text, id=f"h-{text[:10]}")]}, THREAD)
        saver.copy_thread("t1", "copy")
        saver.prune(["t1"], strategy="keep_latest")
        by_channel = state_bytes(tmp_path / "j.db", "t1")
    with JournalSaver(tmp_path / "j.db") as saver:  # a fresh connection, nothing remembered
        copied = list(saver.list({"configurable": {"thread_id": "copy"}}))
        mine = {t.checkpoint["id"]: t.checkpoint["channel_values"] for t in copied}
        kept = list(saver.list(THREAD))
        assert len(kept) == 1 and kept[0].checkpoint["channel_values"] == mine[kept[0].checkpoint["id"]]
    expected = [t.checkpoint["channel_values"] for t in theirs.list(THREAD)]
    assert len(mine) == len(expected) == 3 * len(inputs)
    assert list(mine.values()) == expected  # every checkpoint, forked and read cold, equals SqliteSaver's
    final = expected[0]["messages"]
    assert [m.content for m in final if m.type == "human"].count("replaced") == 1
    assert "remove me" not in [m.content for m in final]
    theirs_db.close()
    # What a full copy of each version of the list would take (what SqliteSaver stores), against
    # the deltas (a message's bytes once a digit of its version's place, and a full copy at the
    # replacement and at the removal).
    versions = {t.checkpoint["channel_versions"].get("messages"): t.checkpoint["channel_values"] for t in copied}
    full = sum(len(JsonPlusSerializer().dumps_typed(v["messages"])[1]) for v in versions.values() if "messages" in v)
    assert by_channel["messages"] <= 0.2 * full, (by_channel, full)
    print(f"\nmessages channel: {by_channel['messages']} bytes stored, {full} as a full copy per version")


@pytest.mark.parametrize(
    ("before", "after", "as_delta"),
    [
        ([], [1], True),
        ([1, 2], [1, 2, 3], True),
        (list(range(15)), list(range(20)), True),  # the array header grows from fixarray to array16
        ([1, 2], [1, 9, 3], False),  # an element replaced: stored whole
        ([1, 2], [1], False),  # an element removed: stored whole
        ([{"a": 1}], [{"a": 2}, 3], False),
    ],
    ids=["from-empty", "append", "header-grows", "replaced", "removed", "changed"],
)
def test_a_list_version_is_stored_as_the_tail_of_a_stored_one_only_when_it_extends_it_bytewise(
    before: list[Any], after: list[Any], as_delta: bool
) -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from journal.adapters import langgraph_delta as delta

    serde = JsonPlusSerializer()
    _row, base = delta.extend(None, "v1", *serde.dumps_typed(before))
    assert base is not None and base.chain == ("v1",)
    row, stored = delta.extend(base, "v2", *serde.dumps_typed(after))
    assert stored is not None and (row is not None) == as_delta
    if row is not None:
        chain, count, tail, place = delta.read_delta(row)
        assert chain == ["v1"] and count == len(after) and stored.chain == ("v1", "v2") and place == 1
        read = delta.remembered("v2", count, chain, serde.dumps_typed(before)[1], [tail], place)
        rebuilt = delta.array(read.count, read.body)
        assert serde.loads_typed(("msgpack", rebuilt)) == after
    assert delta.extend(None, "v", "json", b"[]") == (None, None)  # another encoding: not split


def test_a_long_lineage_of_list_versions_is_stored_in_bytes_linear_in_its_messages_and_reads_back_exactly() -> None:
    """2,000 versions, each one message more: every version rebuilds from the rows its chain
    names (as the saver reads them: the chain's tails after the full copy), no chain is longer
    than its place's base-FANOUT digits say, and the bytes a version adds do not grow with the
    lineage's length (a full copy every few versions would make them grow with it)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from journal.adapters import langgraph_delta as delta

    serde, rows, added = JsonPlusSerializer(), {}, []
    messages: list[str] = []
    base = None
    for n in range(2000):
        messages.append(f"message {n} " + "x" * 90)
        kind, data = serde.dumps_typed(messages)
        row, base = delta.extend(base, f"v{n}", kind, data)
        assert base is not None and (row is None) == (n == 0) and base.place == n
        rows[f"v{n}"] = row if row is not None else data
        added.append(len(rows[f"v{n}"]))
        if row is not None and (n % 97 == 0 or n > 1990):
            chain, count, tail, place = delta.read_delta(row)
            assert [int(v[1:]) for v in chain] == delta.places(place)[:-1]
            tails = [delta.read_delta(rows[v])[2] for v in chain[1:]]
            read = delta.remembered(f"v{n}", count, chain, rows[chain[0]], [*tails, tail], place)
            assert serde.loads_typed((kind, delta.array(read.count, read.body))) == messages
    per_version = [statistics.mean(added[i : i + 500]) for i in range(0, 2000, 500)]
    assert per_version[3] <= 1.5 * per_version[1], per_version  # flat, not growing with the length
    assert sum(added) <= 8 * len(serde.dumps_typed(messages)[1]), (sum(added), per_version)


def test_a_chain_of_the_older_layout_reads_back_and_the_next_version_starts_a_full_copy() -> None:
    """Rows an older saver wrote (each extending the one before, no place in their header) read
    back as they did; the list read from one is the base of no delta (its place is unknown): the
    next version is stored whole, and the lineage after it follows the places."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from journal.adapters import langgraph_delta as delta

    serde = JsonPlusSerializer()
    lists = [[f"m{i}" for i in range(n)] for n in range(1, 6)]
    bodies = [delta.split_array(serde.dumps_typed(one)[1]) for one in lists]
    rows: dict[str, bytes] = {"v0": serde.dumps_typed(lists[0])[1]}
    for n in range(1, 5):  # the older layout: the header names every version before, no place
        chain = [f"v{i}" for i in range(n)]
        header = json.dumps({"chain": delta._shared(tuple(chain)), "count": len(lists[n])}).encode()
        assert bodies[n] is not None and bodies[n - 1] is not None
        rows[f"v{n}"] = header + b"\0" + bodies[n][1][len(bodies[n - 1][1]) :]
    chain, count, tail, place = delta.read_delta(rows["v4"])
    assert chain == ["v0", "v1", "v2", "v3"] and place == -1
    tails = [delta.read_delta(rows[v])[2] for v in chain[1:]]
    read = delta.remembered("v4", count, chain, rows["v0"], [*tails, tail], place)
    assert serde.loads_typed(("msgpack", delta.array(read.count, read.body))) == lists[4]
    row, stored = delta.extend(read, "v5", *serde.dumps_typed([*lists[4], "m5"]))
    assert row is None and stored is not None and stored.place == 0
    row, stored = delta.extend(stored, "v6", *serde.dumps_typed([*lists[4], "m5", "m6"]))
    assert row is not None and stored is not None and delta.read_delta(row)[::3] == (["v5"], 1)


def test_g9_repair_of_an_async_crash_whose_tool_write_has_no_id_hands_over_one_answer_per_call(
    tmp_path: Path,
) -> None:
    """A thread killed under ``durability="async"`` in the model call after the tool returned
    (a real crash's export, cut there): its head holds the AIMessage and, as the tool node's
    stored write, a ``ToolMessage`` without an id. ``repair`` builds on the head, whose pending
    write LangGraph applies itself: handing the answer over again made it two ``ToolMessage``s
    for the one call (``add_messages`` matches ids, and these had none)."""
    from journal.transfer import import_lines

    lines = (Path(__file__).parent / "data" / "langgraph_async_crash.jsonl").read_text(encoding="utf-8").splitlines()
    with JournalSaver(tmp_path / "j.db") as saver:
        import_lines(saver.journal, lines)
        config = {"configurable": {"thread_id": "order-9"}}
        graph, model = build_agent(saver, str(tmp_path / "ledger"))
        done = repair(graph, config)
        assert [m.tool_call_id for m in done.added] == ["pay-1"] and done.unanswered == ()
        graph.invoke({"messages": [HumanMessage("did it go through?")]}, config, durability="sync")
        seen = model.inputs[0]
        assert [(m.type, getattr(m, "tool_call_id", None)) for m in seen] == [
            ("human", None), ("ai", None), ("tool", "pay-1"), ("human", None)
        ]  # fmt: skip
        assert seen[2].content == "paid 4200 cents"  # the tool's own result, stored before the kill


HITL_GRAPH = """
import sys
from typing import Any
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt
from journal.adapters.langgraph import JournalSaver


INPUTS = []


class Asker(BaseChatModel):
    @property
    def _llm_type(self):
        return "scripted"

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        INPUTS.append([(m.type, getattr(m, "tool_call_id", None)) for m in messages])
        if messages[-1].type == "human":
            answer = AIMessage(content="", tool_calls=[{"id": "call-1", "name": "pay", "args": {"cents": 42}}])
        else:
            answer = AIMessage(content="done: " + messages[-1].content)
        return ChatResult(generations=[ChatGeneration(message=answer)])

    def bind_tools(self, *a, **k):
        return self


def graph(db, ledger):
    model = Asker()

    @tool
    def pay(cents: int) -> str:
        '''Pay, once a human approves.'''
        if interrupt({"approve?": cents}) != "yes":
            return "not approved"
        with open(ledger, "a") as f:
            f.write(f"paid {cents}\\n")
        return f"paid {cents}"

    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([pay]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=JournalSaver(db))
"""


def test_a_graph_paused_at_an_interrupt_is_resumed_by_another_process_not_recovered_as_a_crash(
    tmp_path: Path,
) -> None:
    """The process that paused at ``interrupt()`` exited normally; the next one reads the thread
    (its turn's owner is gone) and resumes with ``Command(resume=...)``: the pause is not a
    crash, so the tool runs once and the model gets one answer, the real one."""
    from langgraph.types import Command

    db, ledger = tmp_path / "j.db", tmp_path / "ledger"
    pause = HITL_GRAPH + (
        "\ng = graph(sys.argv[1], sys.argv[2])"
        "\ng.invoke({'messages': [('user', 'pay the bill')]}, {'configurable': {'thread_id': 't1'}}, durability='sync')"
        "\nprint([i.value for i in g.get_state({'configurable': {'thread_id': 't1'}}).interrupts])"
    )
    done = run_child(pause, str(db), str(ledger))
    assert done.returncode == 0 and "approve?" in done.stdout, done.stderr
    space: dict[str, Any] = {}
    exec(HITL_GRAPH, space)  # the same graph, in this process
    g = space["graph"](str(db), str(ledger))
    config = {"configurable": {"thread_id": "t1"}}
    assert g.get_state(config).interrupts  # still paused: the read recovered nothing
    out = g.invoke(Command(resume="yes"), config, durability="sync")
    assert ledger.read_text() == "paid 42\n"
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai"] and out["messages"][
        -1
    ].content == "done: paid 42"
    assert space["INPUTS"][-1] == [("human", None), ("ai", None), ("tool", "call-1")]
    g.checkpointer.close()
    with journal.open(db, readonly=True) as j:
        results = [(e.type, e.data["content"]) for e in j.events("t1") if e.type.startswith("tool_result")]
        assert results == [("tool_result", "paid 42")] and j.scan().clean


def test_g12_an_async_journal_is_refused_with_what_to_pass_instead(tmp_path: Path) -> None:
    import journal.aio

    async def make() -> None:
        async with journal.aio.open(tmp_path / "a.db") as aj:
            with pytest.raises(journal.InvalidArgument, match=r"pass a journal\.Journal"):
                JournalSaver(aj)  # type: ignore[arg-type]

    asyncio.run(make())


class Chat(TypedDict):
    chat: Annotated[list[BaseMessage], add_messages]


def test_messages_kept_in_another_channel_than_the_one_named_are_warned_of_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    builder = StateGraph(Chat)
    builder.add_node("echo", lambda state: {"chat": [AIMessage(f"echo {len(state['chat'])}")]})
    builder.add_edge(START, "echo")
    with JournalSaver(tmp_path / "j.db") as saver, caplog.at_level("WARNING", logger="journal.adapters.langgraph"):
        graph = builder.compile(checkpointer=saver)
        for text in ("one", "two"):
            graph.invoke({"chat": [HumanMessage(text)]}, THREAD)
        warned = [r.getMessage() for r in caplog.records if "messages_channel='chat'" in r.getMessage()]
        assert len(warned) == 1 and "no dispatch barrier" in warned[0]
    caplog.clear()
    with JournalSaver(tmp_path / "k.db", messages_channel="chat") as saver:  # named: no warning, typed events
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"chat": [HumanMessage("one")]}, THREAD)
        assert not [r for r in caplog.records if "messages_channel" in r.getMessage()]
        assert [e.type for e in saver.journal.events("t1") if not e.type.startswith("x.")] == [
            "user_message", "assistant_message",
        ]  # fmt: skip
