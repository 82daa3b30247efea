"""``append_many`` of whole turns, on SQLite and on PostgreSQL, against raw writing the same rows.

    python bench/batch.py [--sizes 8,64,256] [--rounds R] [--json]

A batch is ``size`` events of finished turns (``restart.finished_turns``: 8 events a turn, one of
them a dispatch and one a result, the items ``append_many`` writes one at a time because they
read first: G5, G6), appended to a fresh session in one ``append_many``. Contenders, each batch
size in its own fresh session, rounds interleaved:

- ``journal``: ``Journal.append_many`` under ``durability="full"`` (SQLite) or on a PostgreSQL
  server with fsync on (from the backend's ``plan_derived_from`` deriving events on, the batch's
  derived state is planned once and written by a few statements: ``journal.derived_batch``);
- ``raw + derived rows``: the same rows (the journal's own text) in one transaction by the driver
  alone — apsw ``executemany`` with the journal's pragmas, psycopg ``executemany`` — into the
  journal's schema, whose triggers write the derived rows (turn journal, tool calls) and check
  G4 as under the journal.

Medians of the rounds, in ms per batch, and the journal's ratio to raw.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import apsw

sys.path.insert(0, str(Path(__file__).parent))
import restart

import journal
from journal.codec import Codec

_INSERT = "INSERT INTO events (session_id, seq, type, data, time_ms) VALUES (?, ?, ?, ?, ?)"


def _rows(session_id: str, size: int) -> list[tuple[str, int, str, str, int]]:
    codec, now = Codec(), int(time.time() * 1000)
    items = restart.finished_turns(size // restart.TURN, 1)
    return [(session_id, seq, t, codec.encode_copy(t, d)[0], now) for seq, (t, d) in enumerate(items)]


def _journal(j: journal.Journal, session_id: str, size: int) -> float:
    items = restart.finished_turns(size // restart.TURN, 1)
    j.create_session(session_id)
    start = time.perf_counter()
    j.append_many(session_id, items)
    return time.perf_counter() - start


def _raw_sqlite(conn: apsw.Connection, session_id: str, size: int) -> float:
    conn.execute("INSERT INTO sessions (id, created_ms) VALUES (?, 0)", (session_id,))
    rows = _rows(session_id, size)
    start = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(_INSERT, rows)
    conn.execute("COMMIT")
    return time.perf_counter() - start


def _raw_pg(conn: Any, session_id: str, size: int) -> float:
    with conn.transaction():
        conn.execute("INSERT INTO sessions (id, created_ms) VALUES (%s, 0)", (session_id,))
    rows = _rows(session_id, size)
    start = time.perf_counter()
    with conn.transaction(), conn.cursor() as cursor:
        cursor.executemany(_INSERT.replace("?", "%s"), rows)
    return time.perf_counter() - start


def run(sizes: list[int], rounds: int) -> dict[str, Any]:
    import psycopg

    from journal.testing.pgserver import PgServer

    times: dict[str, dict[int, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, PgServer(fsync=True) as server:
        dsn = server.create_database()
        path = Path(tmp) / "journal.db"
        raw_path = Path(tmp) / "raw.db"
        journal.open(raw_path).close()  # the journal's schema; raw writes into it
        with journal.open(path, durability="full") as lite, journal.open(dsn) as pg:
            raw_lite = apsw.Connection(str(raw_path))
            raw_lite.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON")
            raw_dsn = server.create_database()
            journal.open(raw_dsn).close()  # the journal's schema on the raw database
            raw_pg = psycopg.connect(raw_dsn, autocommit=True)
            contenders = {
                "sqlite journal": lambda sid, n: _journal(lite, sid, n),
                "sqlite raw + derived rows": lambda sid, n: _raw_sqlite(raw_lite, sid, n),
                "postgresql journal": lambda sid, n: _journal(pg, sid, n),
                "postgresql raw + derived rows": lambda sid, n: _raw_pg(raw_pg, sid, n),
            }
            for r in range(rounds + 1):  # the first round warms up and is not counted
                for name, contender in contenders.items():
                    for size in sizes:
                        elapsed = contender(f"r{r}-{size}", size)
                        if r:
                            times.setdefault(name, {}).setdefault(size, []).append(elapsed)
            raw_lite.close()
            raw_pg.close()
    medians = {name: {size: statistics.median(ts) * 1000 for size, ts in by.items()} for name, by in times.items()}
    ratios = {
        backend: {
            size: medians[f"{backend} journal"][size] / medians[f"{backend} raw + derived rows"][size] for size in sizes
        }
        for backend in ("sqlite", "postgresql")
    }
    return {"ms per batch": medians, "journal / raw + derived rows": ratios, "rounds": rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="8,64,256", help="events per batch, comma-separated (multiples of 8)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    out = run(sizes, args.rounds)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"append_many of whole turns, medians of {args.rounds} rounds (ms per batch)")
    print(f"{'contender':32}" + "".join(f"{s:>10}" for s in sizes))
    for name, by in out["ms per batch"].items():
        print(f"{name:32}" + "".join(f"{by[s]:10.2f}" for s in sizes))
    for backend, by in out["journal / raw + derived rows"].items():
        print(f"{backend + ' journal / raw':32}" + "".join(f"{by[s]:9.2f}x" for s in sizes))


if __name__ == "__main__":
    main()
