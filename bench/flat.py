"""Costs that must stay flat as the file grows: restart scan, fork, open; and the messages fold.

    python bench/flat.py [--big N] [--json]

Builds two journals in a temporary directory that hold the same unfinished work (3 sessions with
an open turn owing calls, one of them dispatched) and differ only in how much finished history
they carry: about 10 thousand events, and ``--big`` (default 1 million) events. It then times,
with the medians of many runs:

- ``scan()`` on each (DESIGN §11: the same within 2x, under 10 ms);
- ``fork(parent, "last")`` of a 10-event parent and of a parent as long as the big history
  (target: the same within 2x), with ``durability="normal"`` so the fsync (identical for both)
  does not drown the comparison;
- ``journal.open()`` of each file (target: flat);
- ``messages()`` on a 100-thousand-event session with 100 compactions, and on one half as long
  (target: linear in the events, so the ratio is about 2, not events x replaces);
- ``messages(tail=50)`` on two 50-thousand-event sessions against a raw apsw
  ``SELECT ... ORDER BY seq DESC LIMIT 50`` with ``json.loads`` of each row (target: at most 5x):
  an agent's chat (turns with a tool call each) whose last 50 messages hold no compaction, and
  the half-length session above, whose newest event is a compaction near the end of the
  transcript (placed by its row in the ``compactions`` table, read with the tail).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import apsw

import journal

BATCH = 5_000


def median_ms(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def history(j: journal.Journal, session_id: str, events: int) -> None:
    """Finished turns: user message, turn with one tool call answered, assistant answer."""
    one_turn = 8
    turns = events // one_turn
    done = 0
    while done < turns:
        items = []
        for t in range(done, min(done + BATCH // one_turn, turns)):
            call = {"id": f"h{t}", "name": "lookup", "arguments": {"q": t}}
            items += [
                ("user_message", {"content": f"question {t}"}),
                ("turn_start", {"turn": t + 1}),
                ("step_start", {"turn": t + 1, "step": 1}),
                ("assistant_message", {"content": "", "tool_calls": [call], "stop_reason": "tool_use"}),
                ("tool_call", {"id": call["id"], "name": "lookup"}),
                ("tool_result", {"tool_call_id": call["id"], "content": "x" * 60}),
                ("step_end", {"turn": t + 1, "step": 1, "outcome": "ok"}),
                ("turn_end", {"turn": t + 1, "steps": 1, "reason": "complete"}),
            ]
        j.append_many(session_id, items)
        done += BATCH // one_turn


def open_work(j: journal.Journal) -> None:
    for n in range(3):
        s = j.create_session(f"open-{n}").id
        turn = j.turn_start(s)
        turn.step_start()
        calls = [{"id": f"o{n}-{i}", "name": "act", "arguments": {}} for i in range(2)]
        turn.assistant("", tool_calls=calls)
        turn.dispatch(calls[0]["id"])


def build(path: Path, events: int) -> None:
    with journal.open(path, durability="normal") as j:
        j.create_session("history")
        history(j, "history", events)
        open_work(j)
        j.checkpoint()


def transcript(j: journal.Journal, session_id: str, events: int, compactions: int) -> None:
    j.create_session(session_id)
    every = events // compactions
    items = []
    messages = 0
    for i in range(events):
        if i % every == every - 1 and messages > 10:
            items.append(
                ("user_message", {"content": "summary", "surface_op": ["replace", messages - 10, messages - 5]})
            )
            messages -= 5
        else:
            items.append(("user_message" if i % 2 else "assistant_message", {"content": f"m{i}"}))
            messages += 1
        if len(items) == BATCH:
            j.append_many(session_id, items)
            items = []
    if items:
        j.append_many(session_id, items)


def raw_tail(conn: apsw.Connection, session_id: str, n: int) -> list[tuple[int, str, object, int]]:
    """The floor for ``messages(tail=n)``: the newest n rows by one query, each decoded."""
    sql = "SELECT seq, type, data, time_ms FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT ?"
    return [(seq, type_, json.loads(text), time_ms) for seq, type_, text, time_ms in conn.execute(sql, (session_id, n))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", type=int, default=1_000_000, help="events in the big file")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp, "small.db"), Path(tmp, "big.db")
        for path, size in ((small, 10_000), (big, args.big)):
            start = time.perf_counter()
            build(path, size)
            print(f"built {path.name}: {size} events in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        for label, path in (("small", small), ("big", big)):
            # durability="normal": a fork is one small commit, and with "full" its fsync (the same
            # for any parent) would drown the cost being compared.
            with journal.open(path, durability="normal") as j:
                assert len(j.scan().open_turns) == 3
                results[f"scan_{label}_ms"] = median_ms(j.scan, 200)
                short = j.create_session(f"short-{label}").id
                for i in range(10):
                    j.append(short, "user_message", {"content": str(i)})
                results[f"fork_10_{label}_ms"] = median_ms(lambda short=short: j.fork(short), 100)
                results[f"fork_history_{label}_ms"] = median_ms(lambda: j.fork("history"), 100)
                results[f"events_{label}"] = j.count("history")
            results[f"open_{label}_ms"] = median_ms(lambda path=path: journal.open(path).close(), 50)
            results[f"file_{label}_bytes"] = os.path.getsize(path)
        with journal.open(Path(tmp, "messages.db"), durability="normal") as j:
            transcript(j, "half", 50_000, 50)
            transcript(j, "full", 100_000, 100)
            results["messages_50k_ms"] = median_ms(lambda: j.messages("half"), 5)
            results["messages_100k_ms"] = median_ms(lambda: j.messages("full"), 5)
            j.create_session("chat")
            history(j, "chat", 50_000)
            raw = apsw.Connection(str(Path(tmp, "messages.db")), flags=apsw.SQLITE_OPEN_READONLY)
            for label, session_id in (("chat", "chat"), ("compacted", "half")):
                assert j.messages(session_id, tail=50) == j.messages(session_id)[-50:]
                results[f"tail_50_{label}_ms"] = median_ms(lambda s=session_id: j.messages(s, tail=50), 200)
                results[f"raw_50_{label}_ms"] = median_ms(lambda s=session_id: raw_tail(raw, s, 50), 200)
            raw.close()
    r = results
    ratios = {
        "scan big/small": r["scan_big_ms"] / r["scan_small_ms"],
        "fork long/short parent": r["fork_history_big_ms"] / r["fork_10_big_ms"],
        "open big/small": r["open_big_ms"] / r["open_small_ms"],
        "messages 100k/50k": r["messages_100k_ms"] / r["messages_50k_ms"],
        "tail 50 / raw LIMIT 50 (chat)": r["tail_50_chat_ms"] / r["raw_50_chat_ms"],
        "tail 50 / raw LIMIT 50 (compaction last)": r["tail_50_compacted_ms"] / r["raw_50_compacted_ms"],
        "bytes per event (big)": r["file_big_bytes"] / r["events_big"],
    }
    if args.json:
        print(json.dumps({"results": results, "ratios": ratios}, indent=2))
        return 0
    print(f"{'figure':<44}{'median':>12}")
    for key, value in results.items():
        unit = "" if key.startswith(("events", "file")) else " ms"
        print(f"{key:<44}{value:>12.3f}{unit}" if isinstance(value, float) else f"{key:<44}{value:>12}")
    print()
    targets = {
        "scan big/small": 2.0,
        "fork long/short parent": 2.0,
        "open big/small": 2.0,
        "messages 100k/50k": 2.5,
        "tail 50 / raw LIMIT 50 (chat)": 5.0,
        "tail 50 / raw LIMIT 50 (compaction last)": 5.0,
    }
    for key, value in ratios.items():
        target = targets.get(key)
        verdict = "" if target is None else ("  ok" if value <= target else f"  MISS (target <= {target})")
        print(f"{key:<44}{value:>12.2f}{verdict}")
    scan_ok = r["scan_big_ms"] < 10
    print(f"{'scan under 10 ms on the big file':<44}{'yes' if scan_ok else 'NO':>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
