"""The peers, each persisting one agent message per op at synchronous=FULL (WAL where allowed).

- openai-agents ``SQLiteSession.add_items([item])``: one transaction (INSERT OR IGNORE of the
  session row, INSERT of the message, UPDATE of the session's ``updated_at``), run by the library
  in a worker thread via ``asyncio.to_thread``; timed as the caller awaits it.
- LangGraph ``SqliteSaver``: what a graph persists when one node adds one message is its pending
  write (``put_writes``) and then a new checkpoint (``put``): two commits. ``langgraph step`` times
  both; ``langgraph put_writes`` times the write alone (the one-commit lower bound). The checkpoint
  holds only the new message: a real ``messages`` channel carries the whole history in every
  checkpoint (unless it is a delta channel), so this is a lower bound for LangGraph.
- DBOS ``@DBOS.step`` inside a ``@DBOS.workflow`` with a SQLite system database: each step's
  return value (the message) is recorded in ``operation_outputs`` in one transaction; the step is
  timed from inside the workflow, so workflow start and end are not counted.

Durability: openai-agents and LangGraph set WAL themselves, and the sqlite3 module's SQLite
(3.40.1 here) defaults to synchronous=FULL, so the bench's explicit ``PRAGMA synchronous=FULL``
changes nothing on this machine but guarantees it elsewhere. DBOS leaves SQLite in its default
rollback-journal (DELETE) mode; the bench gives it WAL (faster for it here: ~1.2-1.6 ms a step
against ~2.2 ms in DELETE mode). Each contender reads the pragmas back from a live connection.

Each entry of ``PEERS`` builds a contender (see contenders.py) or raises ``PeerUnavailable``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

from contenders import MESSAGE_TEXT, timed_calls

PEER_MESSAGE: dict[str, Any] = {"role": "user", "content": MESSAGE_TEXT}

SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


class PeerUnavailable(Exception):
    """The peer could not be imported or set up here; the message says why."""


def sqlite3_durability(conn: sqlite3.Connection, how: str) -> str:
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = SYNC_NAMES[conn.execute("PRAGMA synchronous").fetchone()[0]]
    return f"{mode.upper()} + synchronous={sync} ({how}; sqlite3 module, SQLite {sqlite3.sqlite_version})"


# -- openai-agents ----------------------------------------------------------------------------


class OpenAIAgentsSession:
    name = "openai-agents SQLiteSession"
    what = "await SQLiteSession.add_items([message]): one transaction (3 statements) in a worker thread"

    def __init__(self, path: str) -> None:
        try:
            from agents.memory import SQLiteSession
        except Exception as exc:
            raise PeerUnavailable(f"openai-agents not importable: {exc!r}") from exc

        class FullSyncSQLiteSession(SQLiteSession):
            """The library's session; every connection it opens also gets synchronous=FULL."""

            @staticmethod
            def _configure_connection(conn: sqlite3.Connection) -> None:
                SQLiteSession._configure_connection(conn)  # its own WAL setup
                conn.execute("PRAGMA synchronous=FULL")

        self.path = path
        self.loop = asyncio.new_event_loop()
        self.session = FullSyncSQLiteSession("bench", path)
        self.durability = self.loop.run_until_complete(asyncio.to_thread(self._read_durability))

    def _read_durability(self) -> str:
        return sqlite3_durability(self.session._get_connection(), "its WAL, synchronous=FULL set by the bench")

    async def _timed(self, k: int) -> list[int]:
        clock, out = time.perf_counter_ns, []
        for _ in range(k):
            start = clock()
            await self.session.add_items([PEER_MESSAGE])
            out.append(clock() - start)
        return out

    def run(self, k: int) -> list[int]:
        return self.loop.run_until_complete(self._timed(k))

    def close(self) -> None:
        self.session.close()
        self.loop.close()


# -- LangGraph --------------------------------------------------------------------------------


class LangGraphSaver:
    """``SqliteSaver`` on a connection we open, so synchronous=FULL is set on it directly."""

    def __init__(self, path: str, *, step: bool) -> None:
        try:
            from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
            from langgraph.checkpoint.sqlite import SqliteSaver
        except Exception as exc:
            raise PeerUnavailable(f"langgraph-checkpoint-sqlite not importable: {exc!r}") from exc
        self.name = "langgraph step (put_writes + put)" if step else "langgraph put_writes"
        self.step, self.path = step, path
        self.what = (
            "put_writes([('messages', message)]) then put() of a checkpoint holding that message: two transactions"
            if step
            else "put_writes([('messages', message)]): one transaction"
        )
        self._create_checkpoint = create_checkpoint
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()  # creates the tables and sets journal_mode=WAL
        self.conn.execute("PRAGMA synchronous=FULL")
        self.durability = sqlite3_durability(self.conn, "its WAL, synchronous=FULL set by the bench")
        self.checkpoint = empty_checkpoint()
        self.config = self.saver.put(
            {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}, self.checkpoint, {"step": -1}, {}
        )
        self.n = 0

    def persist(self) -> None:
        self.n += 1
        self.saver.put_writes(self.config, [("messages", PEER_MESSAGE)], task_id=f"task-{self.n}")
        if not self.step:
            return
        version = self.saver.get_next_version(self.checkpoint["channel_versions"].get("messages"), None)
        base = dict(self.checkpoint, channel_values={"messages": [PEER_MESSAGE]})
        base["channel_versions"] = {"messages": version}
        self.checkpoint = self._create_checkpoint(base, None, self.n)
        self.config = self.saver.put(
            self.config, self.checkpoint, {"source": "loop", "step": self.n}, {"messages": version}
        )

    def run(self, k: int) -> list[int]:
        return timed_calls(self.persist, k)

    def close(self) -> None:
        self.conn.close()


# -- DBOS -------------------------------------------------------------------------------------


class DBOSSteps:
    """DBOS with a SQLite system database; per-step cost, timed inside one workflow per run.

    DBOS opens its own SQLAlchemy engine and leaves SQLite in its default rollback-journal mode;
    a ``connect`` listener on SQLAlchemy's Engine class sets WAL and synchronous=FULL on every
    connection it opens (DBOS is the only SQLAlchemy user in this process).
    """

    name = "DBOS step"
    what = "a @DBOS.step returning the message, called in a @DBOS.workflow: its output recorded in one transaction"

    def __init__(self, path: str) -> None:
        try:
            import sqlalchemy
            from dbos import DBOS
            from dbos._dbos import _get_dbos_instance
        except Exception as exc:
            raise PeerUnavailable(f"dbos not importable: {exc!r}") from exc
        self.path = path

        @sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA synchronous=FULL")

        DBOS(
            config={
                "name": "journal-bench",
                "system_database_url": f"sqlite:///{path}",
                "application_version": "bench",
                "log_level": "WARNING",
            }
        )

        @DBOS.step()
        def persist(message: dict[str, Any]) -> dict[str, Any]:
            return message

        @DBOS.workflow()
        def workflow(k: int) -> list[int]:
            return timed_calls(lambda: persist(PEER_MESSAGE), k)

        self._dbos, self._workflow = DBOS, workflow
        DBOS.launch()
        engine = _get_dbos_instance()._sys_db.engine
        with engine.connect() as conn:
            self.durability = sqlite3_durability(
                conn.connection.dbapi_connection, "WAL and synchronous=FULL set by the bench on connect"
            )

    def run(self, k: int) -> list[int]:
        return self._workflow(k)

    def close(self) -> None:
        self._dbos.destroy()


PEERS = {
    "openai-agents": lambda path: OpenAIAgentsSession(path),
    "langgraph-put_writes": lambda path: LangGraphSaver(path, step=False),
    "langgraph-step": lambda path: LangGraphSaver(path, step=True),
    "dbos": lambda path: DBOSSteps(path),
}
