"""The Claude adapter's crash matrix (issue 31): one recovery, whichever path ran it.

Claude Code cannot run here, so a child process plays it with the SDK's eager mirror: each
transcript entry is written to Claude's local file, then appended to the store; the ``pay`` tool
records its side effect in the ledger (outside the journal). The child is SIGKILLed at each kill
point once per backend; every restart path then runs on its own copy of what the kill left
(SQLite: the file and its WAL copied; PostgreSQL: the schema exported and imported into a fresh
one), and the session is resumed the SDK's way: ``materialize_resume_session`` loads the store
into the JSONL file Claude Code resumes from. From that file the test builds what Claude Code
sends the model (the chain of ``parentUuid`` links from the newest leaf), refuses it as the
provider would (a ``tool_use`` not answered by the next message is a 400), and lets a scripted
model answer: it pays only for an invoice the transcript shows no payment call for.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import uuid as _uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk", reason="the adapter's framework (extra [claude]) is not installed")

from claude_agent_sdk import ClaudeAgentOptions, project_key_for_directory
from claude_agent_sdk._internal.session_resume import materialize_resume_session

import journal
import journal.aio
from journal.adapters.claude import JournalSessionStore, journal_session_id, owed_calls, repair
from journal.cli import main as journal_cli
from journal.testing.ledger import Ledger
from journal.transfer import export_lines, import_lines

from .conftest import python_child

SID = "5b8e2c4a-1f3d-4a6b-9c7e-0d2f4a6b8c1e"
CALL = "toolu_pay_7"
MARKER = "MAY have run"
KILL_POINTS = ("before_effect", "after_effect", "before_stored", "between_turns")
# "plain_resume" runs no recovery: the resume's own load recovers the turn the killed process
# left open (the store recorded that process as its owner). A PostgreSQL copy is an import, which
# carries the log and not the turn's owner: that path runs on SQLite's copies.
PATHS = (
    "repair", "cli_recover", "journal_recover", "async_recover", "reconcile_then_repair", "every_path_twice",
    "plain_resume",
)  # fmt: skip
# On PostgreSQL a copy is a new schema (~1 s to create a journal in it): each kill point takes
# three paths, each path two kill points (SQLite, where a copy is a file copy, takes them all).
PG_PATHS = {
    "before_effect": ("repair", "cli_recover", "every_path_twice"),
    "after_effect": ("journal_recover", "async_recover", "reconcile_then_repair"),
    "before_stored": ("cli_recover", "reconcile_then_repair", "journal_recover"),
    "between_turns": ("repair", "async_recover", "every_path_twice"),
}


def entry(n: int, kind: str, content: Any, parent: str | None, **extra: Any) -> dict[str, Any]:
    """One line of Claude Code's transcript (abridged), chained to ``parent``."""
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message = {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", **message}
        message["stop_reason"] = extra.pop("stop", None)
    return {
        "parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/home/ada/shop",
        "sessionId": SID, "version": "2.0.14", "type": kind, "message": message,
        "uuid": str(_uuid.uuid5(_uuid.NAMESPACE_URL, f"claude-matrix/{n}")),
        "timestamp": f"2025-06-01T10:00:{n:02d}.000Z", **extra,
    }  # fmt: skip


def first_turn() -> list[dict[str, Any]]:
    """The turn the child plays: a prompt, the model's ``pay`` call, its result, the answer."""
    prompt = entry(0, "user", "Pay invoice 7", None)
    use = entry(
        1,
        "assistant",
        [{"type": "tool_use", "id": CALL, "name": "pay", "input": {"invoice": 7}}],
        prompt["uuid"],
        stop="tool_use",
    )
    result = entry(
        2, "user", [{"type": "tool_result", "tool_use_id": CALL, "content": "paid"}], use["uuid"], toolUseResult="paid"
    )
    answer = entry(3, "assistant", [{"type": "text", "text": "Invoice 7 is paid."}], result["uuid"], stop="end_turn")
    return [prompt, use, result, answer]


CHILD = """
import asyncio, json, os, signal, sys
from journal.adapters.claude import JournalSessionStore
from journal.testing.ledger import Ledger

target, ledger_path, point, local, transcript, project = sys.argv[1:7]
prompt, use, result, answer = json.loads(open(transcript).read())
key = {"project_key": project, "session_id": use["sessionId"]}
ledger = Ledger(ledger_path)

def die(here):
    if point == here:
        os.kill(os.getpid(), signal.SIGKILL)

async def main():
    store = JournalSessionStore(target)
    async def write(entry, *, mirrored=True):
        with open(local, "a") as f:  # Claude Code's own file first, then the SDK's mirror
            f.write(json.dumps(entry) + "\\n")
        if mirrored:
            await store.append(key, [entry])
    await write(prompt)
    await write(use)
    die("before_effect")
    ledger.record(call=use["message"]["content"][0]["id"], invoice=7)  # the side effect
    die("after_effect")
    await write(result, mirrored=False)  # the tool returned; the mirror has not sent it yet
    die("before_stored")
    await store.append(key, [result])
    await write(answer)
    die("between_turns")

asyncio.run(main())
"""


# -- what Claude Code does with the file it resumes from -------------------------------------------------


def leaf_of(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The newest message no other message follows: where Claude Code resumes (and chains the
    next prompt)."""
    nodes = {e["uuid"]: e for e in lines if e.get("type") in ("user", "assistant") and e.get("uuid")}
    parents = {e.get("parentUuid") for e in nodes.values()}
    return [e for e in lines if e.get("uuid") in nodes and e["uuid"] not in parents][-1]


def conversation(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages Claude Code resumes with: the ``parentUuid`` chain from the newest leaf to the
    root, consecutive entries of one role merged into one message."""
    nodes = {e["uuid"]: e for e in lines if e.get("type") in ("user", "assistant") and e.get("uuid")}
    chain: list[dict[str, Any]] = []
    node: dict[str, Any] | None = leaf_of(lines)
    while node is not None:
        chain.append(node)
        node = nodes.get(node.get("parentUuid"))  # type: ignore[arg-type]
    messages: list[dict[str, Any]] = []
    for e in reversed(chain):
        content = e["message"]["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        if messages and messages[-1]["role"] == e["type"]:
            messages[-1]["content"] += blocks
        else:
            messages.append({"role": e["type"], "content": blocks})
    return messages


def provider_accepts(messages: list[dict[str, Any]]) -> None:
    """Refuse what the Messages API refuses (a 400): a ``tool_use`` whose answer is not in the
    next message, or a ``tool_result`` for a call the message before did not make."""
    for i, message in enumerate(messages):
        asked = {b["id"] for b in message["content"] if b["type"] == "tool_use"}
        answers = {b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"}
        before = messages[i - 1]["content"] if i else []
        assert answers <= {b["id"] for b in before if b["type"] == "tool_use"}, f"400: orphan tool_result {answers}"
        if asked:
            after = messages[i + 1]["content"] if i + 1 < len(messages) else []
            got = {b["tool_use_id"] for b in after if b["type"] == "tool_result"}
            assert asked <= got, f"400: tool_use {sorted(asked - got)} without a tool_result in the next message"


def scripted_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Pays invoice 7 unless the transcript already holds a payment call for it."""
    calls = [b for m in messages for b in m["content"] if b["type"] == "tool_use" and b["name"] == "pay"]
    if not calls:
        return {"type": "tool_use", "id": "toolu_pay_again", "name": "pay", "input": {"invoice": 7}}
    return {"type": "text", "text": "Invoice 7 was handled before; I will not pay it again."}


async def resume(
    store: JournalSessionStore, project: str, cwd: Path, ledger: Ledger, path: str
) -> list[dict[str, Any]]:
    """The SDK's resume from the store, then one turn: returns the model's input."""
    materialized = await materialize_resume_session(ClaudeAgentOptions(session_store=store, resume=SID, cwd=str(cwd)))
    assert materialized is not None and materialized.resume_session_id == SID
    try:
        file = materialized.config_dir / "projects" / project / f"{SID}.jsonl"
        lines = [json.loads(line) for line in file.read_text().splitlines()]
    finally:
        await materialized.cleanup()
    prompt = entry(40, "user", "Did the payment go through?", leaf_of(lines)["uuid"])
    prompt["uuid"] = str(_uuid.uuid5(_uuid.NAMESPACE_URL, f"resume/{path}/prompt"))
    messages = conversation([*lines, prompt])
    provider_accepts(messages)
    reply = scripted_model(messages)
    answer = entry(41, "assistant", [reply], prompt["uuid"], stop="end_turn")
    if reply["type"] == "tool_use":  # Claude Code runs the tool the model asked for
        ledger.record(call=reply["id"], invoice=reply["input"]["invoice"])
    # The mirror sends what Claude Code wrote after resuming.
    await store.append({"project_key": project, "session_id": SID}, [prompt, answer])
    return messages


# -- copies of what a kill left ------------------------------------------------------------------------


@contextmanager
def copies(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Callable[[], str]]]:
    """A target for the child, and a maker of independent copies of it as the kill left it."""
    if backend == "sqlite":
        original = tmp_path / "killed.db"
        made = iter(range(100))

        def copy_sqlite() -> str:
            n = next(made)
            for suffix in ("", "-wal"):
                if Path(f"{original}{suffix}").exists():
                    shutil.copyfile(f"{original}{suffix}", tmp_path / f"copy-{n}.db{suffix}")
            return str(tmp_path / f"copy-{n}.db")

        yield str(original), copy_sqlite
        return
    server = request.getfixturevalue("pg_server")
    import psycopg

    base = server.dsn("contract")
    schemas: list[str] = []

    def schema() -> str:
        name = "m_" + _uuid.uuid4().hex[:12]
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        schemas.append(name)
        return f"{base}&options=-csearch_path%3D{name}"

    original = schema()

    def copy_pg() -> str:
        target = schema()
        with journal.open(original, readonly=True) as source, journal.open(target) as into:
            import_lines(into, list(export_lines(source)))
        return target

    yield original, copy_pg


# -- the restart paths ---------------------------------------------------------------------------------


def restart(path: str, target: str, key: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """Run one recovery path on ``target`` (no Claude process is alive: the child was killed)."""
    if path == "repair":
        with JournalSessionStore(target) as store:
            repair(store, key)
    elif path == "cli_recover":
        journal_cli.main(["recover", "--db", target], standalone_mode=False)
        capsys.readouterr()
    elif path == "journal_recover":
        with journal.open(target) as j:
            j.recover()
    elif path == "async_recover":

        async def recover() -> None:
            async with journal.aio.open(target) as aj:
                await aj.recover()

        asyncio.run(recover())
    elif path == "reconcile_then_repair":
        with journal.open(target) as j:
            j.reconcile()  # Claude sessions have no submissions: it leaves them to the repair
        with JournalSessionStore(target) as store:
            repair(store, key)
    elif path == "plain_resume":
        pass  # nothing: the next load sees the dead owner and recovers
    else:  # every path, each twice, in turn: nothing depends on which ran first or how often
        for _ in range(2):
            with journal.open(target) as j:
                j.recover()
            journal_cli.main(["recover", "--db", target], standalone_mode=False)
            with JournalSessionStore(target) as store:
                assert repair(store, key).recovered == ()
        capsys.readouterr()


def scene(tmp_path: Path) -> tuple[Path, str, dict[str, Any], list[dict[str, Any]]]:
    """Claude's working directory, its project key, the session's key, and the turn the child
    plays (written where the child reads it)."""
    cwd = tmp_path / "shop"
    project = project_key_for_directory(str(cwd))
    turn = first_turn()
    (tmp_path / "turn.json").write_text(json.dumps(turn))
    return cwd, project, {"project_key": project, "session_id": SID}, turn


@pytest.mark.long  # seconds a cell: run first (tests/conftest.py)
@pytest.mark.parametrize("point", KILL_POINTS)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_g9_after_a_kill_any_recovery_path_gives_the_sdk_an_answered_transcript_and_nothing_is_paid_twice(
    backend: str, point: str, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    cwd, project, key, _turn = scene(tmp_path)
    sid = journal_session_id(key)
    with copies(backend, tmp_path, request) as (target, copy):
        with JournalSessionStore(target):
            pass  # the journal exists before Claude's stand-in opens it
        ledger_file = tmp_path / "ledger.jsonl"
        child = python_child(
            CHILD, target, str(ledger_file), point, str(tmp_path / "local.jsonl"), str(tmp_path / "turn.json"), project
        )
        _, err = child.communicate(timeout=120)
        assert child.returncode == -signal.SIGKILL, err
        paid_before = Ledger(ledger_file).count(invoice=7)
        assert paid_before == (0 if point == "before_effect" else 1)
        may_have_run = point != "between_turns"
        for path in PATHS if backend == "sqlite" else PG_PATHS[point]:
            here = copy()
            if ledger_file.exists():
                shutil.copyfile(ledger_file, tmp_path / f"ledger-{path}.jsonl")
            ledger = Ledger(tmp_path / f"ledger-{path}.jsonl")
            restart(path, here, key, capsys)
            with journal.open(here) as j:  # a fresh connection, after the recovery
                store = JournalSessionStore(j)
                # The framework's view right after the recovery, whichever ran: the call answered.
                shown = asyncio.run(store.load(key))
                assert shown is not None and owed_calls(shown) == [], (path, shown)
                assert asyncio.run(store.load(key)) == shown  # the same at every read
                assert repair(store, key).recovered == ()  # the recovery had run: nothing more to do
                messages = asyncio.run(resume(store, project, cwd, ledger, path))
                results = [
                    b for m in messages for b in m["content"] if b["type"] == "tool_result" and b["tool_use_id"] == CALL
                ]
                assert len(results) == 1, (path, messages)
                assert (MARKER in str(results[0]["content"])) is may_have_run, (path, results)
                assert results[0].get("is_error", False) is may_have_run
                assert ledger.repeated("invoice") == {} and ledger.count(invoice=7) == paid_before, path
                after = asyncio.run(store.load(key))
                assert after is not None and owed_calls(after) == []
                assert after[: len(shown)] == shown  # the resume built on the view it was given
                assert conversation(after)[-1]["content"][0]["text"].startswith("Invoice 7 was handled")
                assert j.scan().clean and j.check() == [], path
                typed = [e for e in j.events(sid) if e.type in ("tool_result", "tool_result_late")]
                assert [e.data["tool_call_id"] for e in typed] == [CALL]  # one result, no late one
                assert (typed[0].data.get("metadata", {}).get("synthetic") is True) is may_have_run


def test_the_harness_refuses_an_orphan_tool_use_as_the_provider_does_and_the_model_pays_when_nothing_shows() -> None:
    prompt, use, result, answer = first_turn()
    with pytest.raises(AssertionError, match="400"):
        provider_accepts(conversation([prompt, use]))
    with pytest.raises(AssertionError, match="400"):
        provider_accepts(conversation([prompt, result]))
    provider_accepts(conversation([prompt, use, result, answer]))
    assert scripted_model(conversation([prompt]))["type"] == "tool_use"
    assert scripted_model(conversation([prompt, use, result]))["type"] == "text"


@pytest.mark.parametrize("late", ["result", "written_back", "with_reply"])
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_g5_a_real_result_mirrored_after_recovery_is_late_evidence_and_the_resumed_chain_keeps_its_answer(
    backend: str, late: str, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    # Killed after the tool returned, before the mirror sent its result; recovery answered the
    # call (MAY have run) and the session resumed from that answer. Then the mirror catches up
    # (``import_session_to_store`` from Claude's local file): the real result arrives late --
    # alone, after Claude Code wrote back the answer it resumed from, or with the reply Claude
    # Code chained to it (which then follows the answer shown).
    cwd, project, key, turn = scene(tmp_path)
    with copies(backend, tmp_path, request) as (target, _copy):
        with JournalSessionStore(target):
            pass
        child = python_child(
            CHILD, target, str(tmp_path / "ledger.jsonl"), "before_stored", str(tmp_path / "local.jsonl"),
            str(tmp_path / "turn.json"), project,
        )  # fmt: skip
        _, err = child.communicate(timeout=120)
        assert child.returncode == -signal.SIGKILL, err
        with JournalSessionStore(target) as store:
            repair(store, key)
            shown = store.load_sync(key)
            assert shown is not None
            if late == "written_back":  # Claude Code wrote back the answer it resumed from: stored once
                store.append_sync(key, [e for e in shown if e["uuid"] not in {t["uuid"] for t in turn}])
            asyncio.run(resume(store, project, cwd, Ledger(tmp_path / "ledger.jsonl"), "late"))
            store.append_sync(key, [turn[2], turn[3]] if late == "with_reply" else [turn[2]])  # the real result
            after = store.load_sync(key)
            assert after is not None and after[: len(shown)] == shown  # every read shows the same answer
            uuids = {e["uuid"] for e in after}
            assert all(e["parentUuid"] is None or e["parentUuid"] in uuids for e in after)  # one chain, no gap
            assert turn[2]["uuid"] not in uuids
            messages = conversation(after)
            provider_accepts(messages)
            results = [b for m in messages for b in m["content"] if b["type"] == "tool_result"]
            assert len(results) == 1 and MARKER in str(results[0]["content"])
            last = messages[-1]["content"][0]["text"]  # the newest leaf: the resumed exchange, or the reply
            assert last.startswith("Invoice 7 is paid" if late == "with_reply" else "Invoice 7 was handled")
            # The typed log agrees: recovery's answer is the result, the real one late evidence.
            typed = [e for e in store.journal.events(journal_session_id(key)) if e.type.startswith("tool_result")]
            assert [e.type for e in typed] == ["tool_result", "tool_result_late"]
            assert typed[1].data["content"] == "paid"


def test_g8_repair_of_a_main_key_answers_the_calls_its_subagents_transcripts_owe(tmp_path: Path) -> None:
    # The host lives on; the Claude Code process died inside a subagent's tool: both transcripts
    # hold an open turn. ``repair`` of the main key covers the subagent's, as ``delete`` does.
    key = {"project_key": "-home-ada-shop", "session_id": SID}
    sub = {**key, "subpath": "subagents/agent-a1b2"}
    prompt = entry(0, "user", "Use a helper to pay invoice 9", None)
    task = entry(
        1, "assistant", [{"type": "tool_use", "id": "toolu_task", "name": "Task", "input": {}}], prompt["uuid"]
    )
    ask = entry(2, "user", "Pay invoice 9", None, isSidechain=True)
    pay = entry(
        3, "assistant", [{"type": "tool_use", "id": "toolu_pay_9", "name": "pay", "input": {}}], ask["uuid"],
        isSidechain=True,
    )  # fmt: skip
    with JournalSessionStore(tmp_path / "a.db") as store:
        store.append_sync(key, [prompt, task])
        store.append_sync(sub, [ask, pay])
        repaired = repair(store, key)
        assert [(e.session_id, e.type) for e in repaired.recovered] == [
            (journal_session_id(key), "tool_result"), (journal_session_id(key), "turn_end"),
            (journal_session_id(sub), "tool_result"), (journal_session_id(sub), "turn_end"),
        ]  # fmt: skip
        assert repaired.unanswered == ()
        for each in (key, sub):
            assert owed_calls(store.load_sync(each) or []) == []
        assert store.journal.scan().clean
        assert repair(store, key).recovered == ()  # idempotent


def test_g12_an_async_journal_is_refused_with_what_to_pass_instead(tmp_path: Path) -> None:
    async def make() -> None:
        async with journal.aio.open(tmp_path / "a.db") as aj:
            with pytest.raises(journal.InvalidArgument, match=r"pass a journal\.Journal"):
                JournalSessionStore(aj)  # type: ignore[arg-type]

    asyncio.run(make())
