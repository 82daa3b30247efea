"""The pydantic-ai adapter against pydantic-ai's own persistence, per step of a one-tool loop.

    python bench/adapters_pydantic_ai.py [--steps 200] [--rounds 3] [--json]

A step is one user turn of a scripted (offline, ``FunctionModel``) agent on one conversation:
the model asks for one tool, the tool runs, the model answers. The figures are the median time
per step over the rounds and the bytes on disk (database + WAL, after a checkpoint) at the end,
each contender in a fresh file, WAL and synchronous=FULL for both (the journal's
``durability="full"``).

- journal: ``JournalAgent(agent, path).run(prompt, session_id=...)`` -- the history loaded from
  the journal, each message stored verbatim and typed as the run goes, the response committed
  before its tool runs, the dispatch synced before the tool body, a turn per run.
- pydantic-ai's own: pydantic-ai ships no file or SQLite ``ConversationStore`` (only
  ``InMemoryConversationStore``), so the reference is ``SqliteConversationStore`` below: its five
  storage primitives on the standard library's ``sqlite3`` (one table of entries, one of records,
  ``save`` in one transaction; the history read with one recursive query), driven by the loop
  pydantic-ai documents: ``load`` -> ``agent.run(prompt, conversation=...)`` -> ``save``. It
  writes once per run, after the run: a crash mid-run loses the run, calls and all.
- the agent alone (``InMemoryConversationStore``): what a step costs with no disk at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adapters import checkpoint_file, file_bytes


def _unlimited() -> Any:
    from pydantic_ai.usage import UsageLimits

    return UsageLimits(request_limit=None)  # the conversation's usage grows with its length


_UNLIMITED = _unlimited()


def _agent() -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def one_tool(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        if returns:
            return ModelResponse(parts=[TextPart(f"It is {returns[0].content}.")])
        calls = sum(1 for m in messages for p in m.parts if isinstance(p, ToolCallPart))
        return ModelResponse(parts=[ToolCallPart("lookup", {"city": "Lyon"}, tool_call_id=f"call-{calls + 1}")])

    agent = Agent(FunctionModel(one_tool), name="weather")

    @agent.tool_plain
    def lookup(city: str) -> str:
        """Look the weather up."""
        return f"sunny in {city}"

    return agent


def sqlite_store(path: Path) -> Any:
    """pydantic-ai's ``ConversationStore`` on SQLite (WAL, synchronous=FULL)."""
    from pydantic_ai.conversation_store import ConversationConflict, ConversationEntry, ConversationRecord
    from pydantic_ai.conversation_store import ConversationStore as Base
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    class SqliteConversationStore(Base):
        def __init__(self, path: Path) -> None:
            self.conn = sqlite3.connect(path, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("CREATE TABLE IF NOT EXISTS entries (id TEXT PRIMARY KEY, parent_id TEXT, message TEXT)")
            self.conn.execute("CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, revision TEXT, record TEXT)")

        @staticmethod
        def _record(text: str) -> ConversationRecord:
            data = json.loads(text)
            return ConversationRecord(
                conversation_id=data["conversation_id"], head_id=data["head_id"], revision=data["revision"]
            )

        async def read_record(self, conversation_id: str) -> ConversationRecord | None:
            row = self.conn.execute("SELECT record FROM records WHERE id = ?", (conversation_id,)).fetchone()
            return None if row is None else self._record(row[0])

        async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[Any]:
            return [self._record(r[0]) for r in self.conn.execute("SELECT record FROM records")][:limit]

        async def write_record(
            self, record: ConversationRecord, *, new_entries: Sequence[ConversationEntry] = (), expected_revision: Any
        ) -> None:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                row = self.conn.execute(
                    "SELECT revision FROM records WHERE id = ?", (record.conversation_id,)
                ).fetchone()
                if (row[0] if row else None) != expected_revision:
                    raise ConversationConflict(record.conversation_id)
                self.conn.executemany(
                    "INSERT INTO entries VALUES (?, ?, ?)",
                    [
                        (e.id, e.parent_id, ModelMessagesTypeAdapter.dump_json([e.message]).decode())
                        for e in new_entries
                    ],
                )
                text = json.dumps(
                    {"conversation_id": record.conversation_id, "head_id": record.head_id, "revision": record.revision}
                )
                self.conn.execute(
                    "INSERT OR REPLACE INTO records VALUES (?, ?, ?)", (record.conversation_id, record.revision, text)
                )
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

        async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
            self.conn.execute("DELETE FROM records WHERE id = ?", (conversation_id,))

        async def read_entry(self, entry_id: str) -> ConversationEntry:
            row = self.conn.execute("SELECT id, parent_id, message FROM entries WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                raise KeyError(entry_id)
            (message,) = ModelMessagesTypeAdapter.validate_json(row[2])
            return ConversationEntry(id=row[0], parent_id=row[1], message=message)

        async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
            rows = self.conn.execute(
                "WITH RECURSIVE chain(id, parent_id, message, n) AS ("
                " SELECT id, parent_id, message, 0 FROM entries WHERE id = ?"
                " UNION ALL SELECT e.id, e.parent_id, e.message, c.n + 1"
                " FROM entries e JOIN chain c ON e.id = c.parent_id)"
                " SELECT id, parent_id, message FROM chain ORDER BY n DESC",
                (head_id,),
            ).fetchall()
            out = [
                ConversationEntry(id=i, parent_id=p, message=ModelMessagesTypeAdapter.validate_json(m)[0])
                for i, p, m in rows
            ]
            return out[-limit:] if limit else out

        def close(self) -> None:
            self.conn.close()

    return SqliteConversationStore(path)


def journal_run(path: Path, steps: int) -> list[float]:
    from journal.adapters.pydantic_ai import JournalAgent

    jagent = JournalAgent(_agent(), path)

    async def run() -> list[float]:
        times = []
        for step in range(steps):
            start = time.perf_counter()
            await jagent.run(f"weather, step {step}?", session_id="user-1", usage_limits=_UNLIMITED)
            times.append(time.perf_counter() - start)
        return times

    try:
        return asyncio.run(run())
    finally:
        jagent.close()


def _store_run(store: Any, steps: int) -> list[float]:
    from pydantic_ai.conversation import Conversation

    agent = _agent()

    async def run() -> list[float]:
        times = []
        for step in range(steps):
            start = time.perf_counter()
            conversation = await store.load("user-1") or Conversation(conversation_id="user-1")
            result = await agent.run(f"weather, step {step}?", conversation=conversation, usage_limits=_UNLIMITED)
            await store.save(result)
            times.append(time.perf_counter() - start)
        return times

    return asyncio.run(run())


def store_run(path: Path, steps: int) -> list[float]:
    store = sqlite_store(path)
    try:
        return _store_run(store, steps)
    finally:
        store.close()


def memory_run(path: Path, steps: int) -> list[float]:
    from pydantic_ai.conversation_store import InMemoryConversationStore

    return _store_run(InMemoryConversationStore(), steps)


CONTENDERS: dict[str, Callable[[Path, int], list[float]]] = {
    "journal": journal_run,
    "pydantic-ai ConversationStore (SQLite)": store_run,
    "agent alone (in memory)": memory_run,
}


def _empty_bytes(tmp: str) -> dict[str, int]:
    """The size of each contender's file before its first step (its schema)."""
    import journal

    out = {}
    for name, make in (("journal", lambda p: journal.open(p).close()), (_REFERENCE, lambda p: sqlite_store(p).close())):
        path = Path(tmp) / f"empty-{name.split()[0]}.db"
        make(path)
        checkpoint_file(path)
        out[name] = file_bytes(path)
    return out


_REFERENCE = "pydantic-ai ConversationStore (SQLite)"


def pydantic_ai_rows(steps: int = 200, rounds: int = 3) -> dict[str, Any]:
    """Median ms per step and bytes on disk for each contender, interleaved over ``rounds``; the
    bytes also net of each file's empty size (the journal's schema is 144 KiB before any event)."""
    times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        empty = _empty_bytes(tmp)
        for r in range(rounds):
            order = list(CONTENDERS.items())[:: 1 if r % 2 == 0 else -1]
            for name, run in order:
                path = Path(tmp) / f"{r}-{len(times[name])}-{name.split()[0]}.db"
                times[name].append(statistics.median(run(path, steps)))
                if path.exists():
                    checkpoint_file(path)
                    sizes[name] = file_bytes(path)
    rows: dict[str, Any] = {"steps": steps, "rounds": rounds}
    for name in CONTENDERS:
        rows[f"{name} ms per step"] = round(statistics.median(times[name]) * 1000, 3)
        if name in sizes:
            rows[f"{name} bytes"] = sizes[name]
            rows[f"{name} bytes added"] = sizes[name] - empty[name]
    reference = _REFERENCE
    rows["time, journal / ConversationStore"] = round(rows["journal ms per step"] / rows[f"{reference} ms per step"], 2)
    rows["bytes, journal / ConversationStore"] = round(sizes["journal"] / sizes[reference], 2)
    rows["bytes added, journal / ConversationStore"] = round(
        rows["journal bytes added"] / rows[f"{reference} bytes added"], 2
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = pydantic_ai_rows(args.steps, args.rounds)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for key, value in rows.items():
        print(f"{key:48} {value}")


if __name__ == "__main__":
    main()
