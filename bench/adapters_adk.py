"""The ADK adapter against ADK's own ``DatabaseSessionService`` on SQLite, per step of a one-tool loop.

    python bench/adapters_adk.py [--steps 200] [--rounds 3] [--json]

A step is one user turn of a scripted (offline) ``LlmAgent``: the model asks for one tool, the
tool runs, the model answers. Each contender runs ``--steps`` steps on one session in a fresh
file: ``JournalSessionService`` with ``JournalPlugin`` (``durability="full"``: WAL,
synchronous=FULL; the dispatch committed and synced before the tool runs) against
``DatabaseSessionService("sqlite+aiosqlite:///...")`` (ADK's SQLAlchemy store; the aiosqlite
driver is what it needs for SQLite, and it is installed; SQLite's defaults: rollback journal,
synchronous=FULL). The figures are the median time per step over the rounds and the bytes on
disk (database + WAL after a checkpoint) at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore")
logging.getLogger("google_adk").setLevel(logging.ERROR)


def _file_bytes(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal"), Path(f"{path}-journal")) if p.exists())


def _checkpoint(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _runner(service: Any, plugins: list[Any]) -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.apps.app import App
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.genai import types

    class OneTool(BaseLlm):
        model: str = "scripted-one-tool"

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            last = llm_request.contents[-1]
            if any(p.function_response for p in last.parts or []):
                yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="done")]))
                return
            n = len(llm_request.contents)
            call = types.FunctionCall(id=f"call-{n}", name="lookup", args={"n": n})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))

    def lookup(n: int) -> dict[str, int]:
        """Look a number up."""
        return {"value": n * 2}

    agent = LlmAgent(name="worker", model=OneTool(), tools=[lookup])
    return Runner(app=App(name="bench", root_agent=agent, plugins=plugins), session_service=service)


async def _loop(service: Any, plugins: list[Any], steps: int) -> float:
    from google.genai import types

    runner = _runner(service, plugins)
    await service.create_session(app_name="bench", user_id="u", session_id="s")
    start = time.perf_counter()
    for i in range(steps):
        message = types.Content(role="user", parts=[types.Part(text=f"step {i}")])
        async for _ in runner.run_async(user_id="u", session_id="s", new_message=message):
            pass
    return (time.perf_counter() - start) / steps


def _journal_round(steps: int, tmp: Path) -> tuple[float, int]:
    from journal.adapters.adk import JournalPlugin, JournalSessionService

    path = tmp / "journal.db"

    async def go() -> float:
        service = JournalSessionService(str(path))
        try:
            return await _loop(service, [JournalPlugin(service)], steps)
        finally:
            await service.close()

    per_step = asyncio.run(go())
    _checkpoint(path)
    return per_step, _file_bytes(path)


def _database_round(steps: int, tmp: Path) -> tuple[float, int]:
    from google.adk.sessions.database_session_service import DatabaseSessionService

    path = tmp / "adk.db"

    async def go() -> float:
        service = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
        try:
            return await _loop(service, [], steps)
        finally:
            await service.close()

    per_step = asyncio.run(go())
    return per_step, _file_bytes(path)


def adk_rows(steps: int = 200, rounds: int = 3) -> dict[str, Any]:
    """Median time per step (ms) and bytes on disk for the journal and for DatabaseSessionService,
    interleaved round by round, and their ratios."""
    times: dict[str, list[float]] = {"journal": [], "database": []}
    sizes: dict[str, int] = {}
    contenders = (("journal", _journal_round), ("database", _database_round))
    for _name, one in contenders:  # warm up: ADK's first run in a process pays its imports and caches
        with tempfile.TemporaryDirectory() as tmp:
            one(1, Path(tmp))
    for r in range(rounds):
        for name, one in contenders[:: 1 if r % 2 == 0 else -1]:  # interleaved, the order rotated
            with tempfile.TemporaryDirectory() as tmp:
                per_step, size = one(steps, Path(tmp))
            times[name].append(per_step)
            sizes[name] = size
    rows = {
        name: {"ms_per_step": round(statistics.median(times[name]) * 1000, 3), "bytes": sizes[name]} for name in times
    }
    return {
        "steps": steps,
        "rounds": rounds,
        "rows": rows,
        "time_ratio": round(rows["journal"]["ms_per_step"] / rows["database"]["ms_per_step"], 2),
        "bytes_ratio": round(rows["journal"]["bytes"] / rows["database"]["bytes"], 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = adk_rows(args.steps, args.rounds)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    print(f"one-tool ADK loop, {result['steps']} steps, median of {result['rounds']} rounds")
    for name, row in result["rows"].items():
        print(f"  {name:9} {row['ms_per_step']:9.3f} ms/step {row['bytes']:>12,} bytes")
    print(f"  journal/database: time {result['time_ratio']}x, bytes {result['bytes_ratio']}x")


if __name__ == "__main__":
    main()
