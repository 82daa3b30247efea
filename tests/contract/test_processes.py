"""The log across processes: concurrent writers (G4), SIGKILL mid-append (G1), live readers."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

import journal

from ..conftest import python_child, release_together, run_child

WRITER = """
import sys, journal
path, session, worker, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with journal.open(path) as j:
    for i in range(n):
        j.append(session, "x.write", {"worker": worker, "i": i})
print("done")
"""


def test_g4_four_processes_appending_500_each_get_contiguous_seqs(db_path: Path) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
    children = [python_child(WRITER, str(db_path), "s", str(w), "500") for w in range(4)]
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        assert out.strip() == "done"
    with journal.open(db_path) as j:
        events = j.events("s")
        assert [e.seq for e in events] == list(range(2000))
        for worker in range(4):
            mine = [e.data["i"] for e in events if e.data["worker"] == worker]
            assert mine == list(range(500))  # each writer's appends in its own order
        assert j.integrity_check() == ["ok"]


APPENDER = """
import os, sys, journal
path, side, durability = sys.argv[1], sys.argv[2], sys.argv[3]
fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
# (a PostgreSQL server checkpoints its own log: the option is a file's)
wal = {} if path.startswith("postgresql://") else {"checkpoint_pages": 50}
with journal.open(path, durability=durability, **wal) as j:
    if j.count("s") == 0:
        pass
    print("ready", flush=True)
    i = 0
    while True:
        event = j.append("s", "x.write", {"i": i, "pad": "p" * (i % 300)})
        os.write(fd, b"%d\\n" % event.seq)
        i += 1
"""


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_g1_sigkill_mid_append_loses_no_returned_append(db_path: Path, tmp_path: Path, durability: str) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
    rng = random.Random(durability)
    side = tmp_path / "returned.txt"
    for _ in range(3):
        child = python_child(APPENDER, str(db_path), str(side), durability)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.4))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        child.stderr.close()
    returned = [int(line) for line in side.read_text().split()]
    assert returned, "the child never appended"
    with journal.open(db_path) as j:
        assert j.integrity_check() == ["ok"]
        seqs = [e.seq for e in j.events("s")]
    assert seqs == list(range(len(seqs)))
    assert set(returned) <= set(seqs)


READER = """
import sys, time, journal
path, want = sys.argv[1], int(sys.argv[2])
seen = []
deadline = time.monotonic() + 120
with journal.open(path, readonly=True) as r:
    while len(seen) < want and time.monotonic() < deadline:
        seen.extend(e.data["i"] for e in r.events("s", since=len(seen)))
        time.sleep(0.001)
print(",".join(map(str, seen)))
"""


def test_a_reader_in_another_process_sees_every_committed_event_while_a_writer_appends(db_path: Path) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
        reader = python_child(READER, str(db_path), "300")
        for i in range(300):
            j.append("s", "x.write", {"i": i})
        out, err = reader.communicate(timeout=180)
    assert reader.returncode == 0, err
    assert [int(x) for x in out.strip().split(",")] == list(range(300))


def test_durable_appends_are_visible_to_a_fresh_process(db_path: Path) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "hello"})
    done = run_child(
        "import sys, journal\nwith journal.open(sys.argv[1]) as j: print(j.events('s')[0].data['content'])",
        str(db_path),
    )
    assert done.stdout.strip() == "hello", done.stderr


RACER = """
import json, os, sys, time, journal
path, racer, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with journal.open(path) as j:
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    r = j.put_result("s", "c1", f"racer {racer}")
    print(json.dumps({"won": r.won, "winner": r.event.seq, "content": r.event.data["content"]}))
"""


def test_g5_eight_processes_racing_put_result_yield_one_result_and_agree_on_the_winner(
    db_path: Path, tmp_path: Path
) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
        j.append("s", "assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": "t", "arguments": {}}]})
    go = tmp_path / "go"
    racers = [python_child(RACER, str(db_path), str(i), str(go)) for i in range(8)]
    release_together(racers, go)
    reports = []
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        reports.append(json.loads(out))
    assert sum(r["won"] for r in reports) == 1
    assert len({(r["winner"], r["content"]) for r in reports}) == 1
    with journal.open(db_path) as j:
        events = j.events("s")
    results = [e for e in events if e.type == "tool_result"]
    late = sorted(e.data["content"] for e in events if e.type == "tool_result_late")
    assert len(results) == 1 and results[0].data["content"] == reports[0]["content"]
    assert late == sorted(f"racer {i}" for i in range(8) if f"racer {i}" != results[0].data["content"])
