"""The Claude Agent SDK's transcripts in a journal, offline: no Claude process, no network.

With a real agent, the store is one option::

    options = ClaudeAgentOptions(session_store=JournalSessionStore("agent.db"), session_store_flush="eager")
    async for message in query(prompt="Deploy it", options=options): ...

Here we play the SDK's part: append a transcript in Claude Code's own entry format, as the SDK
mirrors it, ending in a ``tool_use`` whose result never came (the process was killed while the
tool ran). Then we look with the journal's eyes: ``journal show`` and ``journal scan`` see the
pending call; ``repair(store, key)`` (or ``journal recover`` from a shell: the same one recovery)
records that it MAY have run, and ``load`` -- what the SDK resumes from -- shows that answer in
Claude's own shape, right after the call, so a resume sends no orphan call and nothing re-runs.

Run:  python examples/claude_store.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from claude_agent_sdk import SessionKey

from journal.adapters.claude import JournalSessionStore, arepair, journal_session_id
from journal.cli import main as journal_cli

SESSION = "3f6c2a1e-9b8d-4c7e-a5f4-0e1d2c3b4a59"
KEY: SessionKey = {"project_key": "-home-ada-shop", "session_id": SESSION}


def entry(n: int, kind: str, content: object, **extra: object) -> dict[str, Any]:
    """One transcript line, as Claude Code writes it (abridged: it has a few more fields)."""
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message |= {"id": f"msg_{n}", "model": "claude-sonnet-4-5", "stop_reason": extra.pop("stop", None)}
    return {
        "type": kind, "uuid": f"00000000-0000-4000-8000-{n:012d}",
        "parentUuid": f"00000000-0000-4000-8000-{n - 1:012d}" if n else None,
        "sessionId": SESSION, "cwd": "/home/ada/shop", "timestamp": f"2025-06-01T10:00:{n:02d}.000Z",
        "message": message, **extra,
    }  # fmt: skip


TRANSCRIPT: list[Any] = [
    entry(0, "user", "Run the tests"),
    entry(
        1,
        "assistant",
        [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "pytest -q"}}],
        stop="tool_use",
    ),
    entry(2, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 passed"}]),
    entry(3, "assistant", [{"type": "text", "text": "Tests pass."}], stop="end_turn"),
    entry(4, "user", "Deploy it"),
    entry(
        5,
        "assistant",
        [{"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "./deploy.sh --prod"}}],
        stop="tool_use",
    ),
    # ... killed here, while the deploy ran: no tool_result for toolu_2.
]


def cli(*args: str) -> None:
    print(f"\n$ journal {' '.join(args)}")
    journal_cli.main(list(args), standalone_mode=False)


async def demo(db: Path) -> None:
    async with JournalSessionStore(db) as store:
        await store.append(KEY, TRANSCRIPT[:3])  # the SDK flushes in batches...
        await store.append(KEY, TRANSCRIPT[1:])  # ...and retries: uuids are stored once
        assert await store.load(KEY) == TRANSCRIPT
        session = journal_session_id(KEY)
        cli("show", "--db", str(db), session)
        cli("scan", "--db", str(db))
        repaired = await arepair(store, KEY)  # at restart, before resuming the session
        print(f"\nrepair recovered: {[e.type for e in repaired.recovered]}")
        *_, answer = await store.load(KEY) or []  # what a resume sends Claude: the call answered
        (block,) = answer["message"]["content"]  # type: ignore[typeddict-item]
        said = block["content"][block["content"].find("It MAY") :][:40]
        print(f"load shows, in Claude's shape: {block['type']} for {block['tool_use_id']}: {said}...")
        cli("scan", "--db", str(db))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(demo(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tmp) / "agent.db"))
