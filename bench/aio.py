"""The async face against the sync API: group commit for coroutines and for threads (issue 15).

    python bench/aio.py [--rounds R] [--appends N] [--postgres] [--json]

Each contender appends ``user_message`` events (~100 bytes of JSON) with ``durability="full"``,
in a fresh file of a temporary directory (``--postgres``: a fresh database of a server the
script starts, ``journal.testing.pgserver.PgServer(fsync=True)``, removed at the end), one event
per call:

- ``sync, 1 thread``: ``Journal.append`` in a loop (one autocommit INSERT and one fsync each);
- ``async, 1 coroutine``: ``await AsyncJournal.append`` in a loop (the writer thread's batch of
  one, BEGIN + INSERT + COMMIT);
- ``async, 64 coroutines``: 64 coroutines, each appending to its own session;
- ``to_thread, 64 tasks``: 64 coroutines calling the sync ``append`` through ``asyncio.to_thread``
  (what a user would write without the async face);
- ``sync, 8 threads, shared Journal``: 8 threads sharing one ``Journal`` (its group commit);
- ``sync, 1 thread (threads' baseline)`` is the first contender.

Rounds interleave the contenders (their order rotated each round); each figure is the median
of the per-round rate, and a ratio the median of the per-round ratios. The fsyncs per append of
the async face are its commits (batches) over its appends: under ``full`` each commit is one
fsync of the WAL.

The loop's lag is measured in the ``async, 64 coroutines`` contender: a probe coroutine sleeps
1 ms again and again while the 64 append, and each wake-up later than asked is a lag. The
figures are the worst lag of a round, its 99th percentile and its median (each the median over
the rounds; a round gives a few hundred samples, or fewer on a slow disk). They
depend on the machine's load, which is why they are measured here and not asserted in a test
(``tests/test_aio.py`` asserts what does not: no database call runs on the loop thread).

Targets (issue 15, DESIGN §11 and §13): 64 coroutines ≥ 5× one coroutine; the async face's lone
append ≤ 1.2× the sync append's time; 8 threads sharing a Journal ≥ 3× one thread; the loop's
worst lag under the 64 coroutines ≤ 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import journal
import journal.aio

DATA = {"content": "the user asks the agent something of ordinary length, about a hundred bytes."}


def sync_one(path: Path | str, n: int) -> tuple[float, int]:
    with journal.open(path) as j:
        j.create_session("s")
        start = time.perf_counter()
        for _ in range(n):
            j.append("s", "user_message", DATA)
        return time.perf_counter() - start, n


def sync_threads(path: Path | str, n: int, threads: int = 8) -> tuple[float, int]:
    with journal.open(path) as j:
        for t in range(threads):
            j.create_session(f"s{t}")
        each = max(n // threads, 1)
        barrier = threading.Barrier(threads + 1)

        def work(t: int) -> None:
            barrier.wait()
            for _ in range(each):
                j.append(f"s{t}", "user_message", DATA)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        barrier.wait()
        start = time.perf_counter()
        for w in workers:
            w.join()
        return time.perf_counter() - start, each * threads


def async_run(
    path: Path | str, n: int, tasks: int, *, to_thread: bool = False, probe: bool = False
) -> tuple[float, int, int, list[float]]:
    """Elapsed seconds, appends, commits and (with ``probe``) the loop's lags in seconds."""

    async def main() -> tuple[float, int, int, list[float]]:
        async with journal.aio.open(path) as aj:
            for t in range(tasks):
                await aj.create_session(f"s{t}")
            each = max(n // tasks, 1)
            sync = journal.open(path) if to_thread else None
            before = aj.commits

            async def agent(t: int) -> None:
                for _ in range(each):
                    if sync is not None:
                        await asyncio.to_thread(sync.append, f"s{t}", "user_message", DATA)
                    else:
                        await aj.append(f"s{t}", "user_message", DATA)

            lags: list[float] = []
            running = True

            async def probing() -> None:
                while running:
                    asked = time.perf_counter()
                    await asyncio.sleep(0.001)
                    lags.append(max(time.perf_counter() - asked - 0.001, 0.0))

            prober = asyncio.ensure_future(probing()) if probe else None
            start = time.perf_counter()
            await asyncio.gather(*(agent(t) for t in range(tasks)))
            elapsed = time.perf_counter() - start
            running = False
            if prober is not None:
                await prober
            if sync is not None:
                sync.close()
            return elapsed, each * tasks, aj.commits - before, lags

    return asyncio.run(main())


CONTENDERS: dict[str, Callable[[Path | str, int], tuple]] = {
    "sync, 1 thread": sync_one,
    "async, 1 coroutine": lambda p, n: async_run(p, n, 1),
    "async, 64 coroutines": lambda p, n: async_run(p, n * 4, 64, probe=True),
    "to_thread, 64 tasks": lambda p, n: async_run(p, n * 4, 64, to_thread=True),
    "sync, 8 threads, shared Journal": lambda p, n: sync_threads(p, n * 4),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--appends", type=int, default=200, help="appends of a lone writer per round (x4 for many)")
    parser.add_argument("--postgres", action="store_true", help="on a PostgreSQL server (fsync on), not SQLite")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.postgres:
            from journal.testing.pgserver import PgServer

            server = stack.enter_context(PgServer(fsync=True))
            run(args, lambda name: server.create_database(name))
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            run(args, lambda name: Path(tmp) / f"{name}.db")


def run(args: argparse.Namespace, where: Callable[[str], Any]) -> None:
    """The rounds, each contender's journal at ``where(name)`` (a fresh file or database)."""
    rates: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    fsyncs: list[float] = []
    worst_lags: list[float] = []
    p99_lags: list[float] = []
    p50_lags: list[float] = []
    names = list(CONTENDERS)
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            out = CONTENDERS[name](where(f"r{r}c{names.index(name)}"), args.appends)
            rates[name].append(out[1] / out[0])
            if name == "async, 64 coroutines":
                fsyncs.append(out[2] / out[1])
                lags = sorted(out[3]) or [0.0]
                worst_lags.append(lags[-1] * 1000)
                p99_lags.append(lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1000)
                p50_lags.append(lags[len(lags) // 2] * 1000)
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=True))

    result = {
        "rates": {name: statistics.median(values) for name, values in rates.items()},
        "64 coroutines / 1 coroutine": ratio("async, 64 coroutines", "async, 1 coroutine"),
        "async lone append time / sync": ratio("sync, 1 thread", "async, 1 coroutine"),
        "8 threads shared / 1 thread": ratio("sync, 8 threads, shared Journal", "sync, 1 thread"),
        "to_thread 64 / 1 coroutine": ratio("to_thread, 64 tasks", "async, 1 coroutine"),
        "fsyncs per append, 64 coroutines": statistics.median(fsyncs),
        "loop lag, worst (ms), 64 coroutines": statistics.median(worst_lags),
        "loop lag, p99 (ms), 64 coroutines": statistics.median(p99_lags),
        "loop lag, median (ms), 64 coroutines": statistics.median(p50_lags),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    backend = "PostgreSQL, fsync on" if args.postgres else "SQLite"
    print(f"durable appends (full), {backend}, medians of {args.rounds} rounds")
    for name, rate in result["rates"].items():
        print(f"  {name:36} {rate:10,.0f} appends/s")
    targets = {
        "64 coroutines / 1 coroutine": ("≥ 5×", lambda v: v >= 5),
        "async lone append time / sync": ("≤ 1.2×", lambda v: v <= 1.2),
        "8 threads shared / 1 thread": ("≥ 3×", lambda v: v >= 3),
        "to_thread 64 / 1 coroutine": ("info", None),
        "fsyncs per append, 64 coroutines": ("info", None),
        "loop lag, worst (ms), 64 coroutines": ("≤ 5 ms", lambda v: v <= 5),
        "loop lag, p99 (ms), 64 coroutines": ("info", None),
        "loop lag, median (ms), 64 coroutines": ("info", None),
    }
    for key, (target, ok) in targets.items():
        verdict = "" if ok is None else ("met" if ok(result[key]) else "MISSED")
        print(f"  {key:36} {result[key]:10.2f}  {target} {verdict}")


if __name__ == "__main__":
    main()
