"""What ``journal serve`` costs: its RSS and CPU on a session of large events, phase by phase;
with ``--pages``, how long its pages take on a big file.

    python bench/serve.py [--events 20] [--mib 4] [--idle-s 10] [--rounds 3] [--json]
    python bench/serve.py --pages [--sessions 100000] [--long-events 50000] [--runs 7] [--json]
    python bench/serve.py --timeline [--timeline-events 100000] [--runs 5] [--json]

Builds a journal under a temporary directory with one session of ``--events`` events (user and
assistant messages in turn) whose content is ``--mib`` MiB each, starts ``journal serve --db FILE
--port 0`` as a child process (a fresh one each round), and measures the server process from
``/proc/PID``:

- ``start``: after it printed its address (nothing requested yet);
- ``page``: one view of the session page (``/sessions/big``: the end of its log);
- ``msg_page``: one view of its messages page (``/sessions/big?view=messages``: its last 200
  messages, read cut in SQL);
- ``messages``: one messages call of the JSON API (``/api/sessions/big?view=messages``), its body
  read to the end;
- ``idle``: one live follower (``/sessions/big/events`` from the end of the log) held open for
  ``--idle-s`` seconds while nothing is appended.

For each phase: the peak RSS during it (``VmHWM``, reset before the phase through
``/proc/PID/clear_refs``; where the kernel refuses that, the peak so far), the RSS after it
(``VmRSS``) and the CPU seconds it took (``utime + stime`` of ``/proc/PID/stat``); overall, the
process's peak RSS and CPU. Medians over ``--rounds`` rounds. Linux only (``/proc``).

``--pages`` builds a file of ``--sessions`` sessions, one of ``--long-events`` events (turns of
four) and one of ten messages of ``--mib`` MiB, serves it in this process and times each page
(the sessions listing, a long log's end and middle, its messages and provider views, the views
of the large messages, API reads): the median over ``--runs`` requests of the server's time
(its ``Server-Timing`` header) and of the wall time, after one warming request. Then the time
from an append returning to the live stream sending the event (``live``), over ``--runs``
appends. The tests check what does not depend on the machine (tests/test_serve.py: a page's
statements and rows do not grow with the file); the times are measured here, with the load.

``--timeline`` builds one session of ``--timeline-events`` events (turns of eleven: a user
message, a step with a tool call, a step with the answer; every 50th call an error, one turn in
the middle killed mid-call and recovered) and measures its timeline (``journal.serve.timeline``:
the default window, its last 20,000 events, and the widest, 100,000 from seq 0) in a fresh
child process each run: wall and CPU seconds and the child's
peak RSS (``ru_maxrss``, which includes the interpreter and the library: the RSS of a child that
only opens the journal is given beside it), medians of ``--runs``; then once under
``tracemalloc``, its peak of Python memory. Then, served in this process, the timeline page,
its JSON and the page of one aggregated lane (``?since=&until=``), as ``--pages`` times pages.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import journal

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")
PHASES = ("start", "page", "msg_page", "messages", "idle")


def build(db: Path, events: int, mib: int) -> None:
    content = "x" * (mib * 1024 * 1024 - 64)
    with journal.open(db, durability="normal") as j:
        j.create_session("big")
        for i in range(events):
            kind = "user_message" if i % 2 == 0 else "assistant_message"
            j.append("big", kind, {"content": f"{i} " + content})


def build_wide(db: Path, sessions: int, events: int, mib: int) -> None:
    """``sessions`` sessions, ``long`` of ``events`` events (turns of four), and ``big``: ten
    messages of ``mib`` MiB (the cut reads of the messages and provider pages)."""
    with journal.open(db, durability="normal") as j:
        for i in range(sessions):
            j.create_session(f"s{i:06d}", meta={"n": i})
        j.create_session("long")
        items: list[tuple[str, dict[str, Any]]] = []
        for turn in range(1, events // 4 + 1):
            items += [
                ("turn_start", {"turn": turn}),
                ("user_message", {"content": f"question {turn}"}),
                ("assistant_message", {"content": "an answer " * 10, "tool_calls": []}),
                ("turn_end", {"turn": turn, "steps": 0, "reason": "complete"}),
            ]
            if len(items) >= 2000:
                j.append_many("long", items)
                items = []
        if items:
            j.append_many("long", items)
    build(db, 10, mib)


def pages_table(sessions: int, long_events: int, mib: int) -> list[tuple[str, str, str]]:
    """``(what, path, a string the answer holds)`` of each page timed."""
    middle, last = sessions // 2, sessions - 1
    return [
        (f"sessions page (first of {sessions:,})", "/", f"s{min(49, last):06d}"),
        (f"sessions page (after the {middle:,}th)", f"/?after=s{middle - 1:06d}", f"s{min(middle + 49, last):06d}"),
        ("sessions page (prefix)", f"/?prefix=s{last // 100:04d}", "s"),
        (f"{long_events:,}-event session page (its end)", "/sessions/long", f'id="e{long_events - 1}"'),
        (f"{long_events:,}-event session page (middle)", f"/sessions/long?since={long_events // 2}", 'id="e'),
        (f"{long_events:,}-event session, messages view", "/sessions/long?view=messages", "question"),
        (f"{long_events:,}-event session, provider view", "/sessions/long?view=provider", "question"),
        (f"10 messages of {mib} MiB, messages view", "/sessions/big?view=messages", "more stored"),
        (f"10 messages of {mib} MiB, provider view", "/sessions/big?view=provider", "more stored"),
        (f"API: {long_events:,}-event session, tail 200", "/api/sessions/long?tail=200", '"seq": '),
        ("API: a page of 1,000 sessions", f"/api/sessions?limit=1000&after=s{middle:06d}", '"id": '),
    ]


def timed_get(port: int, path: str) -> tuple[float, float, bytes]:
    """``(server ms, wall ms, body)`` of one GET (the server's time: its Server-Timing)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        started = time.perf_counter()
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
        got = conn.getresponse()
        body = got.read()
        wall = (time.perf_counter() - started) * 1000
        if got.status != 200:
            raise RuntimeError(f"{path}: {got.status} {body[:200]!r}")
        server = re.fullmatch(r"app;dur=([0-9.]+)", got.headers["Server-Timing"] or "")
        return float(server.group(1)) if server else float("nan"), wall, body
    finally:
        conn.close()


def live_ms(db: Path, port: int, runs: int) -> list[float]:
    """For each of ``runs`` appends to ``long``: ms from the append returning (another
    connection, as another process would) to the live stream sending the event."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out: list[float] = []
    with journal.open(db) as writer:
        since = writer.count("long")
        conn.request("GET", f"/sessions/long/events?since={since}", headers={"Host": f"127.0.0.1:{port}"})
        got = conn.getresponse()
        if got.status != 200:
            raise RuntimeError(f"live stream: {got.status}")
        got.readline()  # retry: ...
        for i in range(runs):
            writer.append("long", "user_message", {"content": f"live {i}"})
            appended = time.perf_counter()
            while not (line := got.readline()).startswith(b"data: "):
                if not line:
                    raise RuntimeError("the live stream ended")
            out.append((time.perf_counter() - appended) * 1000)
            time.sleep(0.2)  # the stream waits again before the next append
    conn.close()
    return out


def run_pages(args: argparse.Namespace) -> dict[str, Any]:
    from journal.serve.app import run

    with tempfile.TemporaryDirectory(prefix="journal-bench-serve-") as directory:
        db = Path(directory) / "wide.db"
        started = time.perf_counter()
        build_wide(db, args.sessions, args.long_events, args.mib)
        built_s = time.perf_counter() - started
        viewer = run(str(db), host="127.0.0.1", port=0)
        try:
            rows = []
            for what, path, expected in pages_table(args.sessions, args.long_events, args.mib):
                timed_get(viewer.port, path)  # warm the pool and the page cache
                runs = [timed_get(viewer.port, path) for _ in range(args.runs)]
                body = runs[-1][2]
                if expected.encode() not in body:
                    raise RuntimeError(f"{path}: {expected!r} not in the answer")
                rows.append(
                    {
                        "page": what,
                        "path": path,
                        "server_ms": round(statistics.median(r[0] for r in runs), 2),
                        "wall_ms": round(statistics.median(r[1] for r in runs), 2),
                        "bytes": len(body),
                    }
                )
            live = live_ms(db, viewer.port, args.runs)
        finally:
            viewer.shutdown()
            viewer.server_close()
    return {
        "sessions": args.sessions,
        "long_events": args.long_events,
        "runs": args.runs,
        "build_s": round(built_s, 1),
        "load_average": load_average(),
        "pages": rows,
        "live_ms": {"median": round(statistics.median(live), 1), "max": round(max(live), 1)},
    }


def build_timeline(db: Path, events: int) -> None:
    """``long``: ``events`` events in turns of eleven, one of them crashed and recovered."""
    with journal.open(db, durability="normal") as j:
        j.create_session("long")
        items: list[tuple[str, dict[str, Any]]] = []
        turn, written, crashed = 0, 0, False
        while written + 11 <= events:
            turn += 1
            if not crashed and written >= events // 2:  # a real crash: dispatched, no result, recovered
                j.append_many("long", items)
                items, crashed = [], True
                started = j.turn_start("long")
                j.step_start(started)
                started.assistant("", tool_calls=[{"id": f"c{turn}", "name": "wire_money", "arguments": {"cents": 1}}])
                started.dispatch(f"c{turn}")
                j.recover("long")
                written = j.count("long")
                continue
            call = {"id": f"c{turn}", "name": f"tool_{turn % 7}", "arguments": {"q": "x" * 200}}
            items += [
                ("turn_start", {"turn": turn}),
                ("user_message", {"content": f"question {turn} " + "q" * 300}),
                ("step_start", {"turn": turn, "step": 1}),
                ("assistant_message", {"content": "let me look", "tool_calls": [call], "stop_reason": "tool_use"}),
                ("tool_call", call),
                ("tool_result", {"tool_call_id": call["id"], "content": "found " * 100, "is_error": turn % 50 == 0}),
                ("step_end", {"turn": turn, "step": 1, "outcome": "ok"}),
                ("step_start", {"turn": turn, "step": 2}),
                ("assistant_message", {"content": "an answer " * 30, "stop_reason": "stop"}),
                ("step_end", {"turn": turn, "step": 2, "outcome": "ok"}),
                ("turn_end", {"turn": turn, "steps": 2, "reason": "complete"}),
            ]
            written += 11
            if len(items) >= 2200:
                j.append_many("long", items)
                items = []
        if items:
            j.append_many("long", items)


TIMELINE_CHILD = """
import json, resource, sys, time, tracemalloc
import journal
from journal.serve.timeline import timeline
db, session_id, how, since = sys.argv[1:5]
with journal.open(db, readonly=True) as j:
    j.count(session_id)
    opened_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if how == "trace":
        tracemalloc.start()
    started, cpu = time.perf_counter(), time.process_time()
    drawn = None if how == "open" else timeline(j, session_id, since=None if since == "-" else int(since))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(json.dumps({
        "wall_s": wall, "cpu_s": cpu, "opened_rss_kib": opened_kib,
        "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "traced_peak_kib": tracemalloc.get_traced_memory()[1] // 1024 if how == "trace" else None,
        "events": drawn and drawn.events, "lanes": drawn and len(drawn.lanes),
        "elements": drawn and drawn.elements, "aggregated": drawn and drawn.aggregated,
    }))
"""


def timeline_child(db: Path, how: str, since: int | None = None) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-c", TIMELINE_CHILD, str(db), "long", how, "-" if since is None else str(since)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout)


def run_timeline(args: argparse.Namespace) -> dict[str, Any]:
    from journal.serve.app import run

    with tempfile.TemporaryDirectory(prefix="journal-bench-timeline-") as directory:
        db = Path(directory) / "timeline.db"
        started = time.perf_counter()
        build_timeline(db, args.timeline_events)
        built_s = time.perf_counter() - started
        timeline_child(db, "run", 0)  # warm the page cache
        passes = {}
        for name, since in (("default", None), ("widest", 0)):  # the last 20,000 events; from seq 0
            runs = [timeline_child(db, "run", since) for _ in range(args.runs)]
            traced = timeline_child(db, "trace", since)
            passes[name] = {
                "drawn": {k: runs[0][k] for k in ("events", "lanes", "elements", "aggregated")},
                "wall_s": round(statistics.median(r["wall_s"] for r in runs), 2),
                "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 2),
                "rss_kib": max(r["rss_kib"] for r in runs),
                "traced_peak_kib": traced["traced_peak_kib"],
            }
        opened = timeline_child(db, "open")
        viewer = run(str(db), host="127.0.0.1", port=0)
        try:
            doc = json.loads(timed_get(viewer.port, "/api/sessions/long/timeline?since=0")[2])
            lane = doc["lanes"][len(doc["lanes"]) // 2]
            zoom = f"/sessions/long/timeline?since={lane['seq']}&until={lane['end_seq'] + 1}"
            rows = []
            for what, path, expected in (
                ("the timeline page (its last 20,000 events)", "/sessions/long/timeline", "svg"),
                ("its JSON", "/api/sessions/long/timeline", '"lanes"'),
                ("the timeline page from seq 0 (100,000 events)", "/sessions/long/timeline?since=0", "svg"),
                ("its JSON", "/api/sessions/long/timeline?since=0", '"lanes"'),
                (f"one aggregated lane's timeline ({lane['end_seq'] - lane['seq'] + 1} events)", zoom, "data-call-id"),
            ):
                timed = [timed_get(viewer.port, path) for _ in range(args.runs)]
                if expected.encode() not in timed[-1][2]:
                    raise RuntimeError(f"{path}: {expected!r} not in the answer")
                rows.append(
                    {
                        "page": what,
                        "path": path,
                        "server_ms": round(statistics.median(r[0] for r in timed), 1),
                        "wall_ms": round(statistics.median(r[1] for r in timed), 1),
                        "bytes": len(timed[-1][2]),
                    }
                )
        finally:
            viewer.shutdown()
            viewer.server_close()
    return {
        "events": args.timeline_events,
        "runs": args.runs,
        "build_s": round(built_s, 1),
        "load_average": load_average(),
        "passes": passes,
        "opened_rss_kib": opened["rss_kib"],
        "pages": rows,
    }


def report_timeline(report: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"the timeline of a {report['events']:,}-event session (built in {report['build_s']} s), medians of "
        f"{report['runs']} runs; load average {report['load_average']}; a child that only opens the journal: "
        f"peak RSS {report['opened_rss_kib'] / 1024:.1f} MiB"
    )
    for name, p in report["passes"].items():
        d = p["drawn"]
        print(
            f"  {name:8} {d['events']:,} events, {d['lanes']} lanes, {d['elements']} elements "
            f"(aggregated: {d['aggregated']}): {p['wall_s']} s wall, {p['cpu_s']} s CPU in a fresh child, "
            f"its peak RSS {p['rss_kib'] / 1024:.1f} MiB, tracemalloc peak {p['traced_peak_kib'] / 1024:.1f} MiB"
        )
    print(f"  {'page':48} {'server ms':>10} {'wall ms':>9} {'bytes':>9}")
    for row in report["pages"]:
        print(f"  {row['page']:48} {row['server_ms']:10.1f} {row['wall_ms']:9.1f} {row['bytes']:9d}")


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (Linux 4.0+: ``clear_refs`` 5)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def get(port: int, path: str) -> int:
    """GET ``path``, read the body to its end; returns its length in bytes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
        got = conn.getresponse()
        size = 0
        while chunk := got.read(1 << 20):
            size += len(chunk)
        if got.status != 200:
            raise RuntimeError(f"{path}: {got.status}")
        return size
    finally:
        conn.close()


def follow(port: int, path: str, seconds: float) -> int:
    """Hold a live stream open for ``seconds``; returns the bytes it sent."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=seconds + 30)
    conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
    got = conn.getresponse()
    if got.status != 200:
        raise RuntimeError(f"{path}: {got.status}")
    received = [0]

    def drain() -> None:
        try:
            while chunk := got.read1(65536):
                received[0] += len(chunk)
        except Exception:
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    time.sleep(seconds)
    if conn.sock is not None:
        conn.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader; the server sees the client go
    conn.close()
    reader.join(timeout=5)
    return received[0]


def one_round(db: Path, events: int, idle_s: float) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-m", "journal.cli", "serve", "--db", str(db), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if found is None:
            raise RuntimeError(f"no address printed: {line!r}")
        port, pid = int(found.group(1)), child.pid
        out: dict[str, Any] = {}
        resettable = True

        def phase(name: str, work: Any) -> None:
            nonlocal resettable
            resettable = reset_peak(pid) and resettable
            cpu, started = cpu_s(pid), time.perf_counter()
            size = work()
            out[name] = {
                "peak_rss_kib": status_kib(pid, "VmHWM"),
                "rss_kib": status_kib(pid, "VmRSS"),
                "cpu_s": round(cpu_s(pid) - cpu, 3),
                "wall_s": round(time.perf_counter() - started, 3),
                "bytes": size,
            }

        out["start"] = {
            "peak_rss_kib": status_kib(pid, "VmHWM"),
            "rss_kib": status_kib(pid, "VmRSS"),
            "cpu_s": round(cpu_s(pid), 3),
            "wall_s": 0.0,
            "bytes": 0,
        }
        phase("page", lambda: get(port, "/sessions/big"))
        phase("msg_page", lambda: get(port, "/sessions/big?view=messages"))
        phase("messages", lambda: get(port, "/api/sessions/big?view=messages"))
        phase("idle", lambda: follow(port, f"/sessions/big/events?since={events}", idle_s))
        out["overall"] = {
            "peak_rss_kib": max(out[p]["peak_rss_kib"] for p in PHASES),
            "cpu_s": round(cpu_s(pid), 3),
        }
        out["peak_reset"] = resettable
        return out
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--mib", type=int, default=4)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pages", action="store_true", help="time the pages on a big file instead")
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--long-events", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--timeline", action="store_true", help="measure a long session's timeline instead")
    parser.add_argument("--timeline-events", type=int, default=100_000)
    args = parser.parse_args()
    if args.timeline:
        report_timeline(run_timeline(args), as_json=args.json)
        return
    if args.pages:
        report_pages(run_pages(args), as_json=args.json)
        return
    with tempfile.TemporaryDirectory(prefix="journal-bench-serve-") as directory:
        db = Path(directory) / "big.db"
        build(db, args.events, args.mib)
        rounds = [one_round(db, args.events, args.idle_s) for _ in range(args.rounds)]
    median: dict[str, Any] = {}
    for name in (*PHASES, "overall"):
        keys = rounds[0][name].keys()
        median[name] = {k: statistics.median(r[name][k] for r in rounds) for k in keys}
    report = {
        "events": args.events,
        "mib_each": args.mib,
        "idle_s": args.idle_s,
        "rounds": args.rounds,
        "peak_reset": all(r["peak_reset"] for r in rounds),
        "median": median,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"journal serve on one session of {args.events} events of {args.mib} MiB, medians of {args.rounds} rounds"
        + ("" if report["peak_reset"] else " (peak RSS not reset between phases: peaks so far)")
    )
    print(f"  {'phase':10} {'peak RSS MiB':>13} {'RSS after MiB':>14} {'CPU s':>8} {'wall s':>8} {'bytes':>12}")
    for name in PHASES:
        m = median[name]
        print(
            f"  {name:10} {m['peak_rss_kib'] / 1024:13.1f} {m['rss_kib'] / 1024:14.1f} {m['cpu_s']:8.2f} "
            f"{m['wall_s']:8.2f} {int(m['bytes']):12d}"
        )
    o = median["overall"]
    print(f"  {'overall':10} {o['peak_rss_kib'] / 1024:13.1f} {'':14} {o['cpu_s']:8.2f}")


def report_pages(report: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"journal serve pages on {report['sessions']:,} sessions and a {report['long_events']:,}-event session "
        f"(built in {report['build_s']} s), medians of {report['runs']} requests; load average {report['load_average']}"
    )
    print(f"  {'page':48} {'server ms':>10} {'wall ms':>9} {'bytes':>9}")
    for row in report["pages"]:
        print(f"  {row['page']:48} {row['server_ms']:10.1f} {row['wall_ms']:9.1f} {row['bytes']:9d}")
    live = report["live_ms"]
    print(f"  {'live: an append to the stream sending it':48} {live['median']:10.1f} (max {live['max']} ms)")


if __name__ == "__main__":
    main()
