"""The examples under examples/ run offline, each in a fresh process, and say what they show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("langgraph_agent.py", "none repeated"),
        ("claude_store.py", "clean: no unfinished work"),
        ("openai_agents_bot.py", "(B-2 once)"),
        ("adk_agent.py", "(B-2 once)"),
        ("pydantic_ai_agent.py", "(B-2 once)"),
        ("replay_plain.py", "replay, one argument changed: diverged at turn 1 step 2"),
        ("replay_openai_agents.py", "payments made by the replay: 0"),
    ],
)
def test_an_example_runs_offline_and_shows_its_point(tmp_path: Path, script: str, expected: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
    assert list(tmp_path.iterdir()) == []  # they write only to their own temporary directories
