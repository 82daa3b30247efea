"""The journal on PostgreSQL (DESIGN §16): a durable append against raw psycopg, many writer
processes against one, restart against SQLite, and a read.

    python bench/postgres.py [--quick] [--json] [--only append,writers,restart,read]
                             [--sessions N] [--build-procs P]
    python bench/postgres.py --from-json run.json     # the table of a saved --json run

The script starts its own server (``journal.testing.pgserver.PgServer(fsync=True)``: initdb and
pg_ctl in a fresh temporary directory, a Unix socket only) and removes it at the end; SQLite files
go to a fresh temporary directory too, never the repository. Each part has its own database.

- ``append``: ``Journal.append(session, "user_message", data)`` with ``durability="full"``
  (``synchronous_commit=on``) against raw psycopg doing what a careful user would: one
  connection in psycopg's default mode (autocommit off: psycopg sends ``BEGIN`` before the
  statement), ``synchronous_commit=on``, one ``INSERT`` of the same row (data ``json.dumps``'d
  from the same ~200-byte dict) into a bare table of the ``events`` shape (session_id text, seq
  bigint, type text, data text, time_ms bigint, primary key (session_id, seq)), then
  ``commit()``; psycopg prepares the statement after 5 runs, as it does by default (and as it
  does for the journal). Target: journal time ≤ 1.2× raw. For information: raw psycopg with the
  INSERT alone in autocommit (one round trip); ``the journal's statements``: raw psycopg replaying,
  on the journal's own database, exactly the statements one steady ``append`` sends (caught from
  the journal's connection at the start of the run: texts, pipelines and ``prepare`` flags, so
  they follow whatever the store does), with the INSERT's row made afresh each time — journal
  over replay is the journal's Python, replay over raw is the schema (CHECKs, triggers, indexes,
  foreign key), the locks and the way the statements are sent; the same statements one round trip
  each, prepared (each timed: where the time goes); raw psycopg and the replay with
  ``synchronous_commit=off`` (on − off is the wait for the WAL flush); ``SELECT 1`` (one round
  trip); the journal appending bench/mix.py's 13-event turn, an event an op (most of them change
  the derived state: the row trigger's work); and the journal on SQLite (``full``) for scale.
  After the rounds: the server's own time for the INSERT into either table (``EXPLAIN ANALYZE``,
  trigger by trigger), and ``pg_stat_wal``
  (``track_wal_io_timing`` on for that phase only) over chunks of commits of raw psycopg and of
  the replay taking turns: fdatasyncs, WAL bytes and records per commit.
- ``writers``: 8 worker processes (``multiprocessing`` spawn), each with its own
  ``journal.open(dsn)`` and its own raw psycopg connection, started once. A job runs for a fixed
  time from a common start: 1 process appending to its session; 8 processes each appending to
  its own session; 8 processes appending to ONE session; and raw psycopg insert+commit, 1 and 8
  processes. The rate is the appends of all processes over the time from the start to the last
  append's return; ratios are 8-vs-1, paired by round. Whatever the store's locking does when
  the script runs is what gets measured.
- ``restart``: restart.py's shape (10,000 sessions, each with 25 events of finished turns and
  then an interrupted tool turn), built through the public API (``restart.build``'s items:
  ``create_session`` and two ``append_many`` per session, ``durability="normal"``; on PostgreSQL
  by ``--build-procs`` processes, each a slice of the sessions) on an SQLite file and on a
  PostgreSQL database (then ``VACUUM ANALYZE``, what autovacuum would have done). Each round
  restores a fresh copy (the file copied; ``CREATE DATABASE ... TEMPLATE``, then ``CHECKPOINT``)
  and times ``journal.open()``, ``scan()``, ``recover()`` and ``scan()`` again under ``full``
  (``restart.restart``, which checks every session was repaired). Medians, and the PG/SQLite
  ratio paired by round.
- ``read``: ``j.events(session)`` of a 100-event session on both backends (and raw psycopg /
  raw apsw selecting the same rows and ``json.loads``-ing them, for information).

Rounds interleave the contenders of a part in an order rotated every round; per-op times come
from ``perf_counter_ns`` around each call; the table shows the median and 90th percentile over
all rounds, and a ratio is the median over rounds of the per-round ratio (of medians, for
per-op times; of rates, for jobs). Progress goes to stderr; stdout has the table or the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw
import contenders as c
import mix
import psycopg
import restart
from append import close_all, git, host, log, paired_ratio, percentile, scratch_dir, table, warm_up

import journal
from journal.testing.pgserver import PgServer

PARTS = ("append", "writers", "restart", "read")


@dataclass(frozen=True)
class Settings:
    append_rounds: int
    append_ops: int  # appends per contender per round
    wal_chunks: int  # chunks of 50 commits per contender in the pg_stat_wal phase
    writer_rounds: int
    writer_seconds: float  # length of one job
    writers: int
    restart_sessions: int
    restart_history: int
    restart_rounds: int
    read_rounds: int
    read_ops: int


FULL = Settings(
    append_rounds=150,
    append_ops=40,
    wal_chunks=20,
    writer_rounds=7,
    writer_seconds=2.0,
    writers=8,
    restart_sessions=10_000,
    restart_history=25,
    restart_rounds=3,
    read_rounds=50,
    read_ops=20,
)
QUICK = Settings(
    append_rounds=30,
    append_ops=20,
    wal_chunks=6,
    writer_rounds=3,
    writer_seconds=0.75,
    writers=8,
    restart_sessions=1_000,
    restart_history=25,
    restart_rounds=2,
    read_rounds=15,
    read_ops=10,
)


@dataclass
class Row:
    """One line of the table (and one object of the JSON ``rows``)."""

    group: str
    name: str
    durability: str
    what: str
    median_us: float | None
    p90_us: float | None
    ops_per_s: float | None
    ratio: float | None = None
    vs: str | None = None
    ratio_kind: str | None = None  # "time" (lower is better) or "rate" (higher is better)
    target: str | None = None
    verdict: str = "info"
    samples: int = 0


@dataclass
class Group:
    name: str
    contenders: list[Any] = field(default_factory=list)
    samples: dict[str, list[list[int]]] = field(default_factory=dict)  # name -> per round, ns per op


# -- the server and its databases --------------------------------------------------------------


def server_settings(dsn: str) -> dict[str, str]:
    names = ("server_version", "fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "shared_buffers")
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}


def pg_durability(conn: psycopg.Connection) -> str:
    values = [
        conn.execute(f"SELECT current_setting('{n}')").fetchone()[0]
        for n in ("synchronous_commit", "fsync", "wal_sync_method", "server_version")
    ]
    if not conn.autocommit:
        conn.commit()
    return f"synchronous_commit={values[0]}, fsync={values[1]}, {values[2]} (PostgreSQL {values[3].split()[0]})"


def journal_pg_durability(j: journal.Journal) -> str:
    with j._store.read() as db:
        sync, fsync, method = (
            db.value(f"SELECT current_setting('{n}')") for n in ("synchronous_commit", "fsync", "wal_sync_method")
        )
    return f"synchronous_commit={sync}, fsync={fsync}, {method} (journal durability={j.durability.value})"


BARE_EVENTS_PG = """
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    type       TEXT NOT NULL,
    data       TEXT NOT NULL,
    time_ms    BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
)
"""
INSERT_PG = "INSERT INTO events (session_id, seq, type, data, time_ms) VALUES (%s, %s, %s, %s, %s)"


def create_bare_database(server: PgServer) -> str:
    dsn = server.create_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(BARE_EVENTS_PG)
    return dsn


# -- the append contenders -----------------------------------------------------------------------

RAW = "raw psycopg, BEGIN; INSERT; COMMIT"
RAW_OFF = "raw psycopg, synchronous_commit=off"
RAW_AUTO = "raw psycopg, autocommit INSERT"
J_PG = "journal on PostgreSQL"
REPLAY = "raw psycopg, the journal's statements"
REPLAY_OFF = "the same, synchronous_commit=off"
REPLAY_SPLIT = "the same, one round trip per statement"
PING = "raw psycopg, SELECT 1"
LG_WRITES = "langgraph PostgresSaver put_writes"
LG_STEP = "langgraph PostgresSaver step (put_writes + put)"
J_SQLITE = "journal on SQLite"
J_PG_MIX = "journal on PostgreSQL, the turn mix"


class PgAppend:
    """A contender whose op is ``append()`` on its own psycopg connection, ``conn``."""

    conn: psycopg.Connection

    def append(self) -> None:
        raise NotImplementedError

    def run(self, k: int) -> list[int]:
        return c.timed_calls(self.append, k)

    def close(self) -> None:
        self.conn.close()


class RawPg(PgAppend):
    """One ``INSERT`` and ``commit()`` per op, psycopg's default mode (or autocommit: the
    INSERT alone)."""

    def __init__(self, name: str, dsn: str, *, autocommit: bool = False, sync: bool = True) -> None:
        self.name = name
        self.conn = psycopg.connect(dsn, autocommit=autocommit)
        self.conn.execute(f"SET synchronous_commit = {'on' if sync else 'off'}")
        if not autocommit:
            self.conn.commit()
        self.durability = pg_durability(self.conn)
        self.what = (
            "INSERT of one row, autocommit (one round trip)"
            if autocommit
            else "INSERT of one row (data json.dumps'd from the dict), commit(): BEGIN, INSERT, COMMIT"
        )
        self.session_id, self.seq = c.new_id(), 0
        self.autocommit = autocommit
        self.labels = ["INSERT (autocommit)"] if autocommit else ["BEGIN, then INSERT (two round trips)", "COMMIT"]
        self.stages: list[list[int]] = [[] for _ in self.labels]

    def append(self) -> None:
        clock = time.perf_counter_ns
        start = clock()
        self.conn.execute(INSERT_PG, (self.session_id, self.seq, c.EVENT_TYPE, c.encode(c.MESSAGE), c.now_ms()))
        middle = clock()
        self.stages[0].append(middle - start)
        if not self.autocommit:
            self.conn.commit()
            self.stages[1].append(clock() - middle)
        self.seq += 1


class LangGraphPg(PgAppend):
    """LangGraph's own PostgreSQL saver (langgraph-checkpoint-postgres, ``PostgresSaver`` on an
    autocommit connection, as its docs make it) on the same server: ``put_writes`` of the same
    message, one pending write per op under a new task id (``step``: then ``put`` of a checkpoint
    holding it, the two writes of a LangGraph step)."""

    def __init__(self, name: str, dsn: str, *, step: bool = False) -> None:
        from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
        from langgraph.checkpoint.postgres import PostgresSaver

        self.name = name
        self.conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
        self.conn.execute("SET synchronous_commit = on")
        self.durability = pg_durability(self.conn)
        self.saver = PostgresSaver(self.conn)
        self.saver.setup()
        self.step = step
        self.what = (
            "PostgresSaver.put_writes([('messages', message)]) then put() of a checkpoint holding it"
            if step
            else "PostgresSaver.put_writes([('messages', message)]), a new task id each time"
        )
        self._create_checkpoint = create_checkpoint
        self.checkpoint = empty_checkpoint()
        self.config = self.saver.put(
            {"configurable": {"thread_id": c.new_id(), "checkpoint_ns": ""}}, self.checkpoint, {"step": -1}, {}
        )
        self.n = 0

    def append(self) -> None:
        self.n += 1
        self.saver.put_writes(self.config, [("messages", c.MESSAGE)], task_id=f"task-{self.n}")
        if not self.step:
            return
        version = self.saver.get_next_version(self.checkpoint["channel_versions"].get("messages"), None)
        base = dict(self.checkpoint, channel_values={"messages": [c.MESSAGE]})
        base["channel_versions"] = {"messages": version}
        self.checkpoint = self._create_checkpoint(base, None, self.n)
        self.config = self.saver.put(
            self.config, self.checkpoint, {"source": "loop", "step": self.n}, {"messages": version}
        )


class JournalPg:
    what = "Journal.append(session_id, 'user_message', data), durability='full'"

    def __init__(self, name: str, dsn: str) -> None:
        self.name = name
        self.journal = journal.open(dsn, durability="full")
        self.durability = journal_pg_durability(self.journal)
        self.session_id = self.journal.create_session(c.new_id()).id

    def append(self) -> None:
        self.journal.append(self.session_id, c.EVENT_TYPE, c.MESSAGE)

    def run(self, k: int) -> list[int]:
        return c.timed_calls(self.append, k)

    def close(self) -> None:
        self.journal.close()


class JournalPgMix(JournalPg):
    """The journal's appends of bench/mix.py's 13-event turn, one event per op: most of them change
    the derived state (the turn journal, the tool calls), which the row trigger writes."""

    what = "Journal.append of each event of bench/mix.py's 13-event turn in turn, durability='full'"

    def __init__(self, name: str, dsn: str) -> None:
        super().__init__(name, dsn)
        self.turn = 0
        self.pending: list[tuple[str, dict[str, Any]]] = []

    def append(self) -> None:
        if not self.pending:
            self.turn += 1
            self.pending = mix.turn_events(self.turn)[::-1]
        self.journal.append(self.session_id, *self.pending.pop())


@dataclass
class Sent:
    """One statement psycopg was asked to send; ``pipeline``: the pipeline it went in, if any."""

    sql: str
    params: Any
    kwargs: dict[str, Any]
    pipeline: int | None
    client: bool = False  # bound on the client (a ClientCursor: several statements, one round trip)


@contextlib.contextmanager
def caught_statements() -> Iterator[list[Sent]]:
    """Every statement psycopg is asked to send from this process meanwhile, and the pipeline
    (one round trip for several statements) each went in."""
    sent: list[Sent] = []
    state: dict[str, int | None] = {"pipeline": None, "count": 0}
    execute, cursor_execute = psycopg.Connection.execute, psycopg.Cursor.execute
    executemany, pipeline = psycopg.Cursor.executemany, psycopg.Connection.pipeline
    inner = {"busy": False}

    def conn_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append(Sent(str(query), params, kw, state["pipeline"]))
        inner["busy"] = True
        try:
            return execute(self, query, params, **kw)
        finally:
            inner["busy"] = False

    def cur_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if not inner["busy"]:  # Connection.execute calls Cursor.execute
            sent.append(Sent(str(query), params, kw, state["pipeline"], isinstance(self, psycopg.ClientCursor)))
        return cursor_execute(self, query, params, **kw)

    def cur_executemany(self: Any, query: Any, rows: Any, **kw: Any) -> Any:
        rows = list(rows)
        sent.append(Sent(f"EXECUTEMANY[{len(rows)}] {query}", rows, kw, state["pipeline"]))
        return executemany(self, query, rows, **kw)

    @contextlib.contextmanager
    def conn_pipeline(self: Any) -> Iterator[Any]:
        outer = state["pipeline"]
        if outer is None:
            state["count"] = (state["count"] or 0) + 1
            state["pipeline"] = state["count"]
        try:
            with pipeline(self) as p:
                yield p
        finally:
            state["pipeline"] = outer

    originals = (execute, cursor_execute, executemany, pipeline)
    psycopg.Connection.execute = conn_execute  # type: ignore[method-assign]
    psycopg.Cursor.execute = cur_execute  # type: ignore[method-assign]
    psycopg.Cursor.executemany = cur_executemany  # type: ignore[method-assign]
    psycopg.Connection.pipeline = conn_pipeline  # type: ignore[method-assign,assignment]
    try:
        yield sent
    finally:
        (
            psycopg.Connection.execute,
            psycopg.Cursor.execute,
            psycopg.Cursor.executemany,
            psycopg.Connection.pipeline,
        ) = originals  # type: ignore[method-assign,assignment]


def journal_statements(j: JournalPg) -> list[Sent]:
    """The statements one steady append sends (after a few to warm the store's seq cache)."""
    for _ in range(10):
        j.append()
    with caught_statements() as sent:
        j.append()
    return list(sent)


def describe(statements: list[Sent]) -> str:
    """The statements as round trips: ``a | b | [pipeline: c; d]``."""
    out: list[str] = []
    for sql, group in _steps(statements):
        text = "; ".join(" ".join(x.sql.split())[:80] for x in sql)
        out.append(f"[one pipeline: {text}]" if group is not None else text)
    return " | ".join(out)


def _steps(statements: list[Sent]) -> list[tuple[list[Sent], int | None]]:
    """The statements grouped by round trip: a pipeline's together, the others one each."""
    steps: list[tuple[list[Sent], int | None]] = []
    for x in statements:
        if x.pipeline is not None and steps and steps[-1][1] == x.pipeline:
            steps[-1][0].append(x)
        else:
            steps.append(([x], x.pipeline))
    return steps


_INSERT_EVENTS = re.compile(r"INSERT INTO events \(([^)]*)\)")


def stage_label(sql: str) -> str:
    """A short name of a statement for the stage table."""
    text = " ".join(sql.split())
    if text.startswith("BEGIN") and "pg_advisory" in text:
        locks = text.count("pg_advisory_xact_lock")
        label = f"BEGIN + {locks} advisory lock{'s' if locks != 1 else ''}"
        if _INSERT_EVENTS.search(text):
            label += " + INSERT INTO events" + (" + COMMIT" if text.endswith("COMMIT") else "")
        return label
    if "pg_advisory_xact_lock" in text:
        return "SELECT pg_advisory_xact_lock" + ("_shared" if "_shared" in text else "")
    if _INSERT_EVENTS.match(text):
        return "INSERT INTO events"
    return text[:40]


class Replay(PgAppend):
    """Raw psycopg sending the journal's own statements for one append (the same texts, the
    same pipelines, the same ``prepare`` flags), into its own session of the journal's
    database; the INSERT's row is made afresh (json.dumps of the same dict)."""

    def __init__(self, name: str, dsn: str, statements: list[Sent], *, sync: bool = True, split: bool = False) -> None:
        self.name = name
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute(f"SET synchronous_commit = {'on' if sync else 'off'}")
        self.durability = pg_durability(self.conn)
        with journal.open(dsn) as j:
            self.session_id = j.create_session(c.new_id()).id
        self.seq = 0
        # each step: one round trip (a statement, or a pipeline of several)
        self.plan: list[tuple[bool, list[tuple[str, list[str] | None, Any, dict[str, Any]]]]] = []
        inserts = 0
        if split:  # each statement its own round trip, prepared as psycopg does by default
            # (a client-bound script's statements too: its values go to its INSERT)
            statements = [
                Sent(part, x.params if "%s" in part else None, {}, None)
                for x in statements
                for part in x.sql.split("; ")
            ]
        for group, pipeline in _steps(statements):
            step = []
            for x in group:
                match = _INSERT_EVENTS.search(" ".join(x.sql.split()))
                kwargs = {**x.kwargs, "_client": x.client}
                if match and x.params is not None:
                    inserts += 1
                    columns = [col.strip() for col in match.group(1).split(",")]
                    # Bindings before the row's (a lone append's lock keys) are sent as caught.
                    lead = list(x.params)[: x.sql.count("%s") - len(columns)]
                    step.append((x.sql, columns, lead, kwargs))
                else:
                    step.append((x.sql, None, x.params, kwargs))
            self.plan.append((pipeline is not None, step))
        if inserts != 1:
            raise RuntimeError(f"one steady append sent no single INSERT INTO events: {statements!r}")
        self.labels = [
            ("one pipeline: " if piped else "") + " + ".join(stage_label(sql) for sql, *_ in step)
            for piped, step in self.plan
        ]
        self.what = describe(statements) + (
            " — each its own round trip, from raw psycopg"
            if split
            else " — as the journal sends them, from raw psycopg"
        )
        self.stages: list[list[int]] = [[] for _ in self.plan]

    def _row(self, columns: list[str]) -> list[Any]:
        row = {
            "session_id": self.session_id,
            "seq": self.seq,
            "type": c.EVENT_TYPE,
            "data": c.encode(c.MESSAGE),
            "time_ms": c.now_ms(),
            "key": None,
        }
        return [row[col] for col in columns]

    def append(self) -> None:
        clock = time.perf_counter_ns
        conn = self.conn
        for i, (piped, step) in enumerate(self.plan):
            start = clock()
            if piped:
                with conn.pipeline():
                    for sql, columns, params, kwargs in step:
                        kwargs = {k: v for k, v in kwargs.items() if k != "_client"}
                        conn.execute(sql, [*params, *self._row(columns)] if columns is not None else params, **kwargs)
            else:
                for sql, columns, params, kwargs in step:
                    kwargs = dict(kwargs)
                    client = kwargs.pop("_client", False)
                    values = [*params, *self._row(columns)] if columns is not None else params
                    if client:  # a script of several statements, bound on the client
                        psycopg.ClientCursor(conn).execute(sql, values)
                    else:
                        conn.execute(sql, values, **kwargs)
            self.stages[i].append(clock() - start)
        self.seq += 1


class Ping:
    what = "SELECT 1 on an autocommit connection: one round trip to the server"
    durability = "-"

    def __init__(self, name: str, dsn: str) -> None:
        self.name = name
        self.conn = psycopg.connect(dsn, autocommit=True)

    def run(self, k: int) -> list[int]:
        conn = self.conn
        return c.timed_calls(lambda: conn.execute("SELECT 1").fetchone(), k)

    def close(self) -> None:
        self.conn.close()


def measure(group: Group, *, rounds: int, ops: int, warm: int) -> None:
    """Each contender ``ops`` times per round, in an order rotated every round."""
    for contender in group.contenders:
        contender.run(warm)
        if hasattr(contender, "stages"):
            contender.stages = [[] for _ in contender.stages]
        group.samples[contender.name] = []
    n = len(group.contenders)
    for r in range(rounds):
        for contender in group.contenders[r % n :] + group.contenders[: r % n]:
            group.samples[contender.name].append(contender.run(ops))
        if (r + 1) % max(1, rounds // 5) == 0 or r + 1 == rounds:
            log(f"  {group.name}: round {r + 1}/{rounds}")


def paired_difference_us(samples: dict[str, list[list[int]]], name: str, base: str) -> float:
    """Median over rounds of (median of ``name`` − median of ``base``), µs."""
    return statistics.median(
        (statistics.median(a) - statistics.median(b)) / 1000 for a, b in zip(samples[name], samples[base])
    )


def stage_medians(contender: RawPg | Replay) -> list[dict[str, Any]]:
    """Each stage of the contender's op (a round trip) and its median over all rounds, µs."""
    return [
        {"stage": label, "us": statistics.median(ns) / 1000} for label, ns in zip(contender.labels, contender.stages)
    ]


def time_row(group: Group, contender: Any, *, vs: str | None = None, target: float | None = None) -> Row:
    us = [ns / 1000 for rnd in group.samples[contender.name] for ns in rnd]
    median = statistics.median(us)
    row = Row(
        group.name,
        contender.name,
        contender.durability,
        contender.what,
        median,
        percentile(us, 0.9),
        1e6 / median,
        samples=len(us),
    )
    if vs is not None and vs in group.samples:
        row.ratio, row.vs, row.ratio_kind = paired_ratio(group, contender.name, vs, kind="time"), vs, "time"
        if target is not None:
            row.target = f"≤ {target:g}× {vs.split(',')[0]} time"
            row.verdict = "pass" if row.ratio <= target else "fail"
    return row


WAL_COLUMNS = ("wal_records", "wal_bytes", "wal_write", "wal_sync", "wal_write_time", "wal_sync_time")


def wal_phase(admin_dsn: str, contenders: list[Any], *, chunks: int, ops: int) -> dict[str, dict[str, float]]:
    """The server's own account of each contender's WAL flushes (``pg_stat_wal``, with
    ``track_wal_io_timing`` on for this phase only): chunks of ``ops`` commits, the contenders
    taking turns; per chunk, the counters' change over its commits; medians over the chunks.

    A contender's backend flushes its statistics when ``pg_stat_force_next_flush()`` returns."""
    per: dict[str, list[dict[str, float]]] = {x.name: [] for x in contenders}
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET track_wal_io_timing = on")
        admin.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)

        def flushed(x: Any) -> tuple[float, ...]:
            x.conn.execute("SELECT pg_stat_force_next_flush()")
            if not x.conn.autocommit:
                x.conn.commit()  # a backend flushes its statistics only when idle outside a transaction
            return tuple(
                float(v) for v in admin.execute(f"SELECT {', '.join(WAL_COLUMNS)} FROM pg_stat_wal").fetchone()
            )

        try:
            for x in contenders:
                x.conn.execute("SET track_wal_io_timing = on")  # the setting as of its own session, too
                x.run(10)
            for r in range(chunks):
                for x in contenders[r % len(contenders) :] + contenders[: r % len(contenders)]:
                    before = flushed(x)
                    times = x.run(ops)
                    after = flushed(x)
                    d = dict(zip(WAL_COLUMNS, (b - a for a, b in zip(before, after))))
                    per[x.name].append(
                        {
                            "append_us": statistics.median(times) / 1000,
                            "syncs_per_commit": d["wal_sync"] / ops,
                            "sync_us_per_sync": 1000 * d["wal_sync_time"] / max(d["wal_sync"], 1),
                            "sync_us_per_commit": 1000 * d["wal_sync_time"] / ops,
                            "write_us_per_commit": 1000 * d["wal_write_time"] / ops,
                            "bytes_per_commit": d["wal_bytes"] / ops,
                            "records_per_commit": d["wal_records"] / ops,
                        }
                    )
        finally:
            admin.execute("ALTER SYSTEM RESET track_wal_io_timing")
            admin.execute("SELECT pg_reload_conf()")
    out = {}
    for name, chunks_ in per.items():
        out[name] = {k: statistics.median(ch[k] for ch in chunks_) for k in chunks_[0]}
        out[name]["commits"] = ops * len(chunks_)
    return out


def insert_server_time(dsn: str, session_id: str, seq: int, *, runs: int = 200) -> dict[str, float]:
    """The server's own time for one INSERT of the row (EXPLAIN ANALYZE in a transaction rolled
    back): planning, execution, and each trigger's share; medians, µs."""
    out: dict[str, list[float]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(runs):
            conn.execute("BEGIN")
            plan = conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + INSERT_PG,
                (session_id, seq, c.EVENT_TYPE, c.encode(c.MESSAGE), c.now_ms()),
            ).fetchone()[0][0]
            conn.execute("ROLLBACK")
            out.setdefault("planning", []).append(plan["Planning Time"])
            out.setdefault("execution", []).append(plan["Execution Time"])
            for trigger in plan.get("Triggers", []):
                name = trigger["Trigger Name"]
                name = "foreign key (sessions)" if name.startswith("RI_ConstraintTrigger") else f"trigger {name}"
                out.setdefault(name, []).append(trigger["Time"])
    return {k: 1000 * statistics.median(v) for k, v in out.items()}


# One-row INSERTs run by the server itself, each its own statement (a PL/pgSQL loop: no client,
# no round trip, no commit): what the schema costs per statement, the cost PostgreSQL pays again
# for every statement (a table's CHECKs are parsed and planned per statement) included.
_SERVER_LOOP = """CREATE OR REPLACE FUNCTION pg_temp.journal_bench_loop(t text, sid text, kinds text[], n int)
RETURNS float8 LANGUAGE plpgsql AS $f$
DECLARE start timestamptz := clock_timestamp(); q bigint := 0;
BEGIN
    FOR i IN 1..n LOOP
        FOR k IN 1..array_length(kinds, 1) LOOP
            EXECUTE format('INSERT INTO %I (session_id, seq, type, data, time_ms) VALUES ($1, $2, $3, $4, 1)', t)
                USING sid, q, kinds[k], CASE kinds[k]
                    WHEN 'turn_start' THEN format('{"turn":%s}', i)
                    WHEN 'step_start' THEN format('{"turn":%s,"step":1}', i)
                    WHEN 'step_end' THEN format('{"turn":%s,"step":1,"outcome":"ok"}', i)
                    WHEN 'turn_end' THEN format('{"turn":%s,"steps":1,"reason":"complete"}', i)
                    ELSE '{"content":"hello there, how is the weather in Lyon today?"}' END;
            q := q + 1;
        END LOOP;
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - start) * 1e6 / (n * array_length(kinds, 1));
END $f$"""


def server_statement_time(j_dsn: str, raw_dsn: str, *, rounds: int = 5, n: int = 2000) -> dict[str, float]:
    """µs per one-row INSERT statement run inside the server (``_SERVER_LOOP``; each round in a
    transaction rolled back): user messages into the bare table and into the journal's events,
    and a turn's four deriving events (start, step start and end, end) into the journal's."""
    cases = [
        ("bare table, user_message", raw_dsn, "events", ["user_message"]),
        ("journal, user_message", j_dsn, "events", ["user_message"]),
        ("journal, a turn's 4 deriving events", j_dsn, "events", ["turn_start", "step_start", "step_end", "turn_end"]),
    ]
    out: dict[str, list[float]] = {name: [] for name, *_ in cases}
    conns = {dsn: psycopg.connect(dsn, autocommit=True) for dsn in (j_dsn, raw_dsn)}
    try:
        for conn in conns.values():
            conn.execute(_SERVER_LOOP)
        for r in range(rounds):
            for name, dsn, table, kinds in cases:
                conn, sid = conns[dsn], f"loop-{r}-{len(out[name])}"
                conn.execute("BEGIN")
                if dsn == j_dsn:
                    conn.execute("INSERT INTO sessions (id, created_ms) VALUES (%s, 1)", (sid,))
                per = conn.execute(
                    "SELECT pg_temp.journal_bench_loop(%s, %s, %s, %s)", (table, sid, kinds, n)
                ).fetchone()
                conn.execute("ROLLBACK")
                out[name].append(per[0])  # type: ignore[index]
    finally:
        for conn in conns.values():
            conn.close()
    return {k: statistics.median(v) for k, v in out.items()}


def part_append(server: PgServer, tmp: str, s: Settings) -> dict[str, Any]:
    group = Group("append")
    raw_dsn, j_dsn = create_bare_database(server), server.create_database()
    journal.open(j_dsn).close()
    journal_pg = JournalPg(J_PG, j_dsn)
    journal_mix = JournalPgMix(J_PG_MIX, j_dsn)
    statements = journal_statements(journal_pg)
    log("  one steady append sends: " + describe(statements))
    sqlite = c.JournalAppend(J_SQLITE, c.new_path(tmp, "append_sqlite"), durability="full")
    peers: list[Any] = []
    try:
        lg_dsn = server.create_database()
        peers = [LangGraphPg(LG_WRITES, lg_dsn), LangGraphPg(LG_STEP, lg_dsn, step=True)]
    except ImportError as exc:  # the peer is optional: pip install langgraph-checkpoint-postgres
        log(f"  (no LangGraph PostgresSaver: {exc})")
    group.contenders = [
        RawPg(RAW, raw_dsn),
        journal_pg,
        journal_mix,
        RawPg(RAW_OFF, raw_dsn, sync=False),
        Replay(REPLAY, j_dsn, statements),
        Replay(REPLAY_OFF, j_dsn, statements, sync=False),
        Replay(REPLAY_SPLIT, j_dsn, statements, split=True),
        RawPg(RAW_AUTO, raw_dsn, autocommit=True),
        Ping(PING, raw_dsn),
        sqlite,
        *peers,
    ]
    try:
        # SQLite's WAL must stop growing first; PostgreSQL's is the server's.
        warm_up(sqlite, 100, max_chunks=60)
        measure(group, rounds=s.append_rounds, ops=s.append_ops, warm=100)
        by = {x.name: x for x in group.contenders}
        rows = [time_row(group, by[RAW])]
        rows.append(time_row(group, by[J_PG], vs=RAW, target=1.2))
        for name in (J_PG_MIX, RAW_OFF, REPLAY, REPLAY_OFF, REPLAY_SPLIT, RAW_AUTO, PING, J_SQLITE):
            rows.append(time_row(group, by[name], vs=RAW))
        for peer in peers:  # the journal's time over the peer's: target <= 1 (issue 27)
            rows.append(time_row(group, peer, vs=RAW))
            rows.append(time_row(group, by[J_PG], vs=peer.name, target=1.0))
        replay, off = by[REPLAY], by[REPLAY_OFF]
        stages = [
            {"stage": label, "on_us": statistics.median(on) / 1000, "off_us": statistics.median(o) / 1000}
            for label, on, o in zip(replay.labels, replay.stages, off.stages)
        ]
        raw_stages, split_stages = stage_medians(by[RAW]), stage_medians(by[REPLAY_SPLIT])
        flush_wait = {
            RAW: paired_difference_us(group.samples, RAW, RAW_OFF),
            REPLAY: paired_difference_us(group.samples, REPLAY, REPLAY_OFF),
        }
        python_us = statistics.median(
            statistics.median(a) / 1000 - statistics.median(b) / 1000
            for a, b in zip(group.samples[J_PG], group.samples[REPLAY])
        )
        log("  pg_stat_wal phase, EXPLAIN ANALYZE of the INSERTs")
        wal = wal_phase(server.dsn(), [by[RAW], by[REPLAY]], chunks=s.wal_chunks, ops=50)
        insert_server = {
            "journal schema": insert_server_time(j_dsn, by[REPLAY].session_id, by[REPLAY].seq),
            "bare table": insert_server_time(raw_dsn, by[RAW].session_id, by[RAW].seq),
        }
        log("  one-row INSERTs run inside the server")
        statement_server = server_statement_time(j_dsn, raw_dsn)
    finally:
        close_all(group)
    return {
        "rows": rows,
        "statements": describe(statements),
        "stages": stages,
        "raw_stages": raw_stages,
        "split_stages": split_stages,
        "insert_server": insert_server,
        "statement_server_us": statement_server,
        "journal_minus_replay_us": python_us,
        "flush_wait_us": flush_wait,
        "wal": wal,
    }


# -- writer processes ----------------------------------------------------------------------------


def writer_process(index: int, j_dsn: str, raw_dsn: str, pipe: Any) -> None:
    """One worker: its own Journal and raw connection; runs the jobs the parent sends."""
    try:
        j = journal.open(j_dsn, durability="full")
        raw = psycopg.connect(raw_dsn)
        raw.execute("SET synchronous_commit = on")
        raw.commit()
        raw_session, raw_seq = f"raw-{index}-{c.new_id()}", 0
        for _ in range(20):  # warm: prepared statements, the store's seq cache
            j.append(f"own-{index}", c.EVENT_TYPE, c.MESSAGE)
    except BaseException as exc:
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    pipe.send(("ready", index))
    while True:
        job = pipe.recv()
        if job is None:
            break
        kind, session, start_at, seconds = job
        count, end = 0, start_at
        try:
            while time.monotonic() < start_at:
                time.sleep(0.0005)
            deadline = start_at + seconds
            if kind == "journal":
                while time.monotonic() < deadline:
                    j.append(session, c.EVENT_TYPE, c.MESSAGE)
                    count += 1
            else:
                while time.monotonic() < deadline:
                    raw.execute(INSERT_PG, (raw_session, raw_seq, c.EVENT_TYPE, c.encode(c.MESSAGE), c.now_ms()))
                    raw.commit()
                    raw_seq += 1
                    count += 1
            end = time.monotonic()
        except BaseException as exc:
            pipe.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        pipe.send(("done", (count, end)))
    j.close()
    raw.close()


W_ONE = "journal, 1 process"
W_OWN = "journal, {n} processes, a session each"
W_SHARED = "journal, {n} processes, ONE session"
W_RAW_ONE = "raw psycopg, 1 process"
W_RAW_MANY = "raw psycopg, {n} processes"


def part_writers(server: PgServer, s: Settings) -> dict[str, Any]:
    n = s.writers
    j_dsn, raw_dsn = server.create_database(), create_bare_database(server)
    with journal.open(j_dsn) as j:
        for i in range(n):
            j.create_session(f"own-{i}")
        j.create_session("shared")
        durability = journal_pg_durability(j)
    ctx = mp.get_context("spawn")
    workers = []
    for i in range(n):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=writer_process, args=(i, j_dsn, raw_dsn, child), daemon=True)
        proc.start()
        workers.append((proc, parent))
    # (name, kind, workers, session of worker i)
    jobs: list[tuple[str, str, int, Callable[[int], str]]] = [
        (W_ONE, "journal", 1, lambda i: f"own-{i}"),
        (W_OWN.format(n=n), "journal", n, lambda i: f"own-{i}"),
        (W_SHARED.format(n=n), "journal", n, lambda i: "shared"),
        (W_RAW_ONE, "raw", 1, lambda i: ""),
        (W_RAW_MANY.format(n=n), "raw", n, lambda i: ""),
    ]
    rates: dict[str, list[float]] = {name: [] for name, *_ in jobs}
    per_proc: dict[str, list[float]] = {name: [] for name, *_ in jobs}

    def run_job(kind: str, count: int, session: Callable[[int], str], seconds: float) -> tuple[int, float]:
        start_at = time.monotonic() + 0.2
        for i in range(count):
            workers[i][1].send((kind, session(i), start_at, seconds))
        total, last = 0, start_at
        for i in range(count):
            status, value = workers[i][1].recv()
            if status != "done":
                raise RuntimeError(f"writer {i}: {value}")
            total += value[0]
            last = max(last, value[1])
        return total, last - start_at

    try:
        for _proc, pipe in workers:
            if not pipe.poll(120):
                raise RuntimeError("a writer process did not start in 120 s")
            status, value = pipe.recv()
            if status != "ready":
                raise RuntimeError(f"a writer process failed to start: {value}")
        for _, kind, count, session in jobs:  # warm-up: one short job each
            run_job(kind, count, session, 0.3)
        for r in range(s.writer_rounds):
            order = jobs[r % len(jobs) :] + jobs[: r % len(jobs)]
            for name, kind, count, session in order:
                total, wall = run_job(kind, count, session, s.writer_seconds)
                rates[name].append(total / wall)
                per_proc[name].append(total / count)
            log(f"  writers: round {r + 1}/{s.writer_rounds}")
    finally:
        for _proc, pipe in workers:
            with contextlib.suppress(Exception):
                pipe.send(None)
        for proc, _ in workers:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
    raw_durability = f"synchronous_commit=on (raw psycopg), {server_settings(raw_dsn)['wal_sync_method']}"
    rows = []
    for name, kind, count, _ in jobs:
        rate = statistics.median(rates[name])
        what = (
            f"{count} process(es), each its own journal.open(dsn), appending for {s.writer_seconds:g} s"
            if kind == "journal"
            else f"{count} process(es), each INSERT + commit() into its own session of a bare table"
        )
        row = Row(
            "writers",
            name,
            durability if kind == "journal" else raw_durability,
            what,
            1e6 / rate,
            None,
            rate,
            samples=len(rates[name]),
        )
        base = W_ONE if kind == "journal" else W_RAW_ONE
        if name != base:
            row.ratio = statistics.median(a / b for a, b in zip(rates[name], rates[base]))
            row.vs, row.ratio_kind = base, "rate"
        rows.append(row)
    return {"rows": rows, "rates": rates, "appends_per_process": per_proc}


# -- restart ---------------------------------------------------------------------------------------


def build_slice(target: str, first: int, count: int, history: int) -> None:
    """restart.build's sessions ``first .. first + count - 1``: the same items, the same ids."""
    turns = max(history // restart.TURN, 0)
    with journal.open(target, durability="normal") as j:
        for s in range(first, first + count):
            sid = f"user-{s:06d}"
            j.create_session(sid)
            for start in range(0, turns, 500):
                j.append_many(sid, restart.finished_turns(min(500, turns - start), start + 1))
            j.append_many(sid, restart.interrupted_turn(turns + 1))


def build_pg(dsn: str, sessions: int, history: int, procs: int) -> None:
    journal.open(dsn).close()  # the schema, once
    if procs <= 1:
        build_slice(dsn, 0, sessions, history)
        return
    ctx = mp.get_context("spawn")
    each = -(-sessions // procs)
    slices = [(i * each, min(each, sessions - i * each)) for i in range(procs) if i * each < sessions]
    children = [ctx.Process(target=build_slice, args=(dsn, first, count, history)) for first, count in slices]
    for child in children:
        child.start()
    for child in children:
        child.join()
        if child.exitcode != 0:
            raise RuntimeError(f"a build process failed (exit code {child.exitcode})")


def part_restart(server: PgServer, tmp: str, s: Settings, *, sessions: int, build_procs: int) -> dict[str, Any]:
    history = s.restart_history
    source = os.path.join(tmp, "restart_source.db")
    t = time.perf_counter()
    restart.build(Path(source), sessions, history)
    sqlite_build = time.perf_counter() - t
    log(f"  built {sessions} sessions on SQLite in {sqlite_build:.0f} s ({os.path.getsize(source) / 1e6:.0f} MB)")
    src_dsn = server.create_database("restart_source")
    t = time.perf_counter()
    build_pg(src_dsn, sessions, history, build_procs)
    pg_build = time.perf_counter() - t
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        with psycopg.connect(src_dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        log(
            f"  built {sessions} sessions on PostgreSQL in {pg_build:.0f} s "
            f"({build_procs} process(es); {size / 1e6:.0f} MB)"
        )
        times: dict[str, list[dict[str, float]]] = {"sqlite": [], "postgresql": []}
        for r in range(s.restart_rounds):
            for backend in ["sqlite", "postgresql"] if r % 2 == 0 else ["postgresql", "sqlite"]:
                if backend == "sqlite":
                    copy = Path(tmp, "restart_round.db")
                    for suffix in ("", "-wal", "-shm"):
                        Path(str(copy) + suffix).unlink(missing_ok=True)
                    shutil.copyfile(source, copy)
                    times["sqlite"].append(restart.restart(copy))
                else:
                    admin.execute('DROP DATABASE IF EXISTS "restart_round" WITH (FORCE)')
                    admin.execute('CREATE DATABASE "restart_round" TEMPLATE "restart_source"')
                    admin.execute("CHECKPOINT")
                    times["postgresql"].append(restart.restart(server.dsn("restart_round")))  # type: ignore[arg-type]
            log(
                f"  restart: round {r + 1}/{s.restart_rounds}: scan+recover SQLite "
                f"{times['sqlite'][-1]['scan'] + times['sqlite'][-1]['recover']:.2f} s, PostgreSQL "
                f"{times['postgresql'][-1]['scan'] + times['postgresql'][-1]['recover']:.2f} s"
            )
        admin.execute('DROP DATABASE IF EXISTS "restart_round" WITH (FORCE)')
    for rounds in times.values():
        for t_ in rounds:
            t_["scan_recover"] = t_["scan"] + t_["recover"]
    keys = list(times["sqlite"][0])
    medians = {b: {k: statistics.median(x[k] for x in rounds) for k in keys} for b, rounds in times.items()}
    ratios = {
        k: statistics.median(p[k] / q[k] for p, q in zip(times["postgresql"], times["sqlite"]) if q[k] > 0)
        for k in keys
        if all(q[k] > 0 for q in times["sqlite"])
    }
    return {
        "sessions": sessions,
        "history": history,
        "build_s": {"sqlite": sqlite_build, "postgresql": pg_build, "postgresql_procs": build_procs},
        "medians_s": medians,
        "pg_over_sqlite": ratios,
        "rounds": times,
    }


# -- a lone read -----------------------------------------------------------------------------------

READ_PG, READ_SQLITE = "journal on PostgreSQL, events()", "journal on SQLite, events()"
READ_RAW_PG, READ_RAW_SQLITE = "raw psycopg SELECT + json.loads", "raw apsw SELECT + json.loads"
SELECT_EVENTS = "SELECT seq, type, data, time_ms, key FROM events WHERE session_id = {} ORDER BY seq"


def hundred_events() -> list[tuple[str, dict]]:
    return restart.finished_turns(12, 1) + [("user_message", c.MESSAGE)] * 4


class ReadJournal:
    what = "Journal.events(session_id) of a 100-event session (12 tool turns and 4 user messages)"

    def __init__(self, name: str, target: str) -> None:
        self.name = name
        self.journal = journal.open(target)
        self.session_id = self.journal.create_session(c.new_id()).id
        self.journal.append_many(self.session_id, hundred_events())
        self.durability = "read (REPEATABLE READ snapshot)" if "://" in target else "read (SQLite read transaction)"

    def run(self, k: int) -> list[int]:
        j, sid = self.journal, self.session_id
        out = c.timed_calls(lambda: j.events(sid), k)
        assert len(j.events(sid)) == 100
        return out

    def close(self) -> None:
        self.journal.close()


class ReadRaw:
    def __init__(self, name: str, target: str, session_id: str) -> None:
        self.name, self.session_id = name, session_id
        self.pg = "://" in target
        if self.pg:
            self.conn: Any = psycopg.connect(target, autocommit=True)
            self.sql = SELECT_EVENTS.format("%s")
        else:
            self.conn = apsw.Connection(target, flags=apsw.SQLITE_OPEN_READONLY)
            self.sql = SELECT_EVENTS.format("?")
        self.what = "the same rows by one SELECT" + (" (autocommit)" if self.pg else "") + ", data json.loads'd"
        self.durability = "read"

    def read(self) -> list[tuple]:
        rows = self.conn.execute(self.sql, (self.session_id,)).fetchall()
        return [(seq, t, json.loads(data), ms, key) for seq, t, data, ms, key in rows]

    def run(self, k: int) -> list[int]:
        return c.timed_calls(self.read, k)

    def close(self) -> None:
        self.conn.close()


def part_read(server: PgServer, tmp: str, s: Settings) -> dict[str, Any]:
    group = Group("read")
    path = c.new_path(tmp, "read")
    dsn = server.create_database()
    pg, lite = ReadJournal(READ_PG, dsn), ReadJournal(READ_SQLITE, path)
    group.contenders = [
        pg,
        lite,
        ReadRaw(READ_RAW_PG, dsn, pg.session_id),
        ReadRaw(READ_RAW_SQLITE, path, lite.session_id),
    ]
    try:
        measure(group, rounds=s.read_rounds, ops=s.read_ops, warm=50)
        rows = [
            time_row(group, lite),
            time_row(group, pg, vs=READ_SQLITE),
            time_row(group, group.contenders[2], vs=READ_PG),
            time_row(group, group.contenders[3], vs=READ_SQLITE),
        ]
    finally:
        close_all(group)
    return {"rows": rows}


# -- output ----------------------------------------------------------------------------------------


def machine(server: dict[str, str]) -> dict[str, Any]:
    return {
        **host(),
        "psycopg": psycopg.__version__,
        "libpq": psycopg.pq.version(),
        "psycopg_impl": psycopg.pq.__impl__,
        "apsw": apsw.apsw_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "server": server,
        "journal_commit": git(["describe", "--always", "--dirty"]),
        "journal_uncommitted": _uncommitted(),
    }


def _uncommitted() -> str | None:
    """A short hash of the uncommitted changes under journal/ (which code ran), or None."""
    diff = git(["diff", "HEAD", "--", "journal"])
    return hashlib.sha1(diff.encode()).hexdigest()[:10] if diff else None


def report(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    srv = m["server"]
    out = [
        f"{doc['command']}  ({doc['elapsed_s']:.0f} s)",
        (
            f"{m['cores']} cores, {m['cpu']}; Python {m['python']}; psycopg {m['psycopg']} ({m['psycopg_impl']}, "
            f"libpq {m['libpq']}); PostgreSQL {srv['server_version']} (fsync={srv['fsync']}, {srv['wal_sync_method']}, "
            f"shared_buffers={srv['shared_buffers']}, Unix socket); SQLite {m['sqlite']} (apsw {m['apsw']})"
        ),
        f"journal at {m['journal_commit']}"
        + (f" + uncommitted changes under journal/ ({m['journal_uncommitted']})" if m["journal_uncommitted"] else ""),
        "",
    ]
    rows = [
        Row(**r) if isinstance(r, dict) else r
        for part in ("append", "writers", "read")
        if part in doc
        for r in doc[part]["rows"]
    ]
    if rows:
        out += [table(rows), ""]
        out.append("ratio: append and read rows are time ratios (lower is better); writers rows are rate ratios")
        out.append("(appends/s over the 1-process rate, higher is better). Each is the median of per-round ratios.")
        out.append("writers: µs/op and ops/s are for the whole job (wall time over all processes' appends).")
        out.append("")
    if "append" in doc:
        a = doc["append"]
        out.append("Where one durable append's time goes on PostgreSQL (medians over the append rounds, µs):")
        out.append(f"  {RAW}, each call:")
        for st in a["raw_stages"]:
            out.append(f"    {st['stage']:60} {st['us']:8.1f}")
        out.append("  the journal's statements as raw psycopg replays them, each round trip:")
        for st in a["stages"]:
            out.append(f"    {st['stage']:60} {st['on_us']:8.1f}   (synchronous_commit=off: {st['off_us']:7.1f})")
        out.append("  the same statements, each its own round trip (prepared as psycopg does by default):")
        for st in a["split_stages"]:
            out.append(f"    {st['stage']:60} {st['us']:8.1f}")
        for kind, times in a["insert_server"].items():
            parts = ", ".join(f"{k} {v:.1f}" for k, v in times.items())
            out.append(f"  the server's time for the INSERT into the {kind} (EXPLAIN ANALYZE, medians): {parts}")
        if "statement_server_us" in a:
            out.append("  the server's time per one-row INSERT statement, run in a loop inside the server (µs):")
            for kind, us in a["statement_server_us"].items():
                out.append(f"    {kind:60} {us:8.1f}")
        out.append(
            "  the journal's own work (journal.append − the replay, paired by round): "
            f"{a['journal_minus_replay_us']:8.1f}"
        )
        out.append("  the wait for the WAL flush: synchronous_commit on − off, paired by round:")
        for name, us in a["flush_wait_us"].items():
            out.append(f"    {name:60} {us:8.1f}")
        out.append("  the WAL flush as the server counts it (pg_stat_wal; chunks of 50 commits taking turns; each")
        out.append("  chunk's mean, outliers included, then the median over chunks):")
        for name, w in a["wal"].items():
            out.append(
                f"    {name:38} {w['syncs_per_commit']:.2f} fdatasync/commit, {w['sync_us_per_sync']:6.1f} µs each; "
                f"write {w['write_us_per_commit']:5.1f} µs, {w['bytes_per_commit']:4.0f} bytes, "
                f"{w['records_per_commit']:.1f} records per commit (op {w['append_us']:.1f} µs)"
            )
        out.append("")
    if "restart" in doc:
        r = doc["restart"]
        out.append(
            f"restart of {r['sessions']} interrupted sessions ({r['history']} events of history each), "
            "durability=full, "
            f"medians of {len(r['rounds']['sqlite'])} rounds (s)"
        )
        keys = ("open", "scan", "recover", "scan_recover", "scan_after", "total")
        heads = ("open", "scan", "recover", "scan+recover", "scan again", "total")
        out.append(f"  {'backend':12}" + "".join(f"{h:>14}" for h in heads))
        for backend, med in r["medians_s"].items():
            out.append(f"  {backend:12}" + "".join(f"{med[k]:14.3f}" for k in keys))
        out.append(
            f"  {'PG / SQLite':12}"
            + "".join(f"{r['pg_over_sqlite'][k]:13.2f}×" if k in r["pg_over_sqlite"] else f"{'-':>14}" for k in keys)
        )
        b = r["build_s"]
        out.append(
            f"  (built in {b['sqlite']:.0f} s on SQLite, {b['postgresql']:.0f} s on PostgreSQL with "
            f"{b['postgresql_procs']} process(es); not timed above)"
        )
        out.append("")
    out.append("What each contender did per op, and the durability it ran with (read back from its connection):")
    for row in rows:
        out.append(f"  {row.name}: {row.what}\n      {row.durability}")
    if "append" in doc:
        out.append("  one steady journal append sent (| between round trips): " + doc["append"]["statements"])
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, 1,000 sessions to restart")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts (default: {','.join(PARTS)})")
    parser.add_argument("--sessions", type=int, default=None, help="sessions to restart (default 10,000; quick 1,000)")
    parser.add_argument(
        "--build-procs", type=int, default=2, help="processes building the restart's PostgreSQL sessions"
    )
    parser.add_argument("--from-json", metavar="PATH", help="print the table of a saved --json run, run nothing")
    args = parser.parse_args(argv)
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as f:
            print(report(json.load(f)))
        return 0
    parts = [p for p in args.only.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))} (choose from {', '.join(PARTS)})")
    s = QUICK if args.quick else FULL
    sessions = args.sessions or s.restart_sessions
    started = time.monotonic()
    doc: dict[str, Any] = {
        "command": "python bench/postgres.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:])),
        "settings": asdict(s),
        "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    with scratch_dir(prefix="journal-bench-pg-") as tmp:
        server = PgServer(fsync=True)
        try:
            log(f"files in {tmp}; server in {server.root}")
            doc["machine"] = machine(server_settings(server.dsn()))
            if "append" in parts:
                log("append")
                doc["append"] = part_append(server, tmp, s)
            if "writers" in parts:
                log("writers")
                doc["writers"] = part_writers(server, s)
            if "restart" in parts:
                log("restart")
                doc["restart"] = part_restart(server, tmp, s, sessions=sessions, build_procs=args.build_procs)
            if "read" in parts:
                log("read")
                doc["read"] = part_read(server, tmp, s)
        finally:
            server.close()
    doc["elapsed_s"] = round(time.monotonic() - started, 1)
    for part in ("append", "writers", "read"):
        if part in doc:
            doc[part]["rows"] = [asdict(r) for r in doc[part]["rows"]]
    if args.json:
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        print(report(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
