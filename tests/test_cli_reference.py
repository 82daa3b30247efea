"""docs/cli.md's reference section is generated from the click commands and kept up to date."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from journal.cli import main, reference

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def _section(text: str) -> str:
    return text.split(reference.BEGIN, 1)[1].split(reference.END, 1)[0]


def test_the_reference_in_docs_cli_md_is_what_the_commands_say() -> None:
    document = DOCS.read_text(encoding="utf-8")
    assert reference.splice(document, reference.render()) == document, (
        "docs/cli.md is out of date with the commands: run `python -m journal.cli.reference`"
    )


def _visible_commands() -> list[str]:
    return sorted(name for name, command in main.commands.items() if not command.hidden)


@pytest.mark.parametrize("name", _visible_commands())
def test_each_command_has_its_usage_arguments_and_options_in_the_reference(name: str) -> None:
    blocks = re.split(r"^### ", reference.render(), flags=re.MULTILINE)
    [block] = [b for b in blocks if b.startswith(f"`journal {name}`\n")]
    command = main.commands[name]
    assert f"Usage: journal {name} [OPTIONS]" in block
    flat = " ".join(block.split())  # the help is wrapped at the fixed width
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert all(opt in block for opt in param.opts), (name, param.opts)
            if param.help:
                assert " ".join(param.help.split()) in flat, (name, param.opts)
        elif isinstance(param, click.Argument):
            assert "Arguments:" in block and param.human_readable_name in block


def test_the_reference_does_not_depend_on_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = reference.render()
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setattr("shutil.get_terminal_size", lambda *a, **k: os.terminal_size((40, 24)))
    assert reference.render() == wide
    assert max(len(line) for line in wide.splitlines()) <= reference.WIDTH


def _stale_copy(tmp_path: Path) -> Path:
    prose_before, prose_after = "# Title\n\nHand-written prose.\n\n", "\n\nMore prose after.\n"
    path = tmp_path / "cli.md"
    path.write_text(f"{prose_before}{reference.BEGIN}\nold text\n{reference.END}{prose_after}", encoding="utf-8")
    return path


def test_check_reports_a_stale_file_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _stale_copy(tmp_path)
    before = path.read_bytes()
    assert reference.run(["--check", str(path)]) == 1
    assert path.read_bytes() == before
    assert "run `python -m journal.cli.reference" in capsys.readouterr().err


def test_rewriting_replaces_only_the_text_between_the_markers(tmp_path: Path) -> None:
    path = _stale_copy(tmp_path)
    assert reference.run([str(path)]) == 0
    text = path.read_text(encoding="utf-8")
    assert text.startswith(f"# Title\n\nHand-written prose.\n\n{reference.BEGIN}\n")
    assert text.endswith(f"{reference.END}\n\nMore prose after.\n")
    assert "old text" not in text and "### `journal show`" in text
    assert reference.run(["--check", str(path)]) == 0  # a second run changes nothing
    assert reference.splice(text, reference.render()) == text


@pytest.mark.parametrize(
    "text",
    ["no markers", f"{reference.END}\n{reference.BEGIN}\n", f"{reference.BEGIN}\n{reference.BEGIN}\n{reference.END}"],
    ids=["none", "reversed", "twice"],
)
def test_a_document_without_one_pair_of_markers_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cli.md"
    path.write_text(text, encoding="utf-8")
    assert reference.run([str(path)]) == 2
    assert path.read_text(encoding="utf-8") == text


def test_the_module_runs_as_a_command(tmp_path: Path) -> None:
    path = _stale_copy(tmp_path)
    stale = subprocess.run(
        [sys.executable, "-m", "journal.cli.reference", "--check", str(path)], capture_output=True, text=True
    )
    assert stale.returncode == 1 and "out of date" in stale.stderr
    subprocess.run([sys.executable, "-m", "journal.cli.reference", str(path)], check=True, capture_output=True)
    assert _section(path.read_text(encoding="utf-8")).strip() == reference.render().strip()


def test_a_missing_document_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert reference.run([str(tmp_path / "nowhere.md")]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "nowhere.md").exists()


def test_the_reference_is_the_same_after_a_command_was_invoked_alone() -> None:
    """click caches a command's help option from the first context that asks: a command run
    alone first (as a test's CliRunner runs `torture`) has plain --help, without the group's -h.
    The reference shows what `journal torture --help` shows, whatever ran before it (in a fresh
    process, so that nothing rendered the reference first)."""
    code = (
        "import pathlib, sys\n"
        "from click.testing import CliRunner\n"
        "from journal.cli import reference\n"
        "from journal.cli.torture import torture\n"
        "CliRunner().invoke(torture, ['--help'])\n"
        "text = reference.render()\n"
        "sys.exit(0 if '-h, --help' in text.split('### `journal torture`', 1)[1] else 1)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
