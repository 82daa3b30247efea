"""Where the time of one ``Journal.append`` goes: a stage breakdown and a cProfile listing.

    python bench/profile_append.py [--durability normal|full] [--ops N]

1. Stages: the steps of ``LogMixin.append``'s common path (the session's next seq known, no
   other thread appending) re-run one by one with the journal's own functions, with a clock read
   between them: validation, the copy for the returned event and JSON encoding
   (``Codec.encode_copy``); taking the seq this connection last gave the session; the
   ``INSERT`` committed as its own autocommit transaction (``GroupCommit.run_one`` →
   ``Store.write_one``: the CHECKs, foreign key and triggers, and the commit); making the
   ``Event``. Medians per stage; the real ``append`` is timed beside it, interleaved. The same for
   raw apsw's append (and its autocommit INSERT), and for ``append_many`` of 1000 events.
2. SQL: the same ``INSERT`` statement timed alone inside a transaction, into a bare table, into
   the journal's schema, and into the journal's schema with the seq trigger dropped (in a scratch
   file), to split the INSERT's cost between the trigger and the rest of the schema.
3. cProfile of ``Journal.append`` and of ``Journal.append_many`` (1000 events), by own time.

Private names of the package are used on purpose: this script explains the public ``append``.
Files go to a temporary directory.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

import apsw
import contenders as c

import journal
from journal.log import _INSERT, next_seq_txn, now_ms
from journal.model import Event

STAGES = (
    "validate + encode + copy",
    "take the next seq",
    "INSERT, autocommitted",
    "make the Event",
)


def staged_append(j: journal.Journal, session_id: str) -> list[int]:
    """One append, as ``LogMixin.append``'s common path does it; the nanoseconds of each stage.

    The session must have had an append through this journal already (so its seq is known)."""
    clock = time.perf_counter_ns
    t0 = clock()
    text, copy = j._codec.encode_copy(c.EVENT_TYPE, c.MESSAGE)
    time_ms = now_ms()
    t1 = clock()
    seq = j._store.next_seqs[session_id]
    row = (session_id, seq, c.EVENT_TYPE, text, time_ms)
    t2 = clock()
    if not j._appends.run_one(_INSERT, row, present=None):
        raise RuntimeError("append did not take its common path (a crash point armed?)")
    j._store.next_seqs[session_id] = seq + 1
    t3 = clock()
    Event(session_id, seq, c.EVENT_TYPE, copy, time_ms)
    t4 = clock()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3]


RAW_STAGES = ("json.dumps", "BEGIN IMMEDIATE", "INSERT (bare table)", "COMMIT")


def staged_raw_append(raw: c.RawAppend) -> list[int]:
    """One raw apsw append (as bench/append.py's baseline does it); nanoseconds per stage."""
    clock, conn = time.perf_counter_ns, raw.conn
    t0 = clock()
    text = c.encode(c.MESSAGE)
    t1 = clock()
    conn.execute("BEGIN IMMEDIATE")
    t2 = clock()
    conn.execute(c.INSERT_SQL, (raw.session_id, raw.seq, c.EVENT_TYPE, text, now_ms()))
    t3 = clock()
    conn.execute("COMMIT")
    t4 = clock()
    raw.seq += 1
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3]


RAW_AUTO_STAGES = ("json.dumps", "INSERT, autocommitted")


def staged_raw_autocommit(raw: c.RawAppend) -> list[int]:
    """The raw INSERT alone as its own autocommit transaction (what the journal's common path runs)."""
    clock, conn = time.perf_counter_ns, raw.conn
    t0 = clock()
    text = c.encode(c.MESSAGE)
    t1 = clock()
    conn.execute(c.INSERT_SQL, (raw.session_id, raw.seq, c.EVENT_TYPE, text, now_ms()))
    t2 = clock()
    raw.seq += 1
    return [t1 - t0, t2 - t1]


def raw_stage_table(
    raw: c.RawAppend,
    ops: int,
    *,
    staged: Callable[[c.RawAppend], list[int]] = staged_raw_append,
    names: tuple[str, ...] = RAW_STAGES,
) -> str:
    stages: list[list[int]] = [[] for _ in names]
    for _ in range(ops):
        for i, ns in enumerate(staged(raw)):
            stages[i].append(ns)
    medians = [statistics.median(s) / 1000 for s in stages]
    lines = [f"  {name:<24} {us:8.2f} µs" for name, us in zip(names, medians)]
    lines.append(f"  {'sum of stage medians':<24} {sum(medians):8.2f} µs")
    return "\n".join(lines)


def stage_table(j: journal.Journal, ops: int) -> str:
    staged_sid, real_sid = j.create_session().id, j.create_session().id
    for sid in (staged_sid, real_sid):  # from the second append on, the seq is known
        j.append(sid, c.EVENT_TYPE, c.MESSAGE)
    stages: list[list[int]] = [[] for _ in STAGES]
    real: list[int] = []
    totals: list[int] = []
    for _ in range(ops):
        staged = staged_append(j, staged_sid)
        totals.append(sum(staged))
        for i, ns in enumerate(staged):
            stages[i].append(ns)
        start = time.perf_counter_ns()
        j.append(real_sid, c.EVENT_TYPE, c.MESSAGE)
        real.append(time.perf_counter_ns() - start)
    medians = [statistics.median(s) / 1000 for s in stages]
    lines = [f"  {name:<24} {us:8.2f} µs" for name, us in zip(STAGES, medians)]
    lines.append(f"  {'sum of stage medians':<24} {sum(medians):8.2f} µs")
    lines.append(f"  {'staged append (median)':<24} {statistics.median(totals) / 1000:8.2f} µs")
    lines.append(f"  {'Journal.append (median)':<24} {statistics.median(real) / 1000:8.2f} µs")
    return "\n".join(lines)


BATCH_STAGES = (
    "validate + encode + copy",
    "lock + BEGIN + SELECT seq",
    "executemany",
    "COMMIT + exit",
    "make the Events",
)


def staged_append_many(j: journal.Journal, session_id: str, rows: int) -> list[int]:
    """One ``append_many`` of ``rows`` plain events, as ``LogMixin.append_many`` does it."""
    clock = time.perf_counter_ns
    t0 = clock()
    encoded = [(c.EVENT_TYPE, *j._codec.encode_copy(c.EVENT_TYPE, c.MESSAGE, index=i)) for i in range(rows)]
    time_ms = now_ms()
    t1 = clock()
    with j._store.write("append_many") as db:
        first = next_seq_txn(db, session_id)
        t2 = clock()
        db.executemany(_INSERT, [(session_id, first + i, t, text, time_ms) for i, (t, text, _) in enumerate(encoded)])
        t3 = clock()
    t4 = clock()
    [Event(session_id, first + i, t, copy, time_ms) for i, (t, _, copy) in enumerate(encoded)]
    t5 = clock()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4]


def batch_stage_table(j: journal.Journal, batches: int, rows: int = 1000) -> str:
    sid = j.create_session().id
    stages: list[list[int]] = [[] for _ in BATCH_STAGES]
    for _ in range(batches):
        for i, ns in enumerate(staged_append_many(j, sid, rows)):
            stages[i].append(ns)
    medians = [statistics.median(s) / 1000 / rows for s in stages]
    lines = [f"  {name:<26} {us:8.2f} µs/row" for name, us in zip(BATCH_STAGES, medians)]
    lines.append(f"  {'sum':<26} {sum(medians):8.2f} µs/row")
    return "\n".join(lines)


def insert_cost(path: str, session_id: str, *, synchronous: str, ops: int) -> float:
    """Median µs of the INSERT statement alone, each in its own transaction."""
    conn = c.raw_connection(path, synchronous=synchronous)
    seq = conn.execute("SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = ?", (session_id,)).get
    text, out = c.encode(c.MESSAGE), []
    for _ in range(ops):
        conn.execute("BEGIN IMMEDIATE")
        start = time.perf_counter_ns()
        conn.execute(c.INSERT_SQL, (session_id, seq, c.EVENT_TYPE, text, now_ms()))
        out.append(time.perf_counter_ns() - start)
        conn.execute("COMMIT")
        seq += 1
    conn.close()
    return statistics.median(out) / 1000


def sql_table(tmp: str, *, synchronous: str, ops: int) -> str:
    """The INSERT alone into a bare table, the journal's schema, and scratch copies of it."""
    sid = uuid.uuid4().hex
    variants = {
        "bare table (same columns and key)": None,
        "journal schema": [],
        "journal schema without seq trigger": ["DROP TRIGGER events_seq_contiguous"],
        "journal schema without any trigger": "all triggers",
    }
    paths = {}
    for i, (label, drops) in enumerate(variants.items()):
        paths[label] = path = c.new_path(tmp, f"sql_{i}")
        if drops is None:
            c.create_bare_file(path)
            continue
        c.create_journal_file(path, [sid])
        conn = apsw.Connection(path)  # scratch files: only to weigh what is dropped
        if drops == "all triggers":
            drops = [
                f"DROP TRIGGER {n}" for (n,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'trigger'")
            ]
        for statement in drops:
            conn.execute(statement)
        conn.close()
    results: dict[str, list[float]] = {label: [] for label in paths}
    for _ in range(5):  # interleaved, so noise falls on all of them
        for label, path in paths.items():
            results[label].append(insert_cost(path, sid, synchronous=synchronous, ops=ops))
    return "\n".join(f"  {label:<40} {statistics.median(v):8.2f} µs" for label, v in results.items())


def profile_listing(call: Callable[[], object], ops: int, *, lines: int = 20) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(ops):
        call()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(lines)
    return out.getvalue()


def report(tmp: str, *, durability: str, ops: int) -> None:
    synchronous = durability.upper()
    with journal.open(c.new_path(tmp, "journal"), durability=durability) as j:
        j.append(j.create_session().id, c.EVENT_TYPE, c.MESSAGE)  # warm the statement cache
        print(f"Stages of one append, durability={durability}, {ops} ops (medians):")
        print(stage_table(j, ops))
        print()
        bare = c.new_path(tmp, "raw")
        c.create_bare_file(bare)
        raw = c.RawAppend("raw", bare, synchronous=synchronous, session_id=c.new_id())
        print(f"Stages of one raw apsw append, synchronous={synchronous}, {ops} ops (medians):")
        print(raw_stage_table(raw, ops))
        print(f"The same INSERT as its own autocommit transaction, {ops} ops (medians):")
        print(raw_stage_table(raw, ops, staged=staged_raw_autocommit, names=RAW_AUTO_STAGES))
        raw.close()
        print()
        print("Stages of one append_many of 1000 events, 30 batches (medians per row):")
        print(batch_stage_table(j, 30))
        print()
        print(f"The INSERT statement alone, synchronous={synchronous} (medians):")
        print(sql_table(tmp, synchronous=synchronous, ops=max(100, ops // 3)))
        print()
        sid = j.create_session().id
        print(f"cProfile of Journal.append, {ops} ops, by own time:")
        print(profile_listing(lambda: j.append(sid, c.EVENT_TYPE, c.MESSAGE), ops))
        items = [(c.EVENT_TYPE, c.MESSAGE)] * 1000
        print("cProfile of Journal.append_many of 1000 events, 20 batches, by own time:")
        print(profile_listing(lambda: j.append_many(sid, items), 20))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--durability", choices=("normal", "full"), default="normal")
    parser.add_argument("--ops", type=int, default=5000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="journal-profile-") as tmp:
        report(tmp, durability=args.durability, ops=args.ops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
