"""Keyed state against LangGraph's SqliteSaver, and reads that stay flat (issue 16).

    python bench/state.py [--steps 200] [--rounds 5] [--json]

1. A LangGraph-shaped workload: a graph with 8 channels (7 of about 2 KB that do not change, and
   a 500-byte scratch channel rewritten every step), run for ``--steps`` steps; each step changes
   that ONE channel. Each contender, in its own file (WAL, synchronous=FULL):

   - ``journal``: per step one ``append_many`` of the step's checkpoint record (an
     ``x.langgraph.checkpoint`` event: step number and channel versions) with
     ``state={"scratch": value}``: one transaction, only the changed channel written;
   - ``SqliteSaver`` (langgraph-checkpoint-sqlite): per step ``put_writes`` of the changed
     channel, then ``put`` of a checkpoint holding every channel's value, as LangGraph's loop
     does (two transactions).

   Printed: bytes on disk (database + WAL, after a checkpoint) at a quarter, half and all of the
   steps, the bytes each step added between those marks (linear in steps when they agree), and
   the median time per step.

2. Reads on a long session: ``state(s)`` (the latest value of 8 keys) and ``events(s,
   newest_first=True, limit=20)`` on sessions of 1,000 and 100,000 events (each step an event
   and a state write), medians of many calls; flat means the ratio stays near 1.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import journal

CHANNELS = {f"channel-{c}": "c" * 2000 for c in range(7)}


def scratch(step: int) -> str:
    return f"step {step}: " + "s" * 490


def file_bytes(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


def journal_run(path: Path, steps: int, marks: list[int]) -> tuple[dict[int, int], float]:
    sizes: dict[int, int] = {}
    times: list[float] = []
    with journal.open(path) as j:
        j.create_session("thread")
        j.set_state("thread", {**CHANNELS, "scratch": scratch(-1)})
        for step in range(steps):
            start = time.perf_counter()
            versions = {"scratch": step + 1}
            j.append_many(
                "thread",
                [("x.langgraph.checkpoint", {"step": step, "versions": versions})],
                state={"scratch": scratch(step)},
            )
            times.append(time.perf_counter() - start)
            if step + 1 in marks:
                j.checkpoint()
                sizes[step + 1] = file_bytes(path)
        assert j.state("thread", keys=["scratch"]) == {"scratch": scratch(steps - 1)}
    return sizes, statistics.median(times)


def saver_run(path: Path, steps: int, marks: list[int]) -> tuple[dict[int, int], float]:
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute("PRAGMA synchronous=FULL")
    values: dict[str, Any] = {**CHANNELS, "scratch": scratch(-1)}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = {name: 1 for name in values}
    config = saver.put({"configurable": {"thread_id": "thread", "checkpoint_ns": ""}}, checkpoint, {"step": -1}, {})
    sizes: dict[int, int] = {}
    times: list[float] = []
    for step in range(steps):
        start = time.perf_counter()
        values["scratch"] = scratch(step)
        saver.put_writes(config, [("scratch", values["scratch"])], task_id=f"task-{step}")
        version = saver.get_next_version(checkpoint["channel_versions"].get("scratch"), None)
        base = dict(checkpoint, channel_values=dict(values))
        base["channel_versions"] = dict(checkpoint["channel_versions"], scratch=version)
        checkpoint = create_checkpoint(base, None, step)
        config = saver.put(config, checkpoint, {"source": "loop", "step": step}, {"scratch": version})
        times.append(time.perf_counter() - start)
        if step + 1 in marks:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            sizes[step + 1] = file_bytes(path)
    conn.close()
    return sizes, statistics.median(times)


def long_session(path: Path, events: int) -> None:
    with journal.open(path, durability="normal") as j:
        j.create_session("s")
        j.set_state("s", {**CHANNELS, "scratch": scratch(-1)})
        batch = 100
        for start in range(0, events, batch):
            items = [("x.langgraph.write", {"step": k}) for k in range(start, start + batch)]
            j.append_many("s", items, state={"scratch": scratch(start)})
        j.checkpoint()


def read_costs(path: Path, calls: int) -> tuple[float, float]:
    with journal.open(path, readonly=True) as j:
        state_ms, tail_ms = [], []
        for _ in range(calls):
            start = time.perf_counter()
            state = j.state("s")
            state_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            tail = j.events("s", newest_first=True, limit=20)
            tail_ms.append((time.perf_counter() - start) * 1000)
        assert len(state) == 8 and len(tail) == 20
    return statistics.median(state_ms), statistics.median(tail_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    marks = [args.steps // 4, args.steps // 2, args.steps]
    result: dict[str, Any] = {"steps": args.steps}
    with tempfile.TemporaryDirectory() as tmp:
        runs: dict[str, list[tuple[dict[int, int], float]]] = {"journal": [], "SqliteSaver": []}
        for r in range(args.rounds):
            for name, run in (("journal", journal_run), ("SqliteSaver", saver_run))[:: 1 if r % 2 == 0 else -1]:
                runs[name].append(run(Path(tmp) / f"{name}-{r}.db", args.steps, marks))
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        for name, done in runs.items():
            sizes = done[0][0]
            result[name] = {
                "bytes": sizes,
                # What each step added, between two marks: linear in steps when these agree.
                "bytes per step": {
                    f"{a}-{b}": round((sizes[b] - sizes[a]) / (b - a)) for a, b in itertools.pairwise(marks)
                },
                "ms per step": statistics.median(t for _, t in done) * 1000,
            }
        result["bytes, SqliteSaver / journal"] = (
            result["SqliteSaver"]["bytes"][args.steps] / result["journal"]["bytes"][args.steps]
        )
        result["time per step, SqliteSaver / journal"] = (
            result["SqliteSaver"]["ms per step"] / result["journal"]["ms per step"]
        )
        reads = {}
        for events in (1_000, 100_000):
            path = Path(tmp) / f"long-{events}.db"
            long_session(path, events)
            reads[events] = read_costs(path, 300)
            print(f"built and read a {events}-event session", file=sys.stderr)
        result["state() ms"] = {n: r[0] for n, r in reads.items()}
        result["last 20 events ms"] = {n: r[1] for n, r in reads.items()}
        result["state() 100k / 1k"] = reads[100_000][0] / reads[1_000][0]
        result["last 20 events 100k / 1k"] = reads[100_000][1] / reads[1_000][1]
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"LangGraph-shaped workload: 8 channels, one (500 B) changed per step, {args.steps} steps; "
        f"medians of {args.rounds} rounds"
    )
    for name in ("journal", "SqliteSaver"):
        r = result[name]
        total = ", ".join(f"{m} steps {b:,} B" for m, b in r["bytes"].items())
        added = ", ".join(f"steps {span}: {b:,} B/step" for span, b in r["bytes per step"].items())
        print(f"  {name:12} {r['ms per step']:.3f} ms/step; on disk {total}; added {added}")
    print(f"  bytes on disk, SqliteSaver / journal: {result['bytes, SqliteSaver / journal']:.1f}x")
    print(f"  time per step, SqliteSaver / journal: {result['time per step, SqliteSaver / journal']:.2f}x")
    print("reads on a long session (medians of 300 calls)")
    print(
        f"  state() of 8 keys:           1k events {result['state() ms'][1_000]:.3f} ms, "
        f"100k {result['state() ms'][100_000]:.3f} ms"
        f"  ({result['state() 100k / 1k']:.2f}x)"
    )
    print(
        f"  events(newest_first, 20):    1k events {result['last 20 events ms'][1_000]:.3f} ms, "
        f"100k {result['last 20 events ms'][100_000]:.3f} ms  ({result['last 20 events 100k / 1k']:.2f}x)"
    )


if __name__ == "__main__":
    main()
