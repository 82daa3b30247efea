"""Append throughput of the journal against raw apsw and the peers, side by side in one run.

    python bench/append.py [--quick] [--json] [--peers openai-agents,langgraph-put_writes,...|none]

What is measured (DESIGN §11), each in a fresh file in a temporary directory (never the repo):

- durable append: ``Journal.append`` of one ``user_message`` (~200 bytes of JSON) with
  ``durability="full"``, against raw apsw ``BEGIN IMMEDIATE; INSERT; COMMIT`` of the same row
  into a bare table with the same columns and primary key, the same pragmas (WAL,
  synchronous=FULL, foreign_keys, 10 s busy timeout), the data JSON-encoded from the same dict.
  Target: journal time ≤ 1.10 × raw.
- the same with ``durability="normal"`` against raw at synchronous=NORMAL. Target ≤ 2 × raw.
- ``raw apsw, journal schema`` (information): raw apsw into a file made by the journal (its
  CHECKs, triggers, indexes and foreign key), so the gap splits into SQL-side and Python-side.
- batched append: ``append_many`` of 1000 events against raw ``executemany`` of the same rows in
  one transaction; rows/s. Target ≥ 0.40 × raw.
- many threads appending durably (``full``): 8 threads sharing one Journal, 8 threads with a
  Journal each on the same file, and 1 thread; appends/s of the whole job. Target (group commit)
  ≥ 3 × one thread. Raw apsw with 8 connections is shown for reference.
- the peers (see peers.py), one agent message per op at synchronous=FULL. Target: the journal's
  durable append is faster than each.

- ``raw apsw, autocommit INSERT`` (information): the INSERT alone as SQLite's autocommit
  transaction, into the bare table: what a lone journal append runs, minus the journal.

How: each contender first runs until its file's WAL has stopped growing (see ``warm_up``), so
all are measured in the steady state of a file in use. Then the contenders run in rounds; each
round runs every contender of a group once, in an order rotated every round, so machine noise
falls on all of them alike. The rounds are short (40 durable appends per contender), so that the
contenders compared in a round ran within a few tens of milliseconds of each other: the fsync
time of this shared disk drifts by more than the differences measured, on a scale of seconds.
Per-op times are taken with ``perf_counter_ns`` around each call. The table shows the median and
90th percentile over all rounds; a ratio is the median over rounds of the per-round ratio of
medians (paired by round).
Time ratios (lower is better) compare µs per op; rate ratios (higher is better) compare ops/s.
A peer that cannot be imported or set up here is listed as unavailable, with the reason.
Progress goes to stderr (and so does anything a peer prints); stdout has the table or the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import apsw
import contenders as c
from peers import PEERS, PeerUnavailable

import journal

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Settings:
    rounds: int  # rounds of the single-append group
    ops: int  # durable appends per contender per round
    normal_ops: int  # appends per contender per round under synchronous=NORMAL
    batch_rows: int
    batch_rounds: int
    batches: int  # batches per contender per round
    thread_rounds: int
    thread_total: int  # appends per job, split over the threads
    threads: int
    thread_timeout_s: float


# About 2 to 3 minutes on the 2-core machine, with the peers; QUICK about 20 s.
FULL = Settings(
    rounds=300,
    ops=40,
    normal_ops=200,
    batch_rows=1000,
    batch_rounds=25,
    batches=5,
    thread_rounds=20,
    thread_total=1600,
    threads=8,
    thread_timeout_s=120.0,
)
QUICK = Settings(
    rounds=50,
    ops=20,
    normal_ops=100,
    batch_rows=1000,
    batch_rounds=6,
    batches=3,
    thread_rounds=5,
    thread_total=400,
    threads=8,
    thread_timeout_s=60.0,
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
    verdict: str = "info"  # "pass", "fail", "info", or "unavailable"
    note: str = ""
    samples: int = 0


@dataclass
class Group:
    """Contenders measured against each other in the same rounds."""

    name: str
    contenders: list[Any] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    samples: dict[str, list[list[int]]] = field(default_factory=dict)  # name -> per round
    unit: int = 1  # ops per sample (rows per batch, appends per thread job)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- measuring --------------------------------------------------------------------------------


def measure(
    group: Group, *, rounds: int, ops: Callable[[str], int], warm_chunk: Callable[[str], int] | None = None
) -> None:
    """Run each contender ``ops(name)`` times per round, in a rotated order, for ``rounds`` rounds.

    The warm-up runs chunks of ``warm_chunk(name)`` ops (default: a quarter of a round's)."""
    for contender in group.contenders:
        warm_up(contender, warm_chunk(contender.name) if warm_chunk else max(1, ops(contender.name) // 4))
        group.samples[contender.name] = []
    n = len(group.contenders)
    for r in range(rounds):
        order = group.contenders[r % n :] + group.contenders[: r % n]
        for contender in order:
            group.samples[contender.name].append(contender.run(ops(contender.name)))
        if (r + 1) % max(1, rounds // 10) == 0 or r + 1 == rounds:
            log(f"  {group.name}: round {r + 1}/{rounds}")


def warm_up(contender: Any, chunk: int, *, max_chunks: int = 200) -> None:
    """Run until the file's WAL has stopped growing: the steady state of a file in use.

    A young WAL grows with every commit, and an fsync that must also persist the new file size
    costs about twice as much here (~370 µs against ~170 µs once the WAL has wrapped after its
    first checkpoint), so a contender measured while its WAL still grows would lose unfairly.
    """
    wal = contender.path + "-wal"
    for _ in range(max_chunks):
        before = os.path.getsize(wal) if os.path.exists(wal) else -1
        contender.run(chunk)
        if before == (os.path.getsize(wal) if os.path.exists(wal) else -1):
            return
    log(f"  {contender.name}: WAL still growing after warm-up")


def add(group: Group, name: str, make: Callable[[], Any]) -> None:
    """Set a contender up, or record why it cannot run here."""
    try:
        group.contenders.append(make())
    except PeerUnavailable as exc:
        group.unavailable[name] = str(exc)
        log(f"  {name}: unavailable: {exc}")
    except Exception as exc:
        group.unavailable[name] = f"setup failed: {type(exc).__name__}: {exc}"
        log(f"  {name}: setup failed: {exc!r}")


def close_all(group: Group) -> None:
    for contender in group.contenders:
        with contextlib.suppress(Exception):
            contender.close()


# -- summarising ------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def per_op_us(group: Group, name: str) -> list[float]:
    return [ns / 1000 / group.unit for rnd in group.samples[name] for ns in rnd]


def paired_ratio(group: Group, name: str, base: str, *, kind: str) -> float:
    """Median over rounds of (median of ``name`` / median of ``base``); inverted for rates."""
    ratios = []
    for mine, theirs in zip(group.samples[name], group.samples[base]):
        r = statistics.median(mine) / statistics.median(theirs)
        ratios.append(r if kind == "time" else 1 / r)
    return statistics.median(ratios)


def row_for(
    group: Group,
    contender: Any,
    *,
    vs: str | None = None,
    kind: str = "time",
    target: float | None = None,
    target_text: str | None = None,
    note: str = "",
) -> Row:
    """A table row; ``target`` is a maximum for time ratios and a minimum for rate ratios."""
    us = per_op_us(group, contender.name)
    median = statistics.median(us)
    row = Row(
        group.name,
        contender.name,
        contender.durability,
        contender.what,
        median,
        percentile(us, 0.9),
        1e6 / median,
        note=note,
        samples=sum(len(rnd) for rnd in group.samples[contender.name]),
    )
    if vs is not None:
        row.ratio, row.vs, row.ratio_kind = paired_ratio(group, contender.name, vs, kind=kind), vs, kind
    if target is not None:
        assert row.ratio is not None
        ok = row.ratio <= target if kind == "time" else row.ratio >= target
        row.target, row.verdict = target_text, ("pass" if ok else "fail")
    return row


def peer_row(group: Group, peer: Any) -> Row:
    """A peer's row; its ratio is the journal's durable append time over the peer's (< 1: journal faster)."""
    row = row_for(group, peer)
    row.ratio = paired_ratio(group, J_FULL, peer.name, kind="time")
    row.vs, row.ratio_kind, row.target = f"{J_FULL} / peer", "time", "< 1 (journal faster)"
    row.verdict = "pass" if row.ratio < 1 else "fail"
    return row


def unavailable_rows(group: Group) -> list[Row]:
    return [
        Row(group.name, name, "-", "-", None, None, None, verdict="unavailable", note=why)
        for name, why in group.unavailable.items()
    ]


# -- the groups -------------------------------------------------------------------------------

RAW_FULL, RAW_NORMAL = "raw apsw (full)", "raw apsw (normal)"
J_FULL, J_NORMAL = "journal (full)", "journal (normal)"
RAW_SCHEMA_FULL, RAW_SCHEMA_NORMAL = "raw apsw, journal schema (full)", "raw apsw, journal schema (normal)"
RAW_AUTO_FULL = "raw apsw, autocommit INSERT (full)"


def single_group(tmp: str, *, peers: list[str]) -> Group:
    group = Group("append")
    for name, sync in ((RAW_FULL, "FULL"), (RAW_NORMAL, "NORMAL")):
        path = c.new_path(tmp, name.replace(" ", "_"))
        c.create_bare_file(path)
        add(group, name, lambda n=name, p=path, s=sync: c.RawAppend(n, p, synchronous=s, session_id=c.new_id()))
    path = c.new_path(tmp, "raw_autocommit")
    c.create_bare_file(path)
    add(group, RAW_AUTO_FULL, lambda: c.RawAutocommit(RAW_AUTO_FULL, path, synchronous="FULL", session_id=c.new_id()))
    for name, sync in ((RAW_SCHEMA_FULL, "FULL"), (RAW_SCHEMA_NORMAL, "NORMAL")):
        path, sid = c.new_path(tmp, f"rawschema_{sync}"), c.new_id()
        c.create_journal_file(path, [sid])
        add(group, name, lambda n=name, p=path, s=sync, i=sid: c.RawAppend(n, p, synchronous=s, session_id=i))
    add(group, J_FULL, lambda: c.JournalAppend(J_FULL, c.new_path(tmp, "journal_full"), durability="full"))
    add(group, J_NORMAL, lambda: c.JournalAppend(J_NORMAL, c.new_path(tmp, "journal_normal"), durability="normal"))
    for key in peers:
        add(group, key, lambda k=key: PEERS[k](c.new_path(tmp, f"peer_{k}")))
    return group


def measure_single(group: Group, s: Settings) -> None:
    """Durable and normal contenders share rounds; normal ones do more ops (they are ~20× faster)."""
    fast = {RAW_NORMAL, J_NORMAL, RAW_SCHEMA_NORMAL}
    measure(
        group,
        rounds=s.rounds,
        ops=lambda name: s.normal_ops if name in fast else s.ops,
        warm_chunk=lambda name: 100,  # rounds are short; a chunk must outgrow the WAL's noise
    )


def single_rows(group: Group) -> list[Row]:
    by_name = {x.name: x for x in group.contenders}
    rows: list[Row] = []
    if RAW_FULL in by_name:
        rows.append(row_for(group, by_name[RAW_FULL], note="baseline"))
    if J_FULL in by_name:
        rows.append(row_for(group, by_name[J_FULL], vs=RAW_FULL, target=1.10, target_text="≤ 1.10× raw time"))
    if RAW_SCHEMA_FULL in by_name:
        rows.append(row_for(group, by_name[RAW_SCHEMA_FULL], vs=RAW_FULL, note="raw SQL into schema.sql's table"))
    if RAW_AUTO_FULL in by_name:
        rows.append(row_for(group, by_name[RAW_AUTO_FULL], vs=RAW_FULL, note="the INSERT alone, autocommit"))
    if RAW_NORMAL in by_name:
        rows.append(row_for(group, by_name[RAW_NORMAL], note="baseline"))
    if J_NORMAL in by_name:
        rows.append(row_for(group, by_name[J_NORMAL], vs=RAW_NORMAL, target=2.0, target_text="≤ 2× raw time"))
    if RAW_SCHEMA_NORMAL in by_name:
        rows.append(row_for(group, by_name[RAW_SCHEMA_NORMAL], vs=RAW_NORMAL, note="raw SQL into schema.sql's table"))
    peers = [x for x in group.contenders if x.name not in {r.name for r in rows}]
    if J_FULL in by_name:
        rows += [peer_row(group, peer) for peer in peers]
    return rows + unavailable_rows(group)


def batch_group(tmp: str, s: Settings) -> Group:
    group = Group("append_many", unit=s.batch_rows)
    raw_path, pre_path = c.new_path(tmp, "batch_raw"), c.new_path(tmp, "batch_raw_pre")
    c.create_bare_file(raw_path)
    c.create_bare_file(pre_path)
    add(
        group,
        "raw executemany",
        lambda: c.RawBatch("raw executemany", raw_path, rows=s.batch_rows, pre_encoded=False, session_id=c.new_id()),
    )
    add(
        group,
        "raw executemany, pre-encoded",
        lambda: c.RawBatch(
            "raw executemany, pre-encoded", pre_path, rows=s.batch_rows, pre_encoded=True, session_id=c.new_id()
        ),
    )
    add(
        group,
        "journal append_many",
        lambda: c.JournalBatch("journal append_many", c.new_path(tmp, "batch_journal"), rows=s.batch_rows),
    )
    return group


def batch_rows(group: Group) -> list[Row]:
    by_name = {x.name: x for x in group.contenders}
    base = "raw executemany"
    rows = [row_for(group, by_name[base], note="baseline; encodes each row's JSON from the dict")]
    rows.append(
        row_for(
            group,
            by_name["raw executemany, pre-encoded"],
            vs=base,
            kind="rate",
            note="JSON text made once, outside the timing",
        )
    )
    rows.append(
        row_for(
            group, by_name["journal append_many"], vs=base, kind="rate", target=0.40, target_text="≥ 0.40× raw rows/s"
        )
    )
    return rows


J_ONE, RAW_ONE = "journal, 1 thread", "raw apsw, 1 thread"
THREAD_CONFIGS = (  # (label, threads, mode): the baseline of each kind first
    (J_ONE, 1, "own"),
    ("journal, {n} threads, one shared Journal", None, "shared"),
    ("journal, {n} threads, a Journal each", None, "own"),
    (RAW_ONE, 1, "raw"),
    ("raw apsw, {n} threads, a connection each", None, "raw"),
)


def thread_group(tmp: str, s: Settings) -> Group:
    group = Group("threads", unit=s.thread_total)
    for i, (label, threads, mode) in enumerate(THREAD_CONFIGS):
        threads = threads or s.threads
        name, path = label.format(n=threads), c.new_path(tmp, f"threads_{i}")
        if mode == "raw":
            c.create_bare_file(path)
        add(
            group,
            name,
            lambda n=name, p=path, t=threads, m=mode: c.ThreadedAppend(
                n, p, threads=t, mode=m, total=s.thread_total, timeout_s=s.thread_timeout_s
            ),
        )
    return group


def measure_threads(group: Group, s: Settings) -> None:
    try:
        measure(group, rounds=s.thread_rounds, ops=lambda _: 1)
    except c.ThreadsStalled as exc:
        # Daemon threads may still hold a connection; report and leave the rest of the run alone.
        group.unavailable["threads"] = f"stalled: {exc}"
        group.samples.clear()


def thread_rows(group: Group) -> list[Row]:
    """Rates of whole jobs: the many-thread journal rows against one journal thread (target 3×)."""
    if not group.samples:
        return unavailable_rows(group)
    rows = []
    for contender in group.contenders:
        if contender.name in (J_ONE, RAW_ONE):
            rows.append(row_for(group, contender, note="baseline"))
        elif contender.name.startswith("journal"):
            rows.append(row_for(group, contender, vs=J_ONE, kind="rate", target=3.0, target_text="≥ 3× 1-thread rate"))
        else:
            rows.append(row_for(group, contender, vs=RAW_ONE, kind="rate", note="reference: no group commit"))
    for row in rows:
        row.note = (row.note + "; " if row.note else "") + "µs/op and ops/s are for the whole job"
    return rows + unavailable_rows(group)


# -- output -----------------------------------------------------------------------------------


def host() -> dict[str, Any]:
    """The cores, CPU, platform and Python a run had (the first keys of each bench's ``machine``)."""
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def machine() -> dict[str, Any]:
    return {
        **host(),
        "apsw": apsw.apsw_version(),
        "sqlite_apsw": apsw.sqlite_lib_version(),
        "sqlite_python_sqlite3": sqlite3.sqlite_version,
        "journal": getattr(journal, "__version__", None) or _dist_version("agent-journal"),
        "journal_commit": git(["describe", "--always", "--dirty"]),
        "peers": {name: _dist_version(name) for name in ("openai-agents", "langgraph-checkpoint-sqlite", "dbos")},
    }


def git(args: list[str]) -> str | None:
    """What a read-only git command prints in the repository, stripped; None if empty or git fails.

    ``git(["describe", "--always", "--dirty"])`` is the commit, ``-dirty`` if the work tree has changes."""
    try:
        out = subprocess.run(["git", "-C", REPO, *args], check=False, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[Row]) -> str:
    header = ("group", "contender", "median µs/op", "p90 µs", "ops/s", "ratio", "vs", "target", "verdict")
    lines = [header]
    for r in rows:
        lines.append(
            (
                r.group,
                r.name,
                _fmt(r.median_us, ",.1f"),
                _fmt(r.p90_us, ",.1f"),
                _fmt(r.ops_per_s, ",.0f"),
                _fmt(r.ratio, ".2f"),
                r.vs or "",
                r.target or "",
                r.verdict,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for i, line in enumerate(lines):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def durability_notes(rows: list[Row]) -> str:
    lines = ["What each contender did per op, and the durability it actually ran with (read back):"]
    for r in rows:
        if r.verdict == "unavailable":
            lines.append(f"  {r.name}: UNAVAILABLE — {r.note}")
        else:
            lines.append(f"  {r.name}: {r.what}\n      {r.durability}")
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------------


@contextlib.contextmanager
def scratch_dir(*, prefix: str = "journal-bench-") -> Iterator[str]:
    """A fresh temporary directory, removed at the end; never one inside the repository."""
    path = tempfile.mkdtemp(prefix=prefix)
    if os.path.realpath(path).startswith(os.path.realpath(REPO) + os.sep):
        raise SystemExit(f"refusing to write benchmark files inside the repository ({path}); set TMPDIR")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run(s: Settings, *, peers: list[str]) -> list[Row]:
    rows: list[Row] = []
    with scratch_dir() as tmp:
        log(f"files in {tmp}")
        group = single_group(tmp, peers=peers)
        try:
            measure_single(group, s)
            rows += single_rows(group)
        finally:
            close_all(group)
        group = batch_group(tmp, s)
        try:
            measure(group, rounds=s.batch_rounds, ops=lambda _: s.batches)
            rows += batch_rows(group)
        finally:
            close_all(group)
        group = thread_group(tmp, s)
        try:
            measure_threads(group, s)
            rows += thread_rows(group)
        finally:
            close_all(group)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds: well under a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument(
        "--peers", default=",".join(PEERS), help=f"comma-separated peers to run, or 'none' (default: {','.join(PEERS)})"
    )
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    peers = [] if args.peers == "none" else [p for p in args.peers.split(",") if p]
    unknown = set(peers) - set(PEERS)
    if unknown:
        parser.error(f"unknown peers: {', '.join(sorted(unknown))} (choose from {', '.join(PEERS)})")
    started = time.monotonic()
    # Peers may print on stdout; keep stdout for our own output.
    with contextlib.redirect_stdout(sys.stderr):
        rows = run(settings, peers=peers)
    elapsed = time.monotonic() - started
    command = "python bench/append.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    if args.json:
        doc = {
            "command": command,
            "machine": machine(),
            "settings": asdict(settings),
            "elapsed_s": round(elapsed, 1),
            "rows": [asdict(r) for r in rows],
        }
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        m = machine()
        print(f"{command}  ({elapsed:.0f} s)")
        print(
            f"{m['cores']} cores, {m['cpu']}; Python {m['python']}; apsw {m['apsw']} (SQLite {m['sqlite_apsw']}); "
            f"sqlite3 module SQLite {m['sqlite_python_sqlite3']}; journal at {m['journal_commit']}"
        )
        print()
        print(table(rows))
        print()
        print("ratio: time ratios (append rows) are µs/op over the baseline's, lower is better; rate ratios")
        print("(append_many, threads) are ops/s over the baseline's, higher is better; each is the median of")
        print("per-round ratios. Peer rows show journal (full) time / peer time: below 1, the journal is faster.")
        print()
        print(durability_notes(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
