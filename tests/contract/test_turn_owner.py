"""Recovery against a running agent: a turn whose owner may still drive it is not a crash.

The turn API records its owner (``host:pid:process-start-time``) in the turn journal; a claim
records its lease owner. ``recover()`` closes only turns whose owner is gone, unless forced.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import journal
from journal.owners import lease_owner
from tests.conftest import python_child

DRIVER = """
import sys, time, journal
with journal.open(sys.argv[1]) as j:
    s = j.create_session("live").id
    turn = j.turn_start(s)
    turn.step_start()
    turn.assistant("", tool_calls=[{"id": "pay-1", "name": "pay", "arguments": {"cents": 4200}}])
    turn.dispatch("pay-1")                      # the tool is running now
    print(journal.owners.lease_owner(), flush=True)
    time.sleep(120)
"""


@pytest.fixture
def live_driver(db_path: Path):
    child = python_child(DRIVER, str(db_path))
    owner = child.stdout.readline().strip()
    assert owner, child.stderr.read()
    yield child, owner
    if child.poll() is None:
        child.kill()
    child.communicate(timeout=30)


def _cli(db_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "journal.cli", *args, "--db", str(db_path)], capture_output=True, text=True, timeout=60
    )


def test_g8_a_turn_another_live_process_drives_is_left_alone_by_recover(db_path: Path, live_driver) -> None:
    child, owner = live_driver
    with journal.open(db_path) as j:
        (turn,) = j.scan().open_turns
        assert (turn.owner, turn.held) == (owner, True)
        before = j.count("live")
        (result,) = j.recover()
        assert result.live_owner == owner and result.appended == ()
        assert j.recover("live")[0].live_owner == owner
        assert j.count("live") == before
    shown = _cli(db_path, "recover")
    assert shown.returncode == 0 and f"live: turn held by live process {owner}; skipped (use --force)" in shown.stdout
    planned = json.loads(_cli(db_path, "recover", "--dry-run", "--json").stdout)
    assert planned["sessions"] == [{"session_id": "live", "repairs": [], "live_owner": owner}]
    assert child.poll() is None  # the driver never noticed
    with journal.open(db_path) as j:
        assert j.count("live") == before


def test_g8_force_closes_a_turn_whose_owner_is_alive(db_path: Path, live_driver) -> None:
    done = _cli(db_path, "recover", "--force", "--json")
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout)["sessions"]
    assert result["live_owner"] is None
    assert [e["type"] for e in result["appended"]] == ["tool_result", "turn_end"]
    assert result["appended"][0]["data"]["metadata"]["risk"] == "tool_outcome_unknown"


def _recovered_at_once(db_path: Path, owner: str) -> None:
    """The dead owner's turn reads as not held, and one recovery closes it."""
    with journal.open(db_path) as j:
        (turn,) = j.scan().open_turns
        assert (turn.owner, turn.held) == (owner, False)
        (result,) = j.recover()
        assert result.live_owner is None
        assert [e.type for e in result.appended] == ["tool_result", "turn_end"]
        assert j.scan().clean


def test_g8_once_the_owner_is_killed_its_turn_is_recovered_at_once(db_path: Path, live_driver) -> None:
    child, owner = live_driver
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    _recovered_at_once(db_path, owner)


def test_g8_an_owner_killed_and_not_yet_reaped_by_its_parent_is_gone(db_path: Path, live_driver) -> None:
    """A killed process its parent has not waited for is a zombie: its /proc entry (and start
    time) stays until it is reaped, which a supervisor may do late, or, under a PID 1 that
    reaps nothing, never. It runs nothing: its turn is recovered at once, as once reaped."""
    child, owner = live_driver
    os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    _recovered_at_once(db_path, owner)
    assert child.poll() is not None  # reaped only now


def test_turns_of_this_process_and_turns_without_an_owner_are_recovered(j: journal.Journal) -> None:
    mine = j.create_session("mine").id
    j.turn_start(mine)
    assert j.scan().open_turns[0].owner == lease_owner()
    plain = j.create_session("plain").id
    j.append(plain, "turn_start", {"turn": 1})  # a plain append records no owner
    results = {r.session_id: r for r in j.recover()}
    assert all(r.live_owner is None and r.appended for r in results.values())
    assert set(results) == {mine, plain} and j.scan().clean


def test_a_claimed_turn_is_held_while_its_lease_holds(j: journal.Journal) -> None:
    s = j.create_session("bot").id
    j.submit(s, "user_message", {"content": "hi"})
    claim = j.claim(owner="another-host:1:1", lease_ms=60_000)
    (turn,) = j.scan().open_turns
    assert (turn.owner, turn.held) == ("another-host:1:1", True)
    assert j.recover()[0].live_owner == "another-host:1:1"
    j.submit(s, "user_message", {"content": "later"})
    other = j.create_session("expired").id
    j.submit(other, "user_message", {"content": "hi"})
    j.claim(session_id=other, owner="another-host:1:1", lease_ms=1)
    time.sleep(0.01)
    results = {r.session_id: r for r in j.recover()}
    assert results[s].live_owner == "another-host:1:1" and results[other].live_owner is None
    assert results[other].appended and claim.attempt == 1


BATCH_DRIVER = """
import sys, time, journal
with journal.open(sys.argv[1]) as j:
    s = j.create_session("mirrored").id
    j.append_many(s, [
        ("turn_start", {"turn": 1}, "ts-1"),
        ("assistant_message", {"content": "", "tool_calls": [{"id": "pay-1", "name": "pay", "arguments": {}}]}),
        ("tool_call", {"id": "pay-1", "name": "pay"}),
    ], owned=True)  # as an adapter mirrors a framework's turn: this process drives it
    print(journal.owners.lease_owner(), flush=True)
    time.sleep(120)
"""


def test_g8_a_turn_a_batch_opened_as_owned_is_held_while_its_process_lives_and_recovered_once_it_dies(
    db_path: Path,
) -> None:
    child = python_child(BATCH_DRIVER, str(db_path))
    try:
        owner = child.stdout.readline().strip()
        assert owner, child.stderr.read()
        with journal.open(db_path) as j:
            state = j.turn_state("mirrored")
            assert state is not None and state.owner == owner
            (turn,) = j.scan().open_turns
            assert (turn.owner, turn.held) == (owner, True)
            (result,) = j.recover()
            assert result.live_owner == owner and result.appended == ()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        with journal.open(db_path) as j:
            (result,) = j.recover()
            assert [e.type for e in result.appended] == ["tool_result", "turn_end"] and j.scan().clean
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)


def test_a_batch_records_an_owner_only_when_asked_and_only_for_a_turn_it_opens(j: journal.Journal) -> None:
    s = j.create_session("s").id
    j.append_many(s, [("turn_start", {"turn": 1}, "ts-1")])
    assert j.turn_state(s).owner is None  # a plain batch, as a plain append: no owner
    again = j.append_many(s, [("turn_start", {"turn": 1}, "ts-1")], owned=True)
    assert again[0].existing and j.turn_state(s).owner is None  # not its turn: the stored one's
    j.append(s, "turn_end", {"turn": 1, "steps": 0, "reason": "complete"})
    j.append_many(s, [("user_message", {"content": "hi"}), ("turn_start", {"turn": 2})], owned=True)
    assert j.turn_state(s).owner == lease_owner() and j.turn_state(s).turn == 2
