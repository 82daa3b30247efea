"""Submissions, leases and the reconciler (DESIGN §6, §7(3))."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

import journal
from journal import SubmissionState
from journal.classify import ResumeMode
from journal.owners import lease_owner, owner_is_dead
from journal.testing import Ledger
from journal.testing.bot import work

from ..conftest import python_child, release_together, run_child

GONE = "nohost-at-all:1:1"  # an owner on another host: never declared dead, expires by time only


def _later(ms: int = 120_000) -> int:
    return journal.log.now_ms() + ms


def test_submit_then_claim_applies_the_input_and_opens_the_turn_in_one_transaction(j: journal.Journal) -> None:
    s = j.create_session().id
    sub = j.submit(s, "user_message", {"content": "hi"})
    assert sub.state is SubmissionState.QUEUED and sub.attempt == 0
    claim = j.claim()
    assert claim.attempt == 1 and claim.resume is None
    assert [e.type for e in j.events(s)] == ["turn_start", "user_message"]
    assert j.events(s)[1].data == {"content": "hi", "submission_id": sub.id}
    stored = j.submission(sub.id)
    assert (stored.state, stored.input_seq, stored.turn_start_seq, stored.lease_owner) == (
        SubmissionState.RUNNING, 1, 0, lease_owner()
    )  # fmt: skip
    with claim.turn.step():
        claim.turn.assistant("hello")
    claim.complete()
    assert j.submission(sub.id).state is SubmissionState.COMPLETED
    assert j.claim() is None


def test_inputs_of_one_session_are_processed_in_order_one_at_a_time(j: journal.Journal) -> None:
    a, b = j.create_session().id, j.create_session().id
    first = j.submit(a, "user_message", {"content": "1"})
    j.submit(a, "user_message", {"content": "2"})
    other = j.submit(b, "user_message", {"content": "x"})
    claim = j.claim()
    assert claim.submission.id == first.id
    assert j.claim().submission.id == other.id  # a's second input waits for its first
    assert j.claim() is None
    claim.turn.complete()
    assert j.claim(session_id=a).submission.data == {"content": "2"}


def test_complete_fail_requeue_renew_are_compare_and_set_on_the_attempt(j: journal.Journal) -> None:
    s = j.create_session().id
    j.submit(s, "user_message", {"content": "hi"})
    stale = j.claim(lease_ms=1)
    j.requeue(stale)
    fresh_claim = j.claim()
    assert fresh_claim.attempt == 2
    for write in (stale.renew, stale.requeue, lambda: stale.fail("x"), stale.complete):
        with pytest.raises(journal.LeaseLost):
            write()
    fresh_claim.renew(lease_ms=5_000)
    fresh_claim.fail("the model refused")
    sub = j.submission(fresh_claim.submission.id)
    assert (sub.state, sub.outcome) == (SubmissionState.FAILED, "the model refused")
    assert j.events(s)[-1].data["reason"] == "rejected"
    assert j.scan().open_turns == ()


def test_the_attempt_count_survives_a_reopen(db_path: Path) -> None:
    with journal.open(db_path) as j:
        s = j.create_session().id
        j.submit(s, "user_message", {"content": "hi"}, max_attempts=2)
        j.requeue(j.claim())
        j.requeue(j.claim())
    with journal.open(db_path) as j:
        assert j.claim() is None
        (sub,) = j.submissions()
        assert (sub.attempt, sub.state, sub.outcome) == (2, SubmissionState.FAILED, "attempts exhausted")


def test_bad_submissions_are_typed_errors(j: journal.Journal) -> None:
    s = j.create_session().id
    with pytest.raises(journal.InvalidArgument):
        j.submit(s, "turn_start", {"turn": 1})
    with pytest.raises(journal.InvalidArgument):
        j.submit(s, "user_message", {"content": "x"}, max_attempts=0)
    with pytest.raises(journal.InvalidEvent):
        j.submit(s, "user_message", {})
    with pytest.raises(journal.SessionNotFound):
        j.submit("nope", "user_message", {"content": "x"})
    assert j.submissions() == []


def test_lease_owner_names_this_process_and_a_dead_pid_is_dead() -> None:
    owner = lease_owner()
    assert not owner_is_dead(owner)
    host, pid, start = owner.rsplit(":", 2)
    assert owner_is_dead(f"{host}:{pid}:{int(start) + 1}")  # the pid reused by a later process
    done = run_child("print('bye')")
    assert done.returncode == 0
    assert not owner_is_dead(GONE)


def _crash_in_tool_request(j: journal.Journal, *, owner: str = GONE, lease_ms: int = 60_000, **submit) -> str:
    s = j.create_session().id
    j.submit(s, "user_message", {"content": "pay"}, **submit)
    claim = j.claim(owner=owner, lease_ms=lease_ms)
    claim.turn.step_start()
    claim.turn.assistant(
        "", tool_calls=[{"id": "a", "name": "t", "arguments": {}}, {"id": "b", "name": "t", "arguments": {}}]
    )
    claim.turn.dispatch("a")
    return claim.submission.id


def test_a_live_owners_unexpired_lease_is_respected(j: journal.Journal) -> None:
    _crash_in_tool_request(j, owner=lease_owner())
    assert j.reconcile() == []
    assert j.scan().stale_submissions == ()


def test_reconcile_repairs_the_tool_request_and_starts_a_new_attempt(j: journal.Journal) -> None:
    sub_id = _crash_in_tool_request(j)
    (decision,) = j.reconcile(now_ms=_later())
    assert (decision.action, decision.resume_mode) == ("new_attempt", ResumeMode.TOOL_RESULTS)
    risks = {e.data["tool_call_id"]: e.data["metadata"]["risk"] for e in decision.appended if e.type == "tool_result"}
    assert risks == {"a": "tool_outcome_unknown", "b": "tool_not_started"}
    assert j.reconcile(now_ms=_later()) == []
    claim = j.claim()
    assert (claim.attempt, claim.resume, claim.submission.id) == (2, ResumeMode.TOOL_RESULTS, sub_id)
    with claim.turn.step():
        claim.turn.assistant("I could not confirm the payment; please check.")
    claim.complete()
    assert j.scan().clean and j.check() == []


def test_dry_run_reconcile_writes_nothing(j: journal.Journal, fresh) -> None:
    sub_id = _crash_in_tool_request(j)
    s = j.submission(sub_id).session_id
    before = fresh().events(s)
    (decision,) = j.reconcile(now_ms=_later(), dry_run=True)
    assert decision.action == "new_attempt" and decision.appended
    assert fresh().events(s) == before
    assert j.submission(sub_id).state is SubmissionState.RUNNING


def test_finished_work_settles_as_completed_even_with_its_attempts_and_time_used_up(j: journal.Journal) -> None:
    s = j.create_session().id
    j.submit(s, "user_message", {"content": "hi"}, max_attempts=1, timeout_s=0.001)
    claim = j.claim(owner=GONE)
    claim.turn.step_start()
    claim.turn.assistant("the answer", stop_reason="stop")
    (decision,) = j.reconcile(now_ms=_later())
    assert (decision.action, decision.state) == ("settled", "completed")
    assert j.submission(claim.submission.id).state is SubmissionState.COMPLETED
    assert j.events(s)[-1].data["reason"] == "complete"


def test_used_up_attempts_and_timeouts_fail_with_a_signal(j: journal.Journal) -> None:
    used_up = _crash_in_tool_request(j, max_attempts=1)
    timed_out = _crash_in_tool_request(j, timeout_s=1)
    decisions = {d.submission_id: d for d in j.reconcile(now_ms=_later())}
    assert (decisions[used_up].action, decisions[used_up].reason) == ("failed", "attempts exhausted")
    assert (decisions[timed_out].action, decisions[timed_out].reason) == ("failed", "timed out")
    signal_event = decisions[used_up].appended[-1]
    assert signal_event.type == "submission_interrupted" and signal_event.data["tool_call_ids"] == ["a", "b"]
    assert j.scan().clean


def test_stream_chunks_of_an_interrupted_provider_call_become_an_aborted_assistant(j: journal.Journal) -> None:
    s = j.create_session().id
    j.submit(s, "user_message", {"content": "hi"})
    claim = j.claim(owner=GONE)
    claim.turn.step_start()
    claim.turn.provider_started(stream_key="k")
    claim.turn.save_chunk(0, "Hel")
    claim.turn.save_chunk(1, "lo")
    (decision,) = j.reconcile(now_ms=_later())
    assert [e.type for e in decision.appended] == ["assistant_message", "stream_interrupted", "stream_continued"]
    assert decision.appended[0].data == {"content": "Hello", "stop_reason": "aborted"}
    assert decision.resume_mode is ResumeMode.STREAM_CONTINUATION
    next_claim = j.claim()
    assert next_claim.turn.step_number == 1  # the step stayed open; the worker decides
    assert j.reconcile() == []  # the new attempt's lease is live


def test_input_never_applied_is_requeued(j: journal.Journal) -> None:
    s = j.create_session().id
    j.submit(s, "user_message", {"content": "hi"})
    claim = j.claim(owner=GONE)
    # A claim that died before applying its input cannot happen (it is one transaction);
    # simulate a submission marked running with no input to check the rule.
    with j._store.write("test") as db:
        db.execute("UPDATE submissions SET input_seq = NULL WHERE id = ?", (claim.submission.id,))
    (decision,) = j.reconcile(now_ms=_later())
    assert decision.action == "requeued"


RECONCILER = """
import json, os, sys, time, journal
path, go, now = sys.argv[1], sys.argv[2], int(sys.argv[3])
with journal.open(path) as j:
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    print(json.dumps([[d.action, len(d.appended)] for d in j.reconcile(now_ms=now)]))
"""


def test_two_reconciler_processes_make_one_repair_and_one_new_attempt(
    j: journal.Journal, db_path: Path, tmp_path: Path
) -> None:
    sub_id = _crash_in_tool_request(j)
    s = j.submission(sub_id).session_id
    before = j.count(s)
    go = tmp_path / "go"
    racers = [python_child(RECONCILER, str(db_path), str(go), str(_later())) for _ in range(2)]
    release_together(racers, go)
    outcomes = []
    for racer in racers:
        out, err = racer.communicate(timeout=60)
        assert racer.returncode == 0, err
        outcomes.extend(json.loads(out))
    assert sorted(o[0] for o in outcomes if o[0] != "skipped") == ["new_attempt"]
    assert j.count(s) == before + 3  # two synthetic results and one step_end, once
    assert j.claim().attempt == 2  # the attempt count raised once


BOT = """
import sys, journal
from journal.testing import Ledger
from journal.testing.bot import work
with journal.open(sys.argv[1]) as j:
    work(j, Ledger(sys.argv[2]))
print("finished")
"""

PHASES = [
    pytest.param("step_start.after_commit:1", id="before_provider"),
    pytest.param("save_chunk.after_commit:1", id="provider_started-with-chunks"),
    pytest.param("assistant.after_commit:1", id="tool_request_recorded-no-results"),
    pytest.param("put_result.after_commit:1", id="tool_request_recorded-some-results"),
    pytest.param("put_result.after_commit:2", id="tool_request_recorded-all-results"),
    pytest.param("tool.after_run:1", id="tool-ran-result-lost"),
    pytest.param("save_chunk.after_commit:3", id="final-answer-streaming"),
]


@pytest.mark.parametrize("point", PHASES)
def test_a_bot_killed_in_each_phase_is_reconciled_at_once_and_resumed_to_completion(tmp_path: Path, point: str) -> None:
    path, ledger = tmp_path / "j.db", Ledger(tmp_path / "ledger")
    with journal.open(path) as j:
        for n in range(2):
            j.submit(j.create_session(f"s{n}").id, "user_message", {"content": f"order {n}"})
    done = run_child(BOT, str(path), str(ledger.path), env={"JOURNAL_CRASH_AT": point})
    assert done.returncode == -signal.SIGKILL, done.stderr
    with journal.open(path) as j:
        decisions = j.reconcile()  # no waiting: the dead owner is detected at once
        assert [d.action for d in decisions] == ["new_attempt"]
        work(j, ledger)
        assert all(s.state is SubmissionState.COMPLETED for s in j.submissions())
        for session in j.sessions():
            events = j.events(session.id)
            requested = [
                c["id"] for e in events if e.type == "assistant_message" for c in e.data.get("tool_calls") or ()
            ]
            answered = [e.data["tool_call_id"] for e in events if e.type == "tool_result"]
            assert sorted(requested) == sorted(answered) and len(set(answered)) == len(answered)
        assert j.scan().clean and j.check() == []
    assert ledger.repeated("call") == {}


def test_reconcile_takes_the_clock_in_seconds_or_milliseconds(j: journal.Journal) -> None:
    _crash_in_tool_request(j)
    with pytest.raises(journal.InvalidArgument):
        j.reconcile(now=1.0, now_ms=1000)
    assert j.reconcile(now=time.time()) == []  # the lease has a minute to run
    (decision,) = j.reconcile(now=time.time() + 120)
    assert decision.action == "new_attempt"
