"""Many workers, one queue (DESIGN §16): worker processes claiming submissions from one journal
each process every submission once, in each session's order, and no busy error escapes. On
PostgreSQL the claimers pass over each other's rows (FOR UPDATE SKIP LOCKED) and write different
sessions at once; on SQLite they take turns at the file's write lock."""

from __future__ import annotations

import json

import journal
from tests.conftest import python_child

WORKER = """
import json, sys, time, journal
target, name = sys.argv[1], sys.argv[2]
done = []
with journal.open(target) as j:
    idle_since = None
    while True:
        claim = j.claim()
        if claim is None:
            # Empty for now: another worker may still requeue or be mid-claim. Stop once nothing
            # is queued or running for a while.
            if not j.submissions(state="queued") and not j.submissions(state="running"):
                break
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 30:
                break
            time.sleep(0.01)
            continue
        idle_since = None
        turn = claim.turn
        with turn.step():
            turn.assistant("done: " + claim.submission.data["content"], stop_reason="stop")
        claim.complete()
        done.append([claim.submission.id, claim.submission.session_id, claim.submission.input_seq])
print(json.dumps(done))
"""


def test_g2_g4_8_worker_processes_claim_2000_submissions_each_processed_once_in_each_sessions_order(db_path) -> None:
    sessions, per_session = 40, 50
    with journal.open(db_path) as j:
        order: dict[str, list[str]] = {}
        for s in range(sessions):
            sid = j.create_session(f"s{s:02}").id
            order[sid] = [j.submit(sid, "user_message", {"content": f"{sid}/{k}"}).id for k in range(per_session)]
    workers = [python_child(WORKER, str(db_path), f"w{w}") for w in range(8)]
    processed: list[list] = []
    for worker in workers:
        out, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, err
        assert "Busy" not in err and "Error" not in err, err
        processed += json.loads(out)
    ids = [row[0] for row in processed]
    assert len(ids) == sessions * per_session and len(set(ids)) == len(ids)  # each once
    with journal.open(db_path) as j:
        subs = {s.id: s for s in j.submissions()}
        assert {s.state.value for s in subs.values()} == {"completed"}
        assert {s.attempt for s in subs.values()} == {1}
        for sid, queued in order.items():
            seqs = [subs[i].input_seq for i in queued]
            assert seqs == sorted(seqs), f"{sid}'s inputs were applied out of order"
            events = j.events(sid)
            assert [e.type for e in events].count("turn_end") == per_session
        assert j.scan().clean and j.check() == []


def test_a_claimer_passes_over_a_submission_another_claimer_holds(db_path, backend) -> None:
    """A claim in flight elsewhere holds its row and its session: the next claimer takes the
    next runnable session's head at once instead of waiting (on PostgreSQL; on SQLite the
    second claimer waits its turn at the file and then finds the other session's head)."""
    with journal.open(db_path) as j:
        for sid in ("a", "b"):
            j.create_session(sid)
            j.submit(sid, "user_message", {"content": sid})
        if backend == "postgresql":
            import psycopg

            from journal.store.postgres import lock_key

            # Another host's claimer, mid-transaction, holding a's head and a's session.
            other = psycopg.connect(j._store._dsn, autocommit=True)
            try:
                schema = other.execute("SELECT current_schema()").fetchone()[0]
                other.execute("BEGIN")
                other.execute(f"SELECT pg_advisory_xact_lock_shared({lock_key(schema)})")
                other.execute("SELECT id FROM submissions WHERE session_id = 'a' FOR UPDATE")
                other.execute(f"SELECT pg_advisory_xact_lock({lock_key(schema, 'a')})")
                claim = j.claim()
                assert claim is not None and claim.submission.session_id == "b"
                other.execute("ROLLBACK")
            finally:
                other.close()
            again = j.claim()
            assert again is not None and again.submission.session_id == "a"
        else:
            first, second = j.claim(), j.claim()
            assert {first.submission.session_id, second.submission.session_id} == {"a", "b"}
