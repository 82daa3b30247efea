"""The README's examples run, and its claims point at tests that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_python_examples_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README, re.DOTALL) if not b.startswith("# (sketch")]
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert (tmp_path / "agent.db").exists()


@pytest.mark.parametrize(
    "reference", sorted(set(re.findall(r"`(tests/(?:contract/)?test_\w+\.py)(?:::(test_\w+?)\*?)?`", README)))
)
def test_every_test_the_readme_names_exists(reference: tuple[str, str]) -> None:
    path, prefix = reference
    text = (ROOT / path).read_text()
    if prefix:
        assert re.search(rf"def {prefix}", text), f"{path} has no test starting with {prefix}"


def test_the_readme_gives_the_two_setup_commands() -> None:
    assert "journal demo" in README
    assert "python -m pytest" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest" in ci and ".[test]" in ci


def test_ci_holds_the_lint_and_format_rules_before_the_tests_on_every_python_folder() -> None:
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in commands if line and not line.startswith("#")]
    assert "set -euo pipefail" in commands  # a failing check stops CI
    # Every folder of the project holding Python (hidden ones, such as a virtualenv, and build output aside).
    paths = [path.relative_to(ROOT).parts for path in ROOT.rglob("*.py")]
    folders = {
        parts[0] for parts in paths if not any(p.startswith(".") for p in parts) and parts[0] not in ("build", "dist")
    }
    assert {"journal", "tests"} <= folders

    def position(prefix: str) -> int:
        [index] = [i for i, line in enumerate(commands) if line.startswith(prefix)]
        checked = set(commands[index].removeprefix(prefix).split())
        assert folders <= checked, f"{prefix} leaves out {sorted(folders - checked)}"
        return index

    lint, layout = position("python -m ruff check "), position("python -m ruff format --check ")
    tests = next(i for i, line in enumerate(commands) if line.startswith("python -m pytest"))
    assert lint < tests and layout < tests
