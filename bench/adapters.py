"""The adapters against each framework's own SQLite backend, per step of a one-tool agent loop.

    python bench/adapters.py [--steps 200] [--rounds 3] [--json] [--skip pydantic-ai,adk]

A step is one user turn of a scripted (offline) agent: the model asks for one tool, the tool
runs, the model answers. Each contender runs ``--steps`` steps on one conversation in a fresh
file (WAL, synchronous=FULL for all: the journal's ``durability="full"``, the backends' SQLite
connections set to FULL by the bench), and the figures are the median time per step over the
rounds and the bytes on disk (database + WAL, after a checkpoint) at the end.

- openai-agents: ``Runner.run`` with ``JournalSession`` and its hooks (``journal_run``: the
  dispatch is committed before the tool runs) against ``Runner.run`` with ``SQLiteSession``.
- LangGraph: an agent -> tools loop with ``MessagesState``, invoked with ``durability="sync"``,
  on ``JournalSaver`` against ``SqliteSaver``.
- Claude Agent SDK: a step's transcript entries (user, assistant with a ``tool_use``, user with
  its ``tool_result``, assistant), appended one at a time (the SDK's eager flush) through
  ``JournalSessionStore``, against a JSONL file store (the SDK ships no durable store; this is
  Claude Code's own transcript format, one JSON line per entry, fsynced per append). Each entry
  has its own timestamp, as Claude Code writes them (an entry repeating the one before it would
  flatter the journal, which stores a field equal to the previous entry's as a reference). For
  the bytes a run adds beyond an empty journal, at several lengths (``PYTHONPATH=.``):
  ``python -c "import sys; sys.path.insert(0, 'bench'); import adapters; adapters.claude_added()"``;
  ``adapters.openai_added()`` does the same for openai-agents against ``SQLiteSession``.
- pydantic-ai: ``bench/adapters_pydantic_ai.py``, ``JournalAgent`` against pydantic-ai's
  ``ConversationStore`` on SQLite (written there: pydantic-ai ships an in-memory one only).
- Google ADK: ``bench/adapters_adk.py`` (its own script: ADK's runner is an asyncio app of its
  own), ``JournalSessionService`` with ``JournalPlugin`` against ``DatabaseSessionService``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def file_bytes(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


def checkpoint_file(path: Path) -> None:
    with open(path, "rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            return  # not a database (the Claude bench's JSONL reference)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


# -- openai-agents ---------------------------------------------------------------------------------


def _openai_parts() -> tuple[Any, Any]:
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.testing.model import assistant_message, function_call
    from agents.usage import Usage

    set_tracing_disabled(True)

    class OneTool(Model):
        """Asks for ``lookup`` once per user message, then answers with its output."""

        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
            items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
            last = items[-1]
            if last.get("type") == "function_call_output":
                output = [assistant_message(f"It is {last['output']}.")]
            else:
                calls = sum(1 for i in items if i.get("type") == "function_call")
                output = [function_call("lookup", {"city": "Lyon"}, call_id=f"call-{calls + 1}")]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool
    def lookup(city: str) -> str:
        """Look the weather up."""
        return f"sunny in {city}"

    return Agent(name="weather", model=OneTool(), tools=[lookup]), Agent


def openai_journal(path: Path, steps: int) -> list[float]:
    from journal.adapters.openai_agents import JournalSession, journal_run

    agent, _ = _openai_parts()

    async def run() -> list[float]:
        session = JournalSession("user-1", path)
        times = []
        for step in range(steps):
            start = time.perf_counter()
            await journal_run(agent, f"weather, step {step}?", session=session)
            times.append(time.perf_counter() - start)
        session.close()
        return times

    return asyncio.run(run())


def openai_sqlite(path: Path, steps: int) -> list[float]:
    from agents import Runner, SQLiteSession

    agent, _ = _openai_parts()
    configure = SQLiteSession._configure_connection

    def full(conn: sqlite3.Connection) -> None:  # equal durability: WAL (its own) + synchronous=FULL
        configure(conn)
        conn.execute("PRAGMA synchronous=FULL")

    async def run() -> list[float]:
        session = SQLiteSession("user-1", str(path))
        times = []
        for step in range(steps):
            start = time.perf_counter()
            await Runner.run(agent, f"weather, step {step}?", session=session)
            times.append(time.perf_counter() - start)
        session.close()
        return times

    SQLiteSession._configure_connection = staticmethod(full)  # type: ignore[method-assign]
    try:
        return asyncio.run(run())
    finally:
        SQLiteSession._configure_connection = staticmethod(configure)  # type: ignore[method-assign]


def _interleaved(
    where: Path, runs: dict[str, Callable[..., list[float]]], steps: int, rounds: int, fixed: dict[str, int]
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Each contender's run of ``steps``, ``rounds`` times in alternating order (a file of its own
    each time, named after ``where``): the median time per step of each round, and the bytes the
    last round added beyond the contender's ``fixed`` size (its empty file)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    added: dict[str, int] = {}
    for r in range(rounds):
        for name, run in list(runs.items())[:: 1 if r % 2 == 0 else -1]:
            path = Path(f"{where}-{name}-{r}.db")
            times[name].append(statistics.median(run(path, steps)))
            checkpoint_file(path)
            added[name] = file_bytes(path) - fixed[name]
    return times, added


def _figures(
    times: dict[str, list[float]], added: dict[str, int], other: str, label: str, bytes_label: str
) -> dict[str, Any]:
    """One length's figures: each contender's median time per step, the bytes each added, and the
    journal's bytes over the ``other`` contender's (``label`` in the keys)."""
    return {
        "journal ms per step": statistics.median(times["journal"]) * 1000,
        f"{label} ms per step": statistics.median(times[other]) * 1000,
        "journal bytes added": added["journal"],
        bytes_label: added[other],
        f"bytes, journal / {label}": added["journal"] / added[other],
    }


def openai_added(steps: tuple[int, ...] = (200, 1000), rounds: int = 3) -> dict[str, Any]:
    """The bytes an openai-agents run adds to an empty journal and to an empty ``SQLiteSession``
    file (each one's fixed size subtracted), and the median time per step, at each length;
    printed as JSON. ``python -c "import sys; sys.path.insert(0, 'bench'); import adapters;
    adapters.openai_added()"``."""
    from agents import SQLiteSession

    import journal

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        fixed: dict[str, int] = {}
        for name in ("journal", "sqlite"):
            empty = Path(tmp) / f"empty-{name}.db"
            if name == "journal":
                journal.open(empty).close()
            else:
                session = SQLiteSession("user-1", str(empty))
                asyncio.run(session.get_items())  # creates its tables
                session.close()
            checkpoint_file(empty)
            fixed[name] = file_bytes(empty)
        for n in steps:
            runs = {"journal": openai_journal, "sqlite": openai_sqlite}
            times, added = _interleaved(Path(tmp) / f"openai-{n}", runs, n, rounds, fixed)
            out[f"{n} steps"] = _figures(times, added, "sqlite", "SQLiteSession", "SQLiteSession bytes added")
    out["empty journal bytes"], out["empty SQLiteSession bytes"] = fixed["journal"], fixed["sqlite"]
    print(json.dumps(out, indent=2))
    return out


# -- LangGraph -------------------------------------------------------------------------------------


def _graph(checkpointer: Any) -> Any:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    class OneTool(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            last = messages[-1]
            if last.type == "human":
                answer = AIMessage(
                    "", tool_calls=[{"id": f"call-{len(messages)}", "name": "lookup", "args": {"city": "Lyon"}}]
                )
            else:
                answer = AIMessage(f"It is {last.content}.")
            return ChatResult(generations=[ChatGeneration(message=answer)])

    @tool
    def lookup(city: str) -> str:
        """Look the weather up."""
        return f"sunny in {city}"

    model = OneTool()
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def _run_graph(graph: Any, steps: int) -> list[float]:
    config = {"configurable": {"thread_id": "t1"}}
    times = []
    for step in range(steps):
        start = time.perf_counter()
        graph.invoke({"messages": [("user", f"weather, step {step}?")]}, config, durability="sync")
        times.append(time.perf_counter() - start)
    return times


def langgraph_journal(path: Path, steps: int) -> list[float]:
    from journal.adapters.langgraph import JournalSaver

    saver = JournalSaver(str(path))
    try:
        return _run_graph(_graph(saver), steps)
    finally:
        saver.close()


def langgraph_sqlite(path: Path, steps: int) -> list[float]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute("PRAGMA synchronous=FULL")
    try:
        return _run_graph(_graph(saver), steps)
    finally:
        conn.close()


# -- Claude Agent SDK --------------------------------------------------------------------------------


def _claude_step(step: int, output: str = "sunny in Lyon", shape: str = "code") -> list[dict[str, Any]]:
    """One step's transcript entries, as the SDK mirrors them: the question, the assistant's
    ``tool_use``, its ``tool_result`` (``output``), the answer. ``shape``: ``"code"``, the fields
    every line of Claude Code's transcript carries (the ``parentUuid`` chain, ``cwd``,
    ``version``, ``gitBranch``...; a model message's id, model, stop reason and token counts,
    its ``requestId``; a result's ``toolUseResult``), or ``"minimal"``: type, uuid, session,
    time and message alone (the workload of the figures before Dec 7)."""
    session = "3f6c2a1e-9b8d-4c7e-a5f4-0e1d2c3b4a59"

    def uuid(k: int) -> str:
        return f"00000000-0000-4000-8000-{k:012d}"

    def entry(n: int, kind: str, content: object, **extra: Any) -> dict[str, Any]:
        k = step * 4 + n
        ms = k * 1237  # each entry its own time, as Claude Code stamps them
        stamp = f"2025-06-01T{10 + ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"
        if shape == "minimal":
            return {"type": kind, "uuid": uuid(k), "sessionId": session, "timestamp": stamp,
                    "message": {"role": kind, "content": content}}  # fmt: skip
        message: dict[str, Any] = {"role": kind, "content": content}
        if kind == "assistant":
            usage = {
                "input_tokens": 1200 + 40 * step, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 15000 + 40 * step,
                "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                "output_tokens": 20 + n, "service_tier": "standard",
            }  # fmt: skip
            message = {"id": f"msg_01{k:022d}", "type": "message", "role": "assistant",
                       "model": "claude-sonnet-4-5-20250929", "content": content, "stop_reason": None,
                       "stop_sequence": None, "usage": usage}  # fmt: skip
            extra = {"requestId": f"req_011{k:021d}", **extra}
        return {"parentUuid": uuid(k - 1) if k else None, "isSidechain": False, "userType": "external",
                "cwd": "/home/ada/shop", "sessionId": session, "version": "2.0.14", "gitBranch": "main",
                "type": kind, "message": message, **extra, "uuid": uuid(k), "timestamp": stamp}  # fmt: skip

    call = f"toolu_{step}"
    result = {"toolUseResult": output} if shape == "code" else {}
    return [
        entry(0, "user", f"weather, step {step}?"),
        entry(1, "assistant", [{"type": "tool_use", "id": call, "name": "lookup", "input": {"city": "Lyon"}}]),
        entry(2, "user", [{"type": "tool_result", "tool_use_id": call, "content": output}], **result),
        entry(3, "assistant", [{"type": "text", "text": "It is sunny in Lyon."}]),
    ]


def _claude_run(store: Any, steps: int, output: str = "sunny in Lyon", shape: str = "code") -> list[float]:
    key = {"project_key": "-home-ada-shop", "session_id": "3f6c2a1e-9b8d-4c7e-a5f4-0e1d2c3b4a59"}

    async def run() -> list[float]:
        times = []
        for step in range(steps):
            start = time.perf_counter()
            for one in _claude_step(step, output, shape):  # the SDK's eager flush: an entry at a time
                await store.append(key, [one])
            times.append(time.perf_counter() - start)
        return times

    return asyncio.run(run())


def claude_journal(path: Path, steps: int, output: str = "sunny in Lyon", shape: str = "code") -> list[float]:
    from journal.adapters.claude import JournalSessionStore

    store = JournalSessionStore(str(path))
    try:
        return _claude_run(store, steps, output, shape)
    finally:
        store.close()


class JsonlStore:
    """The reference store: Claude Code's own transcript format, one JSON line per entry, a
    batch fsynced before ``append`` returns (the journal's durability="full")."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def append(self, key: Any, entries: list[Any]) -> None:
        await asyncio.to_thread(self._write, entries)  # off the loop, as the journal's store writes

    def _write(self, entries: list[Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries))
            f.flush()
            os.fsync(f.fileno())


def claude_jsonl(path: Path, steps: int, output: str = "sunny in Lyon", shape: str = "code") -> list[float]:
    return _claude_run(JsonlStore(path), steps, output, shape)


def claude_added(
    steps: tuple[int, ...] = (200, 1000),
    rounds: int = 3,
    output_bytes: int = 0,
    shapes: tuple[str, ...] = ("code", "minimal"),
) -> dict[str, Any]:
    """The bytes a Claude run adds to an empty journal (its schema's fixed size subtracted)
    against the JSONL file's, and the median time per step, at each length and entry shape
    (``_claude_step``); printed as JSON. ``output_bytes``: the tool's output in each step
    (default: the loop's 13-byte answer)."""
    output = ("sunny in Lyon; " * (output_bytes // 15 + 1))[:output_bytes] if output_bytes else "sunny in Lyon"
    from journal.adapters.claude import JournalSessionStore

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.db"
        JournalSessionStore(str(empty)).close()
        checkpoint_file(empty)
        fixed = file_bytes(empty)
        for shape in shapes:
            for n in steps:
                runs = {
                    "journal": functools.partial(claude_journal, output=output, shape=shape),
                    "jsonl": functools.partial(claude_jsonl, output=output, shape=shape),
                }
                where = Path(tmp) / f"claude-{shape}-{n}"
                times, added = _interleaved(where, runs, n, rounds, {"journal": fixed, "jsonl": 0})
                out[f"{shape} entries, {n} steps"] = _figures(times, added, "jsonl", "jsonl", "jsonl bytes")
    out["empty journal bytes"] = fixed
    print(json.dumps(out, indent=2))
    return out


CONTENDERS: dict[str, dict[str, Callable[[Path, int], list[float]]]] = {
    "openai-agents": {"JournalSession + hooks": openai_journal, "SQLiteSession": openai_sqlite},
    "LangGraph": {"JournalSaver": langgraph_journal, "SqliteSaver": langgraph_sqlite},
    "Claude SDK": {"JournalSessionStore": claude_journal, "JSONL file (fsync)": claude_jsonl},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--skip", default="", help="comma-separated: pydantic-ai, adk (each runs its own script's rows)"
    )
    args = parser.parse_args()
    skipped = {name.strip() for name in args.skip.split(",") if name.strip()}
    result: dict[str, Any] = {"steps": args.steps}
    with tempfile.TemporaryDirectory() as tmp:
        for framework, contenders in CONTENDERS.items():
            times: dict[str, list[float]] = {name: [] for name in contenders}
            sizes: dict[str, int] = {}
            for r in range(args.rounds):
                names = list(contenders)[:: 1 if r % 2 == 0 else -1]
                for name in names:
                    path = Path(tmp) / f"{framework}-{name}-{r}.db".replace(" ", "_")
                    times[name].append(statistics.median(contenders[name](path, args.steps)))
                    if path.stat().st_size:
                        checkpoint_file(path)
                    sizes[name] = file_bytes(path)
                print(f"{framework}: round {r + 1}/{args.rounds}", file=sys.stderr)
            journal_name, backend = list(contenders)
            result[framework] = {
                name: {
                    "ms per step": statistics.median(times[name]) * 1000,
                    f"bytes after {args.steps} steps": sizes[name],
                }
                for name in contenders
            }
            result[framework]["time, backend / journal"] = statistics.median(times[backend]) / statistics.median(
                times[journal_name]
            )
    sys.path.insert(0, str(Path(__file__).parent))
    if "pydantic-ai" not in skipped:
        from adapters_pydantic_ai import pydantic_ai_rows

        result["pydantic-ai"] = pydantic_ai_rows(args.steps, args.rounds)
        print("pydantic-ai: done", file=sys.stderr)
    if "adk" not in skipped:
        from adapters_adk import adk_rows

        result["adk"] = adk_rows(args.steps, args.rounds)
        print("adk: done", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"one-tool agent loop, {args.steps} steps, synchronous=FULL everywhere; medians of {args.rounds} rounds")
    for framework in CONTENDERS:
        for name, figures in result[framework].items():
            if isinstance(figures, dict):
                print(
                    f"  {framework:14} {name:24} {figures['ms per step']:7.3f} ms/step  "
                    f"{figures[f'bytes after {args.steps} steps']:>11,} B on disk"
                )
        print(f"  {framework:14} backend time / journal time: {result[framework]['time, backend / journal']:.2f}x")
    if "pydantic-ai" in result:
        rows = result["pydantic-ai"]
        for key, value in rows.items():
            if key not in ("steps", "rounds"):
                print(
                    f"  pydantic-ai    {key:48} {value:>11,}"
                    if isinstance(value, int)
                    else f"  pydantic-ai    {key:48} {value}"
                )
    if "adk" in result:
        rows = result["adk"]
        for name, figures in rows["rows"].items():
            print(
                f"  adk            {name:24} {figures['ms_per_step']:7.3f} ms/step  {figures['bytes']:>11,} B on disk"
            )
        print(
            f"  adk            journal / DatabaseSessionService: time {rows['time_ratio']}x, "
            f"bytes {rows['bytes_ratio']}x"
        )


if __name__ == "__main__":
    main()
