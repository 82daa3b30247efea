"""The Claude Agent SDK adapter (DESIGN §14): the SDK's ``SessionStore`` contracts on a journal,
entries verbatim and deduplicated by uuid, and the typed events scan and recover read."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import time
import uuid as _uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("claude_agent_sdk", reason="the adapter's framework (extra [claude]) is not installed")

from claude_agent_sdk import (
    SessionStore,
    delete_session_via_store,
    get_session_messages_from_store,
    list_sessions_from_store,
    project_key_for_directory,
    rename_session_via_store,
)
from claude_agent_sdk.testing import run_session_store_conformance

import journal
from journal.adapters.claude import (
    ENTRY,
    JournalSessionStore,
    Repaired,
    SessionKeyMismatch,
    arepair,
    entries_of,
    journal_session_id,
    owed_calls,
    project,
    repair,
)
from journal.adapters.claude_entries import Shapes, answer_uuid, expand
from journal.model import Event

from ..conftest import python_child

OPTIONAL = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")


# -- a realistic transcript, in Claude Code's JSONL shape ----------------------------------------------


class Transcript:
    """Builds entries the way Claude Code writes them: a chain of ``parentUuid`` links."""

    def __init__(self, session_id: str, *, cwd: str = "/home/ada/proj", seed: str = "t") -> None:
        self.session_id, self.cwd, self.seed = session_id, cwd, seed
        self.parent: str | None = None
        self.n = itertools.count()
        self.entries: list[dict[str, Any]] = []

    def _entry(self, type_: str, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
        uid = str(_uuid.uuid5(_uuid.NAMESPACE_URL, f"{self.seed}/{next(self.n)}"))
        entry = {
            "parentUuid": self.parent, "isSidechain": False, "userType": "external", "cwd": self.cwd,
            "sessionId": self.session_id, "version": "2.0.14", "gitBranch": "main", "type": type_,
            "message": message, "uuid": uid, "timestamp": f"2025-06-01T10:00:{len(self.entries):02d}.000Z", **extra,
        }  # fmt: skip
        self.parent = uid
        self.entries.append(entry)
        return entry

    def user(self, text: str) -> dict[str, Any]:
        return self._entry("user", {"role": "user", "content": text})

    def assistant(self, *blocks: dict[str, Any], stop: str | None = None) -> dict[str, Any]:
        message = {
            "id": f"msg_{len(self.entries)}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": list(blocks), "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 1200, "output_tokens": 40, "cache_read_input_tokens": 800},
        }  # fmt: skip
        return self._entry("assistant", message, requestId=f"req_{len(self.entries)}")

    def tool_use(self, call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
        return self.assistant({"type": "tool_use", "id": call_id, "name": name, "input": arguments}, stop="tool_use")

    def result(self, call_id: str, content: Any, *, is_error: bool = False) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}
        return self._entry("user", {"role": "user", "content": [block]}, toolUseResult={"stdout": str(content)})

    def say(self, text: str) -> dict[str, Any]:
        return self.assistant({"type": "text", "text": text}, stop="end_turn")


SID = "6c1a9f3e-2b4d-4e8f-9a0b-1c2d3e4f5a6b"


def coding_session(session_id: str = SID, *, seed: str = "t", crash: bool = True) -> list[dict[str, Any]]:
    """Two turns with tools; the second ends in a ``tool_use`` whose result never came (a crash)."""
    t = Transcript(session_id, seed=seed)
    t.user("Find the failing test — ünïcode ✓ and fix it")
    t.assistant({"type": "thinking", "thinking": "Run the tests first.", "signature": "sig"})
    t.assistant({"type": "text", "text": "Running the tests."})
    t.tool_use("toolu_01", "Bash", command="pytest -q", description="run the tests")
    t.result("toolu_01", "1 failed: test_total")
    t.tool_use("toolu_02", "Read", file_path="/home/ada/proj/shop.py")
    t.result("toolu_02", [{"type": "text", "text": "def total(xs): return sum(xs) + 1"}])
    t.tool_use("toolu_03", "Edit", file_path="/home/ada/proj/shop.py", old_string="+ 1", new_string="")
    t.result("toolu_03", "The file has been updated.")
    t.say("Fixed: `total` added 1.")
    t.entries.append({"type": "summary", "summary": "Fix test_total", "leafUuid": t.parent})  # no uuid
    t.user("Now deploy it")
    t.tool_use("toolu_04", "Bash", command="./deploy.sh --prod")
    if not crash:
        t.result("toolu_04", "deployed")
        t.say("Deployed.")
    return t.entries


def key(session_id: str = SID, project: str = "-home-ada-proj", subpath: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"project_key": project, "session_id": session_id}
    if subpath is not None:
        out["subpath"] = subpath
    return out


@pytest.fixture
def store(db_path: Path):
    with JournalSessionStore(db_path) as opened:
        yield opened


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- the SDK's conformance suite ------------------------------------------------------------------------


def test_the_sdk_conformance_suite_passes_all_14_contracts_with_every_optional_method(tmp_path: Path) -> None:
    made: list[JournalSessionStore] = []
    numbers = itertools.count()

    def make_store() -> JournalSessionStore:
        made.append(JournalSessionStore(tmp_path / f"conformance-{next(numbers)}.db"))  # a fresh file per contract
        return made[-1]

    try:
        # The suite skips the contracts of an optional method the store does not override.
        probe = make_store()
        assert all(getattr(type(probe), m) is not getattr(SessionStore, m) for m in OPTIONAL)
        run(run_session_store_conformance(make_store))
    finally:
        for s in made:
            s.close()
    assert len(made) == 1 + 1 + 14  # our probe, the suite's probe, one store per contract


def test_the_conformance_suite_can_fail_a_store_that_breaks_a_contract(tmp_path: Path) -> None:
    class Reversed(JournalSessionStore):
        def load_sync(self, key: Any) -> Any:
            loaded = super().load_sync(key)
            return None if loaded is None else loaded[::-1]

    made: list[JournalSessionStore] = []
    numbers = itertools.count()

    def make_store() -> JournalSessionStore:
        made.append(Reversed(tmp_path / f"broken-{next(numbers)}.db"))
        return made[-1]

    try:
        with pytest.raises(AssertionError):
            run(run_session_store_conformance(make_store))
    finally:
        for s in made:
            s.close()


# -- verbatim, deduplicated -----------------------------------------------------------------------------


def test_entries_round_trip_deep_equal_with_nested_content_and_unicode(store: JournalSessionStore, fresh) -> None:
    entries = coding_session()
    odd = {
        "type": "attachment", "uuid": "odd-1", "surface_op": ["replace", 0, 9], "tool_calls": "not ours",
        "nested": {"a": [1, 2.5, None, True, {"deep": ["ß", "日本語", "🙂", "\u202e"]}]}, "big": 2**62,
    }  # fmt: skip
    run(store.append(key(), [*entries[:5], odd]))
    run(store.append(key(), entries[5:]))
    assert run(store.load(key())) == [*entries[:5], odd, *entries[5:]]
    with fresh() as other:  # durable: a new connection reads the same
        sid = journal_session_id(key())
        assert entries_of(other, sid) == [*entries[:5], odd, *entries[5:]]
        assert other.session(sid).meta == {
            "claude.project_key": "-home-ada-proj", "claude.session_id": SID, "claude.transcript": "main",
        }  # fmt: skip


def test_a_uuid_is_stored_once_within_a_batch_and_across_batches_and_entries_without_one_each_time(
    store: JournalSessionStore,
) -> None:
    entries = [e for e in coding_session() if "uuid" in e]
    run(store.append(key(), [entries[0], entries[1], entries[0], entries[1]]))
    run(store.append(key(), entries[:4]))
    run(store.append(key(), entries))  # the SDK retries a batch whose append timed out
    mode = {"type": "permission-mode", "permissionMode": "plan"}
    run(store.append(key(), [mode]))
    run(store.append(key(), [mode]))
    assert run(store.load(key())) == [*entries, mode, mode]
    events = store.journal.events(journal_session_id(key()))
    keyed = [e.key for e in events if e.key is not None]
    assert keyed == [e["uuid"] for e in entries]  # each once, on the one event that stores it
    # The typed events were derived once, whatever the retries.
    assert sum(e.type == "tool_call" for e in events) == 4
    assert sum(e.type == "user_message" for e in events) == 2
    assert store.journal.check() == []


def test_keys_that_are_not_session_ids_are_hashed_and_kept_in_the_meta(store: JournalSessionStore) -> None:
    odd = key(session_id="with space", project="/abs/path#x")
    plain = key(project="/abs/path#x".replace("/", "-"))
    run(store.append(odd, [{"type": "x", "uuid": "1"}]))
    run(store.append(key(subpath="subagents/agent-7"), [{"type": "x", "uuid": "1"}]))
    sid = journal_session_id(odd)
    assert sid.startswith("claude/#") and sid != journal_session_id(plain)
    assert journal_session_id(key(subpath="subagents/agent-7")) == f"claude/-home-ada-proj/{SID}/subagents/agent-7"
    assert store.journal.session(sid).meta["claude.session_id"] == "with space"
    assert run(store.list_sessions("/abs/path#x")) == [
        {"session_id": "with space", "mtime": store.journal.session(sid).last_ms}
    ]
    assert run(store.list_subkeys(key())) == ["subagents/agent-7"]


# -- the typed layer ------------------------------------------------------------------------------------


def test_typed_events_messages_and_scan_agree_on_a_trailing_tool_use_and_recover_closes_it(
    store: JournalSessionStore, fresh
) -> None:
    entries = coding_session()
    for i in range(0, len(entries), 3):  # the SDK flushes in batches
        run(store.append(key(), entries[i : i + 3]))
    j, sid = store.journal, journal_session_id(key())
    typed = [e for e in j.events(sid) if not e.type.startswith("x.")]
    assert [e.type for e in typed] == [
        "user_message", "assistant_message", "assistant_message",
        "turn_start", "assistant_message", "tool_call", "tool_result",
        "assistant_message", "tool_call", "tool_result",
        "assistant_message", "tool_call", "tool_result",
        "assistant_message", "turn_end",
        "user_message", "turn_start", "assistant_message", "tool_call",
    ]  # fmt: skip
    calls = [e.data for e in typed if e.type == "tool_call"]
    assert [(c["id"], c["name"]) for c in calls] == [
        ("toolu_01", "Bash"),
        ("toolu_02", "Read"),
        ("toolu_03", "Edit"),
        ("toolu_04", "Bash"),
    ]
    last_call = [e for e in typed if e.type == "assistant_message"][-1].data["tool_calls"]
    assert last_call == [{"id": "toolu_04", "name": "Bash", "arguments": {"command": "./deploy.sh --prod"}}]
    # The messages view: the conversation as a model saw it, the tool results in place.
    messages = j.messages(sid)
    assert [(m.role, m.tool_call_id) for m in messages if m.role == "tool"] == [
        ("tool", "toolu_01"),
        ("tool", "toolu_02"),
        ("tool", "toolu_03"),
    ]
    assert messages[0].content == "Find the failing test — ünïcode ✓ and fix it"
    assert messages[1].reasoning == "Run the tests first."
    assert messages[-1].tool_calls[0]["id"] == "toolu_04"
    assert [m.tool_call_id for m in j.provider_view(sid).missing] == ["toolu_04"]
    # The restart scan (from another connection): one open turn, owing the deploy, which MAY have run.
    with fresh(readonly=True) as reader:
        report = reader.scan()
    assert [(t.session_id, t.turn, [c.call_id for c in t.owed]) for t in report.open_turns] == [(sid, 2, ["toolu_04"])]
    assert [(p.session_id, p.call_id, p.name) for p in report.pending_calls] == [(sid, "toolu_04", "Bash")]
    assert j.check() == []
    (recovered,) = j.recover()
    synthetic, end = recovered.appended
    assert synthetic.data["tool_call_id"] == "toolu_04" and synthetic.data["metadata"]["risk"] == "tool_outcome_unknown"
    assert (end.type, end.data["reason"]) == ("turn_end", "interrupted")
    assert j.scan().clean and all(not r.appended for r in j.recover())  # idempotent (G8)
    # Recovery wrote typed events only; the store's read projects them in Claude's shape.
    assert entries_of(j, sid) == entries
    *verbatim, answer = run(store.load(key()))
    assert verbatim == entries and answer["parentUuid"] == entries[-1]["uuid"]
    assert answer["message"]["content"][0]["tool_use_id"] == "toolu_04"


def asked_and_answered(entries: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    asked = {
        b["id"] for e in entries if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "tool_use"
    }
    answered = {b["tool_use_id"] for e in entries if e["type"] == "user" and isinstance(e["message"]["content"], list)
                for b in e["message"]["content"] if b["type"] == "tool_result"}  # fmt: skip
    return asked, answered


def test_g8_repair_answers_the_orphan_tool_use_in_claudes_own_shape_once_and_load_shows_it(
    store: JournalSessionStore, fresh
) -> None:
    entries = coding_session()
    run(store.append(key(), entries))
    repaired = run(arepair(store, key()))
    assert isinstance(repaired, Repaired) and repaired.session_id == journal_session_id(key())
    synthetic, end = repaired.recovered
    assert (synthetic.type, synthetic.data["tool_call_id"], end.type) == ("tool_result", "toolu_04", "turn_end")
    assert repaired.added == () and repaired.unanswered == () and repaired.live_owner is None
    again = repair(store, key())  # idempotent (G8): nothing more to recover, the same view
    assert again.recovered == () and again.unanswered == ()
    loaded = run(store.load(key()))
    *verbatim, entry = loaded
    assert verbatim == entries
    assert entry["type"] == "user" and entry["parentUuid"] == entries[-1]["uuid"] and entry["sessionId"] == SID
    block = entry["message"]["content"][0]
    assert block["is_error"] is True and "MAY have run" in block["content"]
    asked, answered = asked_and_answered(loaded)
    assert asked == answered  # no orphan tool_use left for the provider to refuse
    with JournalSessionStore(fresh()) as other:  # the same view from another connection, every time
        assert run(other.load(key())) == loaded == run(store.load(key()))
    j, sid = store.journal, journal_session_id(key())
    assert j.scan().clean and j.check() == []
    assert entries_of(j, sid) == entries  # nothing framework-shaped stored
    # Claude resumes from what load showed: its next entries chain to the answer; if it writes the
    # answer back (it resumed from it), that is the same entry, stored once, with no second result.
    t = Transcript(SID, seed="after")
    t.parent = entry["uuid"]
    t.say("The deploy may have run; please check before I retry.")
    run(store.append(key(), [entry, *t.entries]))
    run(store.append(key(), [entry]))
    assert run(store.load(key())) == [*entries, entry, *t.entries]
    results = [e for e in j.events(sid) if e.type in ("tool_result", "tool_result_late")]
    assert [e.type for e in results] == ["tool_result"] * 4
    assert j.scan().clean and j.check() == []


def test_repair_of_a_key_never_stored_does_nothing(store: JournalSessionStore) -> None:
    assert repair(store, key("never")) == Repaired(journal_session_id(key("never")))
    assert run(store.load(key("never"))) is None


def test_a_result_for_an_unknown_call_is_stored_verbatim_and_left_out_of_the_typed_layer(
    store: JournalSessionStore,
) -> None:
    t = Transcript(SID)
    t.user("hi")
    t.result("toolu_elsewhere", "from another transcript")
    t.tool_use("toolu_a", "Bash", command="true")
    t.tool_use("toolu_a", "Bash", command="true")  # the same call id again: the first request stands
    t.result("toolu_a", "ok")
    t.result("toolu_a", "ok, again")  # a second result: kept as late evidence (G5)
    t.say("done")
    run(store.append(key(), t.entries))
    j, sid = store.journal, journal_session_id(key())
    assert run(store.load(key())) == t.entries
    typed = [e.type for e in j.events(sid) if not e.type.startswith("x.")]
    assert typed == [
        "user_message", "turn_start", "assistant_message", "tool_call", "tool_result", "tool_result_late",
        "assistant_message", "turn_end",
    ]  # fmt: skip
    assert j.scan().clean and j.check() == []


def test_the_sdks_own_store_helpers_read_list_rename_and_delete_through_the_journal(
    tmp_path: Path, store: JournalSessionStore
) -> None:
    directory = str(tmp_path / "proj")
    project = project_key_for_directory(directory)
    other = "7d2b0a4f-3c5e-4f90-8b1c-2d3e4f5a6b7c"
    run(store.append(key(project=project), coding_session(crash=False)))
    run(store.append(key(other, project=project), coding_session(other, seed="o", crash=False)))
    run(store.append(key(project=project, subpath="subagents/agent-1"), coding_session(seed="s")))
    messages = run(get_session_messages_from_store(store, SID, directory=directory))
    assert messages[0].type == "user" and messages[-1].message["content"][0]["text"] == "Deployed."
    run(rename_session_via_store(store, SID, "Fix and deploy", directory=directory))
    infos = {i.session_id: i for i in run(list_sessions_from_store(store, directory=directory))}
    assert set(infos) == {SID, other}
    assert infos[SID].summary == "Fix and deploy" and infos[other].first_prompt.startswith("Find the failing test")
    run(delete_session_via_store(store, SID, directory=directory))
    assert run(store.load(key(project=project))) is None
    assert run(store.load(key(project=project, subpath="subagents/agent-1"))) is None
    assert [s["session_id"] for s in run(store.list_sessions(project))] == [other]
    assert [s["session_id"] for s in run(store.list_session_summaries(project))] == [other]
    # Purged, not hidden: the journal holds nothing of the deleted sessions (G3's one exception).
    assert [s.id for s in store.journal.sessions()] == [journal_session_id(key(other, project=project))]


def test_delete_of_a_subpath_removes_only_it_and_a_journal_fork_keeps_its_own_copy(store: JournalSessionStore) -> None:
    run(store.append(key(), coding_session(crash=False)))
    run(store.append(key(subpath="subagents/agent-1"), [{"type": "user", "uuid": "s1", "message": {"content": "x"}}]))
    run(store.delete(key(subpath="subagents/agent-1")))
    assert run(store.list_subkeys(key())) == [] and run(store.load(key())) is not None
    j = store.journal
    fork = j.fork(journal_session_id(key()), id="my-fork").id
    run(store.delete(key()))
    assert run(store.load(key())) is None and run(store.list_sessions("-home-ada-proj")) == []
    assert entries_of(j, fork) == coding_session(crash=False)


# -- two processes ----------------------------------------------------------------------------------------


RACER = """
import asyncio, json, logging, sys, time
from journal.adapters import claude
from journal.adapters.claude import JournalSessionStore

path, size, slot_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
if sys.argv[5] == "index-only":
    claude.MAX_ROUNDS = 0  # no plan: the entries alone, deduplicated by the unique index only
with open(sys.argv[4]) as f:
    entries = json.load(f)
key = {"project_key": "-home-ada-proj", "session_id": entries[0]["sessionId"]}
outcomes = {"appended": 0, "moved": 0}

class Count(logging.Handler):  # the adapter logs each append it wrote, and each plan it redid
    def emit(self, record):
        text = record.getMessage()
        if "appended" in text:
            outcomes["appended"] += 1
        elif "planning again" in text:
            outcomes["moved"] += 1

logger = logging.getLogger("journal.adapters.claude")
logger.setLevel(logging.DEBUG)
logger.addHandler(Count())

async def main():
    with JournalSessionStore(path) as store:
        print("ready", flush=True)
        start = float(sys.stdin.readline())  # the same instant for both racers
        for n, i in enumerate(range(0, len(entries), size)):
            # lockstep (slot_s > 0): both processes append batch n at the same instant
            while time.time() < start + n * slot_s:
                time.sleep(0.0005)
            batch = entries[i : i + size]
            await store.append(key, batch)
            await store.append(key, batch[: size // 2 + 1])  # a retried (timed-out) batch, in part
    print(json.dumps(outcomes))

asyncio.run(main())
"""


def race_transcript() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for round_ in range(6):  # twelve turns with tools
        t = Transcript(SID, seed=f"r{round_}")
        t.parent = entries[-1]["uuid"] if entries else None
        for k in range(2):
            t.user(f"step {round_}.{k}")
            t.tool_use(f"toolu_{round_}_{k}", "Bash", command=f"echo {round_}{k}")
            t.result(f"toolu_{round_}_{k}", f"{round_}{k}")
            t.say(f"did {round_}.{k}: " + "a long answer, stored once in its typed event " * 2)
        entries += t.entries
    return entries


@pytest.mark.parametrize(
    ("sizes", "slot_s", "mode"),
    [((3, 3), 0.04, "derive"), ((3, 5), 0.0, "derive"), ((3, 3), 0.04, "index-only")],
    ids=["lockstep-same-batches", "free-run-straddling-batches", "lockstep-index-only"],
)
def test_two_processes_appending_the_same_entries_store_each_uuid_once_in_order(
    tmp_path: Path, sizes: tuple[int, int], slot_s: float, mode: str
) -> None:
    path = tmp_path / "race.db"
    entries = race_transcript()
    with JournalSessionStore(path):
        pass  # the file exists before the racers open it
    (tmp_path / "entries.json").write_text(json.dumps(entries))
    racers = [
        python_child(
            RACER, str(path), str(size), str(slot_s), str(tmp_path / "entries.json"), mode, stdin=subprocess.PIPE
        )
        for size in sizes
    ]
    for racer in racers:  # both imported and opened: now start them together
        assert racer.stdout is not None and racer.stdout.readline() == "ready\n", racer.stderr
    start = time.time() + 0.1
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write(f"{start}\n")
        racer.stdin.flush()
    outcomes = []
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        outcomes.append(json.loads(out))
    if slot_s and mode == "derive":
        # The same batch at the same instant from both: exactly one append wrote it.
        assert sum(o["appended"] for o in outcomes) == len(range(0, len(entries), sizes[0]))
    with JournalSessionStore(path) as store:
        assert run(store.load(key())) == entries  # each once, in the one order both appended
        j, sid = store.journal, journal_session_id(key())
        events = j.events(sid)
        keys = [e.key for e in events if e.key is not None]
        assert sorted(keys) == sorted(e["uuid"] for e in entries) and len(set(keys)) == len(keys)
        typed = [e.type for e in events if not e.type.startswith("x.")]
        assert j.check() == []
        if mode == "index-only":
            assert typed == []  # the entries alone
            return
        assert typed.count("tool_call") == typed.count("tool_result") == 12
        assert typed.count("turn_start") == typed.count("turn_end") == 12
        assert "tool_result_late" not in typed
        assert j.check() == [] and j.scan().clean


# -- limits and the event loop ----------------------------------------------------------------------------


def test_g12_an_entry_the_journal_cannot_hold_is_refused_and_nothing_of_its_batch_is_written(tmp_path: Path) -> None:
    with JournalSessionStore(tmp_path / "small.db", max_event_bytes=4096) as store:
        entries = coding_session()
        run(store.append(key(), entries[:2]))
        huge = {"type": "user", "uuid": "huge", "message": {"role": "user", "content": "x" * 5000}}
        with pytest.raises(journal.InvalidEvent):
            run(store.append(key(), [entries[2], huge]))
        assert run(store.load(key())) == entries[:2]
        run(store.append(key(), entries[2:]))  # the SDK goes on with later batches
        assert run(store.load(key())) == entries


@pytest.mark.sqlite_only(reason="holds SQLite's write lock through apsw (the async face is the same on both)")
def test_async_appends_wait_for_the_write_lock_off_the_event_loop(db_path: Path) -> None:
    import threading

    import apsw

    async def scenario(store: JournalSessionStore) -> tuple[int, bool]:
        holder = apsw.Connection(str(db_path))
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock until the loop has ticked
        ticked = threading.Event()

        def release() -> None:  # a count, not a clock: 50 loop turns while the append waits
            ticked.wait(timeout=60)  # a liveness bound only
            holder.execute("ROLLBACK")

        releaser = threading.Thread(target=release)
        releaser.start()
        ticks = 0
        append = asyncio.ensure_future(store.append(key(), coding_session()))
        while not append.done():
            await asyncio.sleep(0)
            ticks += 1
            if ticks == 50:
                ticked.set()
            if ticks > 50:
                await asyncio.sleep(0.001)
        await append
        releaser.join()
        holder.close()
        return ticks, ticked.is_set()

    with JournalSessionStore(db_path) as store:
        run(store.append(key(subpath="subagents/warm-up"), [{"type": "x"}]))  # the file and its schema exist
        ticks, released_by_the_loop = run(scenario(store))
        # The loop turned 50 times while the append waited for the lock: it never blocked on it.
        assert released_by_the_loop and ticks >= 50
        assert run(store.load(key())) == coding_session()


# -- the projection: what recovery wrote, in Claude's shape (pure) -----------------------------------------


def answer_of(call_id: str, content: str = "It MAY have run", *, time_ms: int = 1_750_000_000_000) -> Event:
    data = {"tool_call_id": call_id, "content": content, "is_error": True, "metadata": {"synthetic": True}}
    return Event("s", 0, "tool_result", data, time_ms)


def chain(*specs: tuple[str, str, Any]) -> list[dict[str, Any]]:
    """Entries from (uuid, kind, content) specs, each the child of the one before; ``kind`` is
    ``use:<message id>`` (content: call ids), ``result`` (content: a call id) or ``prompt``."""
    out: list[dict[str, Any]] = []
    for uid, kind, content in specs:
        entry: dict[str, Any] = {"parentUuid": out[-1]["uuid"] if out else None, "uuid": uid, "sessionId": "S"}
        if kind.startswith("use:"):
            blocks = [{"type": "tool_use", "id": c, "name": "Bash", "input": {}} for c in content]
            entry |= {"type": "assistant", "message": {"id": kind[4:], "role": "assistant", "content": blocks}}
        elif kind == "result":
            block = {"type": "tool_result", "tool_use_id": content, "content": "ok"}
            entry |= {"type": "user", "message": {"role": "user", "content": [block]}}
        else:
            entry |= {"type": "user", "message": {"role": "user", "content": content}}
        out.append(entry)
    return out


def shape(entries: list[Any]) -> list[tuple[Any, Any]]:
    """(uuid, parentUuid) of each entry, a projected answer named ``answer:<call id>``."""
    out = []
    for e in entries:
        uid = e["uuid"]
        if e.get("message", {}).get("content") and isinstance(e["message"]["content"], list):
            block = e["message"]["content"][0]
            if block.get("type") == "tool_result" and uid == answer_uuid("s", block["tool_use_id"]):
                uid = "answer:" + block["tool_use_id"]
        out.append(uid)
    names = {e["uuid"]: n for e, n in zip(entries, out)}
    return [(n, names.get(e["parentUuid"], e["parentUuid"])) for e, n in zip(entries, out)]


PROJECTIONS = [
    pytest.param(
        chain(("u1", "prompt", "pay"), ("a1", "use:m1", ["c1"])),
        {"c1"},
        [("u1", None), ("a1", "u1"), ("answer:c1", "a1")],
        id="a-trailing-call-is-answered-right-after-it",
    ),
    pytest.param(
        chain(("u1", "prompt", "pay"), ("a1", "use:m1", ["c1"]), ("u2", "prompt", "and then?")),
        {"c1"},
        [("u1", None), ("a1", "u1"), ("answer:c1", "a1"), ("u2", "answer:c1")],
        id="an-answer-goes-before-anything-later-which-now-follows-it",
    ),
    pytest.param(
        chain(("a1", "use:m1", ["c1", "c2"]), ("u2", "prompt", "next")),
        {"c1", "c2"},
        [("a1", None), ("answer:c1", "a1"), ("answer:c2", "answer:c1"), ("u2", "answer:c2")],
        id="two-calls-of-one-entry-are-answered-in-their-order",
    ),
    pytest.param(
        chain(("a1", "use:m1", ["c1"]), ("a2", "use:m1", ["c2"]), ("r1", "result", "c1")),
        {"c1", "c2"},
        [("a1", None), ("a2", "a1"), ("answer:c2", "a2"), ("r1", "answer:c2")],
        id="a-message-split-in-entries-is-answered-after-its-last-entry-and-a-stored-answer-wins",
    ),
    pytest.param(
        chain(("a1", "use:m1", ["c1"]), ("r1", "result", "c1")),
        {"c1"},
        [("a1", None), ("r1", "a1")],
        id="a-call-the-entries-answer-shows-their-answer-only",
    ),
    pytest.param(
        chain(("a1", "use:m1", ["c1"])),
        set(),
        [("a1", None)],
        id="a-call-the-journal-has-no-result-for-stays-as-stored",
    ),
]


@pytest.mark.parametrize(("entries", "answered", "expected"), PROJECTIONS)
def test_the_projection_puts_each_answer_the_journal_holds_right_after_its_call(
    entries: list[dict[str, Any]], answered: set[str], expected: list[tuple[Any, Any]]
) -> None:
    stored = json.loads(json.dumps(entries))
    results = {c: answer_of(c) for c in answered}
    projected = project("s", entries, results)
    assert shape(projected) == expected
    assert entries == stored  # the stored entries are never changed (copies are re-chained)
    assert project("s", entries, results) == projected  # the same every read
    asked, replied = asked_and_answered(projected)
    assert asked - replied == asked - replied - answered and (answered & asked) <= replied


def test_a_projected_answer_is_claudes_own_error_result_dated_by_the_recovery() -> None:
    entries = chain(("u1", "prompt", "pay"), ("a1", "use:m1", ["c1"]))
    entries[1] |= {"cwd": "/home/ada", "version": "2.0.14", "isSidechain": False, "userType": "external"}
    *_, answer = project("s", entries, {"c1": answer_of("c1", "It MAY have run.", time_ms=1_750_000_000_123)})
    assert answer == {
        "parentUuid": "a1", "isSidechain": False, "userType": "external", "cwd": "/home/ada", "sessionId": "S",
        "version": "2.0.14", "type": "user",
        "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "It MAY have run.", "is_error": True}
        ]},
        "uuid": answer_uuid("s", "c1"), "timestamp": "2025-06-15T15:06:40.123Z",
        "toolUseResult": "Error: It MAY have run.",
    }  # fmt: skip
    assert owed_calls(entries) == ["c1"] and owed_calls([*entries, answer]) == []


ENTRY_SPECS = st.lists(
    st.tuples(
        st.sampled_from(["prompt", "use:m1", "use:m2", "result", "junk"]),
        st.lists(st.sampled_from(["c1", "c2", "c3"]), min_size=1, max_size=2, unique=True),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(specs=ENTRY_SPECS, answered=st.sets(st.sampled_from(["c1", "c2", "c3"])))
def test_the_projection_keeps_every_entry_in_order_and_answers_each_owed_call_once(
    specs: list[tuple[str, list[str]]], answered: set[str]
) -> None:
    built = chain(*((f"e{i}", k if k != "result" else "result", c if k.startswith("use") else c[0])
                    for i, (k, c) in enumerate(specs) if k != "junk"))  # fmt: skip
    entries: list[Any] = [*built, "not an entry", {"type": "summary"}]
    results = {c: answer_of(c) for c in answered}
    projected = project("s", entries, results)
    verbatim = [e for e in projected if not (isinstance(e, dict) and str(e.get("uuid", "")).count("-") == 4)]
    assert [e if not isinstance(e, dict) else {**e, "parentUuid": None} for e in verbatim] == [
        e if not isinstance(e, dict) else {**e, "parentUuid": None} for e in entries
    ]  # nothing dropped, nothing re-ordered; only the links of re-chained copies differ
    owed = set(owed_calls(entries))
    assert set(owed_calls(projected)) == owed - answered  # each answered once, the rest still owed
    uuids = [e["uuid"] for e in projected if isinstance(e, dict) and "uuid" in e]
    assert len(uuids) == len(set(uuids))
    known = set(uuids)
    for e in projected:  # one chain: every link names an entry of the transcript
        if isinstance(e, dict) and e.get("parentUuid") is not None:
            assert e["parentUuid"] in known
    assert project("s", projected, results) == projected  # idempotent


# -- ids are injective (issue 25 item 9) -----------------------------------------------------------------


def test_a_key_spelled_like_another_keys_hashed_id_gets_its_own_session(store: JournalSessionStore) -> None:
    odd = key(session_id="with space")
    hashed = journal_session_id(odd)
    assert hashed.startswith("claude/#")
    digest = hashed[len("claude/#") :]
    forgers = [
        key(session_id=digest, project="#"),  # readable would be claude/#/<digest>
        key(session_id="x", project="#" + digest),
        key(session_id="x", project="-p", subpath="#" + digest),
        key(session_id=hashed.replace("/", "_")),
    ]
    ids = [journal_session_id(k) for k in [odd, *forgers]]
    assert len(set(ids)) == len(ids)
    for k in [odd, *forgers]:
        run(store.append(k, [{"type": "user", "uuid": "u-" + str(k), "message": {"content": str(k)}}]))
    for k in [odd, *forgers]:
        assert run(store.load(k)) == [{"type": "user", "uuid": "u-" + str(k), "message": {"content": str(k)}}]


def test_slashes_in_parts_never_make_two_keys_one_session() -> None:
    keys = [
        key(session_id="b/c", project="a"),
        key(session_id="c", project="a/b"),
        key(session_id="b", project="a", subpath="c"),
        key(session_id="b", project="a", subpath="c/d"),
        key(session_id="b/c", project="a", subpath="d"),
        key(session_id="b", project="a/c", subpath="d"),
    ]
    assert len({journal_session_id(k) for k in keys}) == len(keys)


KEY_TEXT = st.text(alphabet="ab/#c -\u00e9", min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    first=st.tuples(KEY_TEXT, KEY_TEXT, st.none() | KEY_TEXT),
    second=st.tuples(KEY_TEXT, KEY_TEXT, st.none() | KEY_TEXT),
)
def test_two_different_keys_never_map_to_one_session(first: tuple[str, str, Any], second: tuple[str, str, Any]) -> None:
    one, two = (key(s, project=p, subpath=sub) for p, s, sub in (first, second))
    assert (journal_session_id(one) == journal_session_id(two)) == (first == second)


def test_g12_a_session_made_by_hand_under_a_keys_id_is_refused_and_nothing_is_written(
    store: JournalSessionStore,
) -> None:
    j, sid = store.journal, journal_session_id(key())
    j.create_session(sid, meta={"owner": "someone else"})
    j.append(sid, "user_message", {"content": "not a Claude transcript"})
    with pytest.raises(SessionKeyMismatch) as refused:
        run(store.append(key(), coding_session()))
    assert refused.value.session_id == sid and refused.value.stored is None
    assert "someone else" not in str(refused.value)
    with pytest.raises(SessionKeyMismatch):
        run(store.load(key()))
    with pytest.raises(SessionKeyMismatch):
        repair(store, key())
    with pytest.raises(SessionKeyMismatch):
        run(store.delete(key()))  # never erased for a key that does not own it
    assert j.count(sid) == 1 and j.scan().clean


# -- each item stored once (issue 31 item 5) ---------------------------------------------------------------


def stored_text(j: journal.Journal, sid: str) -> str:
    return "\n".join(json.dumps(e.data, ensure_ascii=False) for e in j.events(sid))


def test_a_prompt_a_tool_input_and_output_are_stored_once_and_rebuilt_exactly(
    store: JournalSessionStore, fresh
) -> None:
    prompt = "Summarise the release notes below, ünïcode ✓ and all: " + "notes " * 40
    listing = "\n".join(f"line {n}: " + "x" * 30 for n in range(50))
    arguments = {"zeta": "first key, not sorted", "alpha": [1, 2.5, True, None], "path": "/home/ada/proj/" + "d/" * 20}
    thinking = "I should read the file before answering. " * 3
    t = Transcript(SID)
    t.user(prompt)
    t.assistant({"type": "thinking", "thinking": thinking, "signature": "sig"})
    t.assistant({"type": "tool_use", "id": "toolu_big", "name": "Read", "input": arguments}, stop="tool_use")
    t.result("toolu_big", listing)
    t.result("toolu_big", listing)  # the same output again (a retried tool): kept whole, G5 decides
    t.say("The notes: " + "a long answer " * 10)
    t.entries.append({"type": "user", "message": {"role": "user", "content": "no uuid: " + "y" * 80}})
    run(store.append(key(), t.entries))
    sid = journal_session_id(key())
    with fresh() as other:
        assert entries_of(other, sid) == t.entries
        assert json.dumps(run(JournalSessionStore(other).load(key()))) == json.dumps(t.entries)  # key order too
        text = stored_text(other, sid)
        assert text.count("notes " * 40) == 1 and text.count(json.dumps(thinking)[1:-1]) == 1
        assert text.count(json.dumps(arguments["path"])) == 1
        assert text.count("a long answer " * 10) == 1
        assert text.count("line 49: ") == 4  # once for the first result; the second is kept whole, and late
        assert text.count("y" * 80) == 2  # no uuid: the entry keeps its text (it may be stored again)
        # The typed reads are what they were: the messages view holds every text.
        messages = other.messages(sid)
        assert messages[0].content == prompt and messages[1].reasoning == thinking
        assert messages[2].tool_calls[0]["arguments"] == arguments and messages[3].content == listing
        assert other.check() == []


def test_entries_stored_alone_after_a_refused_derivation_are_stored_whole(store: JournalSessionStore) -> None:
    from journal.adapters import claude

    t = Transcript(SID)
    t.user("Deploy, please: " + "z" * 80)
    rounds, claude.MAX_ROUNDS = claude.MAX_ROUNDS, 0  # no plan: the entries alone
    try:
        run(store.append(key(), t.entries))
    finally:
        claude.MAX_ROUNDS = rounds
    assert run(store.load(key())) == t.entries
    assert stored_text(store.journal, journal_session_id(key())).count("z" * 80) == 1


def test_a_resume_without_repair_is_logged_naming_repair_and_the_call_owed(
    store: JournalSessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    entries = coding_session()  # ends in toolu_04 without a result: a crash
    run(store.append(key(), entries))
    t = Transcript(SID, seed="next")
    t.parent = entries[-1]["uuid"]
    t.user("\x1b[2Jhello again")  # Claude went on without a repair
    with caplog.at_level("WARNING", logger="journal.adapters.claude"):
        run(store.append(key(), t.entries))
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    text = record.getMessage()
    assert "journal.adapters.claude.repair(store, key)" in text and "toolu_04" in text
    assert repair(store, key()).recovered  # the journal still owed it: repair answers it now
    assert owed_calls(run(store.load(key()))) == []


def test_an_entry_whose_holes_name_no_typed_event_is_reported_corrupt_not_rebuilt_wrong(
    store: JournalSessionStore,
) -> None:
    run(store.append(key(), coding_session()[:1]))
    sid = journal_session_id(key())
    bogus = {
        "entry": {"type": "user", "message": {"content": None}},
        "holes": [[["message", "content"], 5, ["content"], "user_message"]],
    }
    store.journal.append(sid, ENTRY, bogus)  # written by hand: no user_message five events on
    with pytest.raises(journal.CorruptJournal, match="user_message at seq"):
        run(store.load(key()))


@pytest.mark.parametrize("went_on", [False, True], ids=["resumed-after-recovery", "went-on-before-recovery"])
def test_g8_the_sdks_own_reader_follows_the_chain_through_a_recovered_calls_answer(
    tmp_path: Path, store: JournalSessionStore, went_on: bool
) -> None:
    directory = str(tmp_path / "proj")
    k = key(project=project_key_for_directory(directory))
    entries = coding_session()  # ends in toolu_04 without a result
    run(store.append(k, entries))
    t = Transcript(SID, seed="next")
    if went_on:  # Claude went on from the unanswered call itself, before anyone recovered
        t.parent = entries[-1]["uuid"]
        t.user("next?")
        run(store.append(k, t.entries))
    store.journal.recover()  # the engine's recovery, no repair
    if not went_on:  # resumed from what load showed: chained to the projected answer
        t.parent = run(store.load(k))[-1]["uuid"]
        t.user("next?")
        run(store.append(k, t.entries))
    messages = run(get_session_messages_from_store(store, SID, directory=directory))
    tail = [(m.type, m.message["content"]) for m in messages[-3:]]
    assert tail[0][0] == "assistant" and tail[0][1][0]["id"] == "toolu_04"
    assert tail[1][0] == "user" and tail[1][1][0]["tool_use_id"] == "toolu_04" and tail[1][1][0]["is_error"] is True
    assert tail[2] == ("user", "next?")


# -- each item stored once, one row per item (issue 31 item 5) ------------------------------------------


def test_each_entry_with_a_typed_event_is_that_one_event_and_the_typed_reads_are_unchanged(
    store: JournalSessionStore, fresh
) -> None:
    entries = coding_session(crash=False)
    run(store.append(key(), entries[:7]))
    run(store.append(key(), entries[7:]))
    sid = journal_session_id(key())
    with fresh() as other:
        events = other.events(sid)
        by_key = {e.key: e for e in events if e.key is not None}
        for entry in entries:
            if "uuid" in entry:  # one row: the typed event carries the entry and its uuid as its key
                assert by_key[entry["uuid"]].type in ("user_message", "assistant_message", "tool_result")
        assert [e.data for e in events if e.type == ENTRY] == [{"entry": entries[10]}]  # the summary: no uuid
        assert entries_of(other, sid) == entries
        assert json.dumps(run(JournalSessionStore(other).load(key()))) == json.dumps(entries)  # key order too
        messages = other.messages(sid)
        assert messages[0].content == "Find the failing test — ünïcode ✓ and fix it"
        assert messages[1].reasoning == "Run the tests first."
        assert next((m.role, m.tool_call_id, m.content) for m in messages if m.role == "tool") == (
            "tool", "toolu_01", "1 failed: test_total",
        )  # fmt: skip
        assert messages[-1].content == "Deployed."
        assert other.scan().clean and other.check() == []


REFERENCE_LIKE = st.sampled_from(
    ["$", "$$", "$k", "$^", "$=", "$c", "$r", "$t", "$a0", "$d0", "$c@1", "$c@-3", "$$c", "$x", "$i", "plain", ""]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(REFERENCE_LIKE, min_size=8, max_size=8), split=st.integers(0, 8))
def test_strings_that_look_like_references_are_stored_escaped_and_read_back_exactly(
    store: JournalSessionStore, values: list[str], split: int
) -> None:
    session = str(_uuid.uuid4())  # one session per example, in the test's one file
    t = Transcript(session, cwd=values[0])
    t.user(values[1] or "a prompt")
    t.entries[-1]["parentUuid"] = values[2]
    t.tool_use("toolu_x", "Bash", command=values[3], note={"deep": [values[4]]})
    t.result("toolu_x", values[5])
    t.say(values[6] or "done")
    t.entries[-1]["sessionId"] = values[7]
    t.user("again")
    t.tool_use("toolu_y", "Bash", command=values[3])
    t.result("toolu_y", values[5])
    k = key(session_id=session)
    run(store.append(k, t.entries[:split]))
    # Another store on the same journal follows the log the first wrote (its references too).
    run(JournalSessionStore(store.journal).append(k, t.entries[split:]))
    assert json.dumps(run(store.load(k))) == json.dumps(t.entries)


def test_a_file_written_by_the_previous_format_still_reads_and_takes_new_entries(store: JournalSessionStore) -> None:
    t = Transcript(SID)
    t.user("first, stored whole")
    t.user("second: " + "a prompt long enough to have been a hole " * 2)
    t.user("third, stored now")
    first, second, third = t.entries
    run(store.append(key(), [{"type": "permission-mode", "permissionMode": "plan"}]))  # the session, its meta
    sid = journal_session_id(key())
    old_second = {**second, "message": {"role": "user", "content": None}}
    store.journal.append_many(
        sid,
        [
            (ENTRY, {"entry": first}, first["uuid"]),
            ("user_message", {"content": "first, stored whole", "metadata": {"claude_uuid": first["uuid"]}}),
            (
                ENTRY,
                {"entry": old_second, "holes": [[["message", "content"], 1, ["content"], "user_message"]]},
                second["uuid"],
            ),
            ("user_message", {"content": second["message"]["content"], "metadata": {"claude_uuid": second["uuid"]}}),
        ],
    )  # what the adapter wrote before issue 31
    fresh_store = JournalSessionStore(store.journal)  # its tracker reads the old log
    run(fresh_store.append(key(), [second, third]))  # the second is a duplicate: stored once
    mode = {"type": "permission-mode", "permissionMode": "plan"}
    assert run(fresh_store.load(key())) == [mode, first, second, third]
    assert [e.key for e in store.journal.events(sid) if e.key is not None] == [e["uuid"] for e in t.entries]


def test_a_residue_naming_a_base_that_is_not_there_is_reported_corrupt_not_rebuilt_wrong(
    store: JournalSessionStore,
) -> None:
    run(store.append(key(), coding_session()[:1]))
    sid = journal_session_id(key())
    forged = {"content": "hi", "metadata": {"claude_entry": [-40, {"timestamp": "later"}]}}
    store.journal.append(sid, "user_message", forged, key="forged-uuid")  # by hand: no base 40 events back
    with pytest.raises(journal.CorruptJournal, match="holds no Claude entry"):
        run(store.load(key()))


def test_a_long_chat_stores_no_body_twice_and_less_data_than_its_jsonl(store: JournalSessionStore) -> None:
    t = Transcript(SID)
    for n in range(20):
        t.user(f"step {n}: what is the weather in Lyon? " * 3)
        t.tool_use(f"toolu_{n}", "Bash", command=f"curl wttr.in/Lyon?step={n}")
        t.result(f"toolu_{n}", f"step {n}: sunny, 21 degrees " * 4)
        t.say(f"step {n}: it is sunny in Lyon, 21 degrees. " * 2)
    for entry in t.entries:  # the SDK's eager flush: one entry a batch
        run(store.append(key(), [entry]))
    assert run(store.load(key())) == t.entries
    events = store.journal.events(journal_session_id(key()))
    text = "\n".join(json.dumps(e.data, ensure_ascii=False) for e in events)
    for n in (0, 7, 19):
        assert text.count(f"step {n}: what is the weather in Lyon? " * 3) == 1
        assert text.count(f"step {n}: sunny, 21 degrees " * 4) == 1  # the output, Claude's copy and the typed one
        assert text.count(f"curl wttr.in/Lyon?step={n}") == 1
    jsonl = sum(len(json.dumps(e, ensure_ascii=False)) + 1 for e in t.entries)
    assert len(text) < 0.6 * jsonl  # each entry costs what changed in it, not its field names again


def test_a_model_message_whose_token_counts_alone_changed_stores_those_counts_only(store: JournalSessionStore) -> None:
    t = Transcript(SID)
    for n in range(12):
        t.user(f"step {n}")
        t.say(f"answer {n}")
        usage = t.entries[-1]["message"]["usage"]
        usage.update(input_tokens=1200 + 37 * n, cache_read_input_tokens=800 + 11 * n)
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": n % 2}
    for entry in t.entries:
        run(store.append(key(), [entry]))
    assert json.dumps(run(JournalSessionStore(store.journal).load(key()))) == json.dumps(t.entries)
    said = store.journal.events(journal_session_id(key()), types=["assistant_message"])
    last = said[-1].data["metadata"]["claude_entry"]
    # [offset, changes]: the message's changes to its base's, down to the numbers that moved.
    marker, changes = last[1]["message"]
    assert marker == "$~" and list(changes) == ["usage"] and changes["usage"][0] == "$~"
    assert set(changes["usage"][1]) <= {"input_tokens", "cache_read_input_tokens", "cache_creation"}
    assert len(json.dumps(last)) < 250


@pytest.mark.parametrize(
    ("residue", "base", "expected"),
    [
        # a nested change applied down to the field that moved; the rest from the base
        (
            {"m": ["$~", {"u": ["$~", {"a": 2}]}]},
            {"m": {"u": {"a": 1, "b": 1}, "t": "x"}, "k": 0},
            {"m": {"u": {"a": 2, "b": 1}, "t": "x"}, "k": 0},
        ),
        # a change naming a field the base's object has not: not a residue of it
        ({"m": ["$~", {"zz": 1}]}, {"m": {"u": 1}}, None),
        # a nested change where the base holds no object: not a residue of it
        ({"m": ["$~", {"u": 1}]}, {"m": "text"}, None),
        # a list that only looks like the marker (its string escaped as content is): a value
        ({"m": ["$$~", {"u": 1}]}, {"m": {"u": 0}}, {"m": ["$$~", {"u": 1}]}),
    ],
)
def test_a_stored_change_reads_back_against_its_base_or_is_refused(
    residue: dict[str, Any], base: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    assert expand([-1, residue], 5, {4: base}) == expected


@settings(max_examples=60, deadline=None)
@given(
    base=st.dictionaries(
        st.sampled_from("abc"),
        st.one_of(
            st.integers(0, 3),
            REFERENCE_LIKE,
            st.dictionaries(st.sampled_from("xyz"), st.one_of(st.integers(0, 3), REFERENCE_LIKE), max_size=3),
        ),
        min_size=1,
        max_size=3,
    ),
    data=st.data(),
)
def test_any_residue_stored_against_a_base_of_its_shape_reads_back_exactly(base: dict[str, Any], data: Any) -> None:
    def like(value: Any) -> Any:  # a value of the same shape, its leaves drawn again
        if isinstance(value, dict):
            return {name: like(child) for name, child in value.items()}
        return data.draw(st.one_of(st.integers(0, 3), REFERENCE_LIKE))

    residue = like(base)
    shapes = Shapes()
    shapes.note(4, base)
    stored = shapes.stored(5, residue)
    assert expand(stored, 5, shapes.by_seq) == residue


def test_more_shapes_than_the_cache_holds_still_read_back_exactly_from_any_writer(store: JournalSessionStore) -> None:
    t = Transcript(SID)
    for n in range(80):  # 80 shapes: more than a writer keeps bases for (MAX_SHAPES)
        t.user(f"prompt {n}")
        t.entries[-1][f"field_{n}"] = n
    for n in (0, 1, 79, 0):  # shapes the cache lost, and one it holds
        t.user(f"again {n}")
        t.entries[-1][f"field_{n}"] = n
    half = len(t.entries) // 2
    for entry in t.entries[:half]:
        run(store.append(key(), [entry]))
    other = JournalSessionStore(store.journal)  # a writer whose cache is folded from the log
    for entry in t.entries[half:]:
        run(other.append(key(), [entry]))
    assert json.dumps(run(JournalSessionStore(store.journal).load(key()))) == json.dumps(t.entries)


@pytest.mark.sqlite_only(reason="holds SQLite's write lock from a raw apsw connection")
def test_a_busy_journal_is_raised_to_the_sdk_and_the_batch_is_stored_once_on_retry(db_path: Path) -> None:
    """A write the journal could not make (another writer held the lock past the busy timeout)
    reaches the SDK as JournalBusy, not a second attempt stored in another shape; the SDK's
    retry then stores each entry once."""
    import apsw

    entries = coding_session()
    with JournalSessionStore(db_path, busy_timeout_ms=50) as store:
        run(store.load(key()))  # the file exists
        holder = apsw.Connection(str(db_path))
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(journal.JournalBusy):
                run(store.append(key(), entries))
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert run(store.load(key())) in (None, [])  # nothing of the refused batch
        run(store.append(key(), entries))  # the SDK retries
        assert run(store.load(key())) == entries
        uuids = [e.key for e in store.journal.events(store.journal.sessions()[0].id) if e.key]
        assert len(uuids) == len(set(uuids))
