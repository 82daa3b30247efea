"""The restart scan against its own queries, from 1,000 to 50,000 open turns (issue 27, item 4).

    python bench/scan.py [--open 1000 10000 50000] [--rounds 7] [--json]

For each count N, builds a journal of N sessions, each left mid-tool by a crash (a user
message, ``turn_start``, ``step_start``, an assistant message asking for two tool calls, the
first one dispatched, no result: ``restart.interrupted_turn``), and times ``scan()`` against raw
apsw running the very statements the scan runs (caught with an exec trace), fetching every row,
in one read transaction, with the journal's pragmas (``restart.scan_vs_raw``). Prints, per N,
the medians, the microseconds per open turn of each and their ratio. Targets: ``scan()`` at
most 2x its raw statements, and its cost per open turn flat from 1k to 50k.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from restart import interrupted_turn, scan_vs_raw

import journal


def build(path: Path, sessions: int) -> None:
    with journal.open(path, durability="normal") as j:
        for first in range(0, sessions, 1000):
            for s in range(first, min(sessions, first + 1000)):
                sid = f"user-{s:06d}"
                j.create_session(sid)
                j.append_many(sid, interrupted_turn(1))
        j.checkpoint()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--open", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="journal-bench-scan-") as tmp:
        for n in args.open:
            path = Path(tmp) / f"open-{n}.db"
            t = time.perf_counter()
            build(path, n)
            built = time.perf_counter() - t
            with journal.open(path, readonly=True) as j:
                assert len(j.scan().open_turns) == n
            scan, raw = scan_vs_raw(path, args.rounds)
            rows.append(
                {
                    "open_turns": n,
                    "scan_s": scan,
                    "raw_s": raw,
                    "scan_us_per_turn": scan / n * 1e6,
                    "raw_us_per_turn": raw / n * 1e6,
                    "ratio": scan / raw,
                    "build_s": built,
                }
            )
    if args.json:
        print(json.dumps({"command": "python bench/scan.py " + " ".join(sys.argv[1:]), "rows": rows}, indent=1))
        return
    print(
        f"{'open turns':>10} {'scan (ms)':>10} {'raw (ms)':>10} {'scan µs/turn':>13} {'raw µs/turn':>12} {'ratio':>6}"
    )
    for r in rows:
        print(
            f"{r['open_turns']:>10,} {r['scan_s'] * 1e3:>10.1f} {r['raw_s'] * 1e3:>10.1f} "
            f"{r['scan_us_per_turn']:>13.2f} {r['raw_us_per_turn']:>12.2f} {r['ratio']:>5.2f}x"
        )


if __name__ == "__main__":
    main()
