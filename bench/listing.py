"""Listing a busy file's sessions: ``sessions()`` against one raw apsw query, and the command.

    python bench/listing.py [--sessions N] [--events E] [--rounds R] [--json]

Builds a journal of N sessions (default 100,000): ids as ``create_session`` generates them (32
hex characters), created a millisecond or less apart (ties included), half of them with a
``meta`` title, E events each (default 4), and every tenth a fork of the session before it
(inheriting its E events) with one event of its own. The rows go in through raw SQL in one
transaction, against the journal's own schema (its CHECKs and triggers check every row): building
through the API would take minutes and is not what is measured.

Then, on that file, in interleaved rounds (medians):

- ``sessions()``: every session with its count and last activity, as ``Session`` objects;
- raw: ONE apsw query selecting the same columns (id, parent_id, seed_length, meta, created_ms, the
  count, the last event's time), every row fetched, on a connection with the journal's pragmas;
- a page: ``sessions(limit=1000, after=<the middle session>)`` and the same raw page;
- ``journal sessions --json > /dev/null`` (a fresh process each round; the start-up of the
  interpreter and the library, ``journal --help``, is shown beside it).

Target (DESIGN §11, issue 14): ``sessions()`` at most 1.3x the raw query.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import apsw

import journal

# The raw query, written out here rather than taken from the library: each per-session value is
# one seek into the events primary key, in the listing order of (created_ms, id).
RAW = (
    "SELECT s.id, s.parent_id, s.seed_length, s.meta, s.created_ms, "
    "coalesce((SELECT max(seq) + 1 FROM events WHERE session_id = s.id), s.seed_length), "
    "coalesce((SELECT time_ms FROM events WHERE session_id = s.id ORDER BY seq DESC LIMIT 1), s.created_ms) "
    "FROM sessions AS s WHERE s.purged_ms IS NULL"
)
RAW_ALL = RAW + " ORDER BY s.created_ms, s.id"
RAW_PAGE = (
    RAW + " AND (s.created_ms, s.id) > (SELECT created_ms, id FROM sessions WHERE id = ?) "
    "ORDER BY s.created_ms, s.id LIMIT 1000"
)
PAGE = 1000
START_MS = 1_700_000_000_000


def build(path: Path, sessions: int, events: int) -> None:
    """The journal described above (the library creates the file and its schema)."""
    journal.open(path, durability="normal").close()
    conn = apsw.Connection(str(path))
    conn.pragma("foreign_keys", True)
    conn.execute("BEGIN IMMEDIATE")
    previous = None
    for n in range(sessions):
        sid = uuid.uuid4().hex
        created = START_MS + n * 2 // 3  # some sessions share a millisecond
        meta = json.dumps({"title": f"chat {n}"}) if n % 2 else None
        if n % 10 == 9 and previous is not None:
            parent, seed, own = previous, events, 1
        else:
            parent, seed, own = None, 0, events
        conn.execute(
            "INSERT INTO sessions (id, parent_id, seed_length, meta, created_ms) VALUES (?, ?, ?, ?, ?)",
            (sid, parent, seed, meta, created),
        )
        rows = []
        for seq in range(seed, seed + own):
            kind = "user_message" if seq % 2 == 0 else "assistant_message"
            data = json.dumps({"content": f"message {seq} of chat {n}"})
            rows.append((sid, seq, kind, data, created + 1 + seq))
        conn.executemany("INSERT INTO events (session_id, seq, type, data, time_ms) VALUES (?, ?, ?, ?, ?)", rows)
        previous = sid if parent is None else previous
    conn.execute("COMMIT")
    conn.pragma("wal_checkpoint(TRUNCATE)")
    conn.close()


def raw_connection(path: Path) -> apsw.Connection:
    """A connection with the pragmas ``journal.open`` applies (DESIGN §4)."""
    conn = apsw.Connection(str(path))
    conn.pragma("journal_mode", "wal")
    conn.pragma("synchronous", "FULL")
    conn.pragma("foreign_keys", True)
    conn.pragma("recursive_triggers", False)
    conn.set_busy_timeout(10_000)
    return conn


def timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def library_vs_raw(path: Path, rounds: int) -> dict[str, float]:
    """Medians (s) of the whole listing and of one page, the library's and raw."""
    times: dict[str, list[float]] = {"sessions": [], "raw": [], "page": [], "raw_page": []}
    with journal.open(path) as j:
        conn = raw_connection(path)
        everything = j.sessions()
        middle = everything[len(everything) // 2].id
        raw_rows = conn.execute(RAW_ALL).fetchall()
        if len(raw_rows) != len(everything) or [r[0] for r in raw_rows] != [s.id for s in everything]:
            sys.exit("the raw query and sessions() disagree")
        del everything, raw_rows
        for n in range(rounds):
            pairs = [
                ("sessions", lambda: j.sessions()),
                ("raw", lambda: conn.execute(RAW_ALL).fetchall()),
                ("page", lambda: j.sessions(limit=PAGE, after=middle)),
                ("raw_page", lambda: conn.execute(RAW_PAGE, (middle,)).fetchall()),
            ]
            for name, call in pairs if n % 2 == 0 else reversed(pairs):  # neither always runs first
                seconds, result = timed(call)
                times[name].append(seconds)
                del result
        conn.close()
    return {name: statistics.median(values) for name, values in times.items()}


def command(path: Path, rounds: int) -> dict[str, float]:
    """Medians (s) of ``journal sessions --json > /dev/null`` and of ``journal --help``."""
    times: dict[str, list[float]] = {"cli_json": [], "cli_startup": []}
    base = [sys.executable, "-m", "journal.cli"]
    for _ in range(rounds):
        for name, args in (("cli_json", ["sessions", "--json", "--db", str(path)]), ("cli_startup", ["--help"])):
            start = time.perf_counter()
            subprocess.run(base + args, stdout=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="journal-listing-") as tmp:
        path = Path(tmp, "listing.db")
        seconds, _ = timed(lambda: build(path, args.sessions, args.events))
        print(f"built {args.sessions} sessions x {args.events} events in {seconds:.0f} s "
              f"({os.path.getsize(path) / 1e6:.0f} MB)", file=sys.stderr)  # fmt: skip
        figures = library_vs_raw(path, args.rounds) | command(path, max(3, args.rounds // 2))
    figures["ratio"] = figures["sessions"] / figures["raw"]
    figures["page_ratio"] = figures["page"] / figures["raw_page"]
    if args.json:
        print(json.dumps({"sessions": args.sessions, "events": args.events, "medians_s": figures}, indent=2))
        return
    print(f"listing {args.sessions} sessions ({args.events} events each), medians of {args.rounds} rounds")
    print(f"  sessions()                      {figures['sessions'] * 1000:8.1f} ms")
    print(f"  raw apsw, one query             {figures['raw'] * 1000:8.1f} ms")
    print(f"  ratio                           {figures['ratio']:8.2f}x  (target <= 1.3x)")
    print(f"  sessions(limit={PAGE}, after=)   {figures['page'] * 1000:8.2f} ms")
    print(f"  raw apsw, the same page         {figures['raw_page'] * 1000:8.2f} ms  ({figures['page_ratio']:.2f}x)")
    print(f"  journal sessions --json         {figures['cli_json']:8.2f} s   (journal --help: "
          f"{figures['cli_startup']:.2f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
