"""Appends of a realistic turn mix, one event per transaction, against raw apsw (issue 14, item 5).

    python bench/mix.py [--turns N] [--rounds R] [--json]

One turn of an agent is 13 events: a user message, ``turn_start``, ``step_start``, an assistant
message asking for two tool calls, their two dispatches (``tool_call``), their two results, a
``step_end``, a second step with the final assistant message, and ``turn_end``. Contenders, each
in its own file, under ``durability`` ``normal`` and ``full``:

- ``journal append``: ``Journal.append`` of each event (one transaction each);
- ``journal turn API``: the same turn through ``turn_start``, ``step_start``, ``Turn.assistant``,
  ``dispatch`` (its commit is always synced: G6), ``put_result``, ``step_end``, ``turn_end``
  (informative: under ``normal`` its two synced dispatches make it a different contest);
- ``raw apsw``: ``BEGIN IMMEDIATE; INSERT; COMMIT`` of the same rows (data ``json.dumps``'d) into a
  bare events table (the journal's columns and primary key, no CHECKs, triggers or indexes),
  with the same pragmas;
- ``raw + derived rows``: the same statements into a file the journal made, whose triggers write
  the derived rows (turn journal, tool calls) as under the journal: raw writing the same rows,
  derived rows included (issue 27's reference).

Rounds interleave the contenders (R rounds of N turns each); the figures are medians of the
per-event time over the rounds, and ratios to raw. Targets: ``normal`` ≤ 1.5× raw writing the
same rows, derived rows included (issue 27; issue 14 measured against the bare table), ``full``
≤ 1.10×.
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

import journal

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contenders as c

EVENTS_PER_TURN = 13


def turn_events(t: int) -> list[tuple[str, dict[str, Any]]]:
    calls = [
        {"id": f"t{t}a", "name": "search", "arguments": {"query": "WAL checkpoint starvation", "limit": 5}},
        {"id": f"t{t}b", "name": "read_file", "arguments": {"path": "journal/store/sqlite.py"}},
    ]
    return [
        ("user_message", c.MESSAGE),
        ("turn_start", {"turn": t}),
        ("step_start", {"turn": t, "step": 1}),
        ("assistant_message", {"content": "Let me look.", "tool_calls": calls, "stop_reason": "tool_use"}),
        ("tool_call", {"id": calls[0]["id"], "name": "search", "arguments": calls[0]["arguments"]}),
        ("tool_call", {"id": calls[1]["id"], "name": "read_file", "arguments": calls[1]["arguments"]}),
        ("tool_result", {"tool_call_id": calls[0]["id"], "name": "search", "content": "x" * 300}),
        ("tool_result", {"tool_call_id": calls[1]["id"], "name": "read_file", "content": "y" * 600}),
        ("step_end", {"turn": t, "step": 1, "outcome": "ok"}),
        ("step_start", {"turn": t, "step": 2}),
        ("assistant_message", {"content": c.MESSAGE_TEXT, "stop_reason": "stop"}),
        ("step_end", {"turn": t, "step": 2, "outcome": "ok"}),
        ("turn_end", {"turn": t, "steps": 2, "reason": "complete"}),
    ]


class JournalAppend:
    def __init__(self, path: Path, durability: str) -> None:
        self.j = journal.open(path, durability=durability)
        self.sid = self.j.create_session().id
        self.turn = 0

    def run(self, turns: int) -> float:
        start = time.perf_counter()
        for _ in range(turns):
            self.turn += 1
            for type_, data in turn_events(self.turn):
                self.j.append(self.sid, type_, data)
        return (time.perf_counter() - start) / (turns * EVENTS_PER_TURN)


class JournalTurnAPI(JournalAppend):
    def run(self, turns: int) -> float:
        start = time.perf_counter()
        j, sid = self.j, self.sid
        for _ in range(turns):
            self.turn += 1
            events = turn_events(self.turn)
            j.append(sid, "user_message", c.MESSAGE)
            turn = j.turn_start(sid)
            turn.step_start()
            turn.assistant(events[3][1]["content"], tool_calls=events[3][1]["tool_calls"])
            for (_t, dispatch), (_r, result) in zip(events[4:6], events[6:8]):
                turn.dispatch(dispatch["id"])
                turn.put_result(result["tool_call_id"], result["content"], name=result["name"])
            turn.step_end()
            turn.step_start()
            turn.assistant(c.MESSAGE_TEXT)
            turn.step_end()
            turn.complete()
        return (time.perf_counter() - start) / (turns * EVENTS_PER_TURN)


class Raw:
    def __init__(self, path: Path, durability: str) -> None:
        self.conn = c.raw_connection(str(path), synchronous=durability.upper())
        self.conn.execute(c.BARE_EVENTS_SQL)
        self.seq = 0
        self.turn = 0

    def run(self, turns: int) -> float:
        conn = self.conn
        start = time.perf_counter()
        for _ in range(turns):
            self.turn += 1
            for type_, data in turn_events(self.turn):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(c.INSERT_SQL, ("s", self.seq, type_, c.encode(data), c.now_ms()))
                conn.execute("COMMIT")
                self.seq += 1
        return (time.perf_counter() - start) / (turns * EVENTS_PER_TURN)


class RawDerived(Raw):
    """Raw apsw writing the same rows into a file the journal made: its triggers write the
    derived rows (the turn journal, the tool calls) as they do under the journal."""

    def __init__(self, path: Path, durability: str) -> None:
        c.create_journal_file(str(path), ["s"])
        self.conn = c.raw_connection(str(path), synchronous=durability.upper())
        self.conn.pragma("recursive_triggers", False)  # as the journal's connections have it
        self.seq = 0
        self.turn = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="journal-mix-") as tmp:
        for durability in ("normal", "full"):
            contenders = {
                "raw apsw": Raw(Path(tmp, f"raw-{durability}.db"), durability),
                "raw + derived rows": RawDerived(Path(tmp, f"rawd-{durability}.db"), durability),
                "journal append": JournalAppend(Path(tmp, f"j-{durability}.db"), durability),
                "journal turn API": JournalTurnAPI(Path(tmp, f"t-{durability}.db"), durability),
            }
            for contender in contenders.values():
                contender.run(args.turns)  # warm up: the WAL grows to its working size
            samples: dict[str, list[float]] = {name: [] for name in contenders}
            for _ in range(args.rounds):
                for name, contender in contenders.items():
                    samples[name].append(contender.run(args.turns))
            out[durability] = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
            for contender in contenders.values():
                (contender.conn if isinstance(contender, Raw) else contender.j).close()
    if args.json:
        print(json.dumps({"us_per_event": out}, indent=2))
        return
    print(
        f"realistic turn mix ({EVENTS_PER_TURN} events a turn), one event per transaction; "
        f"medians of {args.rounds} rounds"
    )
    print(f"{'durability':<10}  {'contender':<18}  {'µs/event':>9}  {'vs raw':>7}  {'vs raw+derived':>14}  target")
    for durability, figures in out.items():
        raw, derived = figures["raw apsw"], figures["raw + derived rows"]
        target = {"normal": "≤ 1.5× raw + derived rows", "full": "≤ 1.10×"}[durability]
        for name, us in figures.items():
            ratio = "-" if name == "raw apsw" else f"{us / raw:.2f}"
            against = "-" if name.startswith("raw") else f"{us / derived:.2f}"
            tag = target if name == "journal append" else ("info" if not name.startswith("raw") else "")
            print(f"{durability:<10}  {name:<18}  {us:9.1f}  {ratio:>7}  {against:>14}  {tag}")


if __name__ == "__main__":
    main()
