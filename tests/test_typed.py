"""Typed faces (DESIGN §12, §13): ``py.typed``, one declaration of each public method's kind,
async twins with the same parameters, typed for users (checked by running mypy on a user's
file), handles that depend on a protocol, and ``journal.__all__`` against docs/api.md.
"""

from __future__ import annotations

import ast
import asyncio
import builtins as builtins_module
import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import journal
import journal.aio
import journal.testing
from journal.aio import AsyncJournal
from journal.engine import KINDS, Journal, Kind

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "journal"

# The public names of ``Journal`` that are the file's, not calls with a twin of their kind: the
# async face has its own ``path``, ``durability``, ``readonly`` and ``close``.
THE_FILES = {"path", "durability", "readonly", "close"}
# A twin takes the async handles where its method takes the sync ones...
WIDER = {"Turn": "Turn | AsyncTurn", "Claim": "Claim | AsyncClaim", "Turn | None": "Turn | AsyncTurn | None"}
# ... and gives them back (``turn`` and ``dispatch`` are also entered with ``async with``).
HANDLES = {"Turn": "AsyncTurn", "Claim | None": "AsyncClaim | None", "Iterator[Turn]": "_TurnScope"}
SCOPES = {"turn": "_TurnScope", "dispatch": "_Dispatching"}


def test_py_typed_is_in_the_package_and_in_its_package_data() -> None:
    assert (PACKAGE / "py.typed").is_file()
    # (read as text: tomllib arrives with Python 3.11, and the package supports 3.10)
    section = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    (listed,) = re.findall(r"^journal = \[(.*)\]$", section, flags=re.M)
    assert '"py.typed"' in listed.split(", ")


def test_every_public_method_of_journal_declares_its_kind_once() -> None:
    public = {name for name in dir(Journal) if not name.startswith("_")} - THE_FILES
    assert set(KINDS) == public
    assert all(isinstance(kind, Kind) for kind in KINDS.values())
    # The calls that commit in steps of their own (and may run tools or callbacks) run alone; a
    # dispatch is the one write whose commit is synced (G6: durable before the tool runs).
    assert {name for name, kind in KINDS.items() if kind is Kind.ALONE} == {
        "recover", "recover_effects", "reconcile", "purge", "checkpoint",
    }  # fmt: skip
    assert {name for name, kind in KINDS.items() if kind is Kind.SYNCED} == {"dispatch"}


def _parameters(function: Any) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]  # without self


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_method_has_an_async_twin_with_its_parameters(name: str) -> None:
    sync, twin = getattr(Journal, name), AsyncJournal.__dict__.get(name)
    assert twin is not None, f"AsyncJournal has no twin of Journal.{name}"
    wanted, got = _parameters(sync), _parameters(twin)
    assert [(p.name, p.kind, p.default) for p in got] == [(p.name, p.kind, p.default) for p in wanted]
    for mine, theirs in zip(got, wanted):
        assert mine.annotation in (theirs.annotation, WIDER.get(theirs.annotation)), (name, mine.name)
    returns = inspect.signature(twin).return_annotation
    expected = inspect.signature(sync).return_annotation
    if name in SCOPES:  # awaited or entered: `async with aj.turn(s)`, `async with aj.dispatch(...)`
        assert not inspect.iscoroutinefunction(twin)
        assert returns == SCOPES[name]
    else:
        assert inspect.iscoroutinefunction(twin), name
        assert returns in (expected, HANDLES.get(expected)), name
    assert twin.__doc__, name  # written out, or its method's


def _calls_in(node: ast.AST) -> set[str]:
    """The ``Journal`` methods a twin runs: the ``X`` of each ``self._call(Journal.X, ...)``."""
    found = set()
    for call in ast.walk(node):
        if (
            isinstance(call, ast.Call)
            and ast.unparse(call.func) in ("self._call", "functools.partial")
            and call.args
            and ast.unparse(call.args[0]) == "self._call"
        ):
            call = ast.Call(func=call.args[0], args=call.args[1:], keywords=[])
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "self._call" and call.args:
            target = ast.unparse(call.args[0])
            assert target.startswith("Journal."), target
            found.add(target.removeprefix("Journal."))
    return found


def test_every_twin_runs_its_own_method_so_it_runs_as_that_method_declares() -> None:
    # ``_call`` picks the reader pool, the writer's batch, a synced batch or a run alone from
    # the declaration of the method it is given: a twin that ran another method would run as
    # that one's kind. Read from the source, so that every twin is covered.
    tree = ast.parse((PACKAGE / "aio.py").read_text())
    (face,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "AsyncJournal"]
    twins = {node.name: node for node in face.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for name in KINDS:
        if name == "turn":  # a scope: it runs the twins `turn_start` or `take_over`, writes as it is
            assert KINDS["turn"] is KINDS["turn_start"] is KINDS["take_over"]
            continue
        assert _calls_in(twins[name]) == {name}, name
    assert "setattr(" not in (PACKAGE / "aio.py").read_text(), "twins are written out, not set on the class"


def test_a_read_twin_commits_nothing_and_a_write_twin_commits_its_batch(tmp_path: Path) -> None:
    async def main() -> list[int]:
        async with journal.aio.open(tmp_path / "j.db") as aj:
            commits = [aj.commits]
            await aj.create_session("s")  # a write: one batch
            commits.append(aj.commits)
            assert await aj.count("s") == 0  # a read: on a reader connection
            assert await aj.events("s") == []
            commits.append(aj.commits)
            await aj.checkpoint()  # runs alone, outside the writer's batches
            commits.append(aj.commits)
            await aj.append("s", "user_message", {"content": "hi"})
            commits.append(aj.commits)
            return commits

    assert asyncio.run(main()) == [0, 1, 1, 1, 2]


# -- typed for users: mypy on a user's file ------------------------------------------------------

USER_FILE = """
    from __future__ import annotations

    import journal
    import journal.aio
    from journal.claims import ClaimCalls
    from journal.results import ResultCalls
    from journal.turns import TurnCalls


    async def main() -> None:
        async with journal.aio.open("agent.db") as aj:
            reveal_type(await aj.append("s", "user_message", {"content": "hi"}))
            reveal_type(await aj.events("s", since=3))
            reveal_type(await aj.count("s"))
            reveal_type(await aj.session("s"))
            reveal_type(await aj.turn_start("s"))
            reveal_type(await aj.claim(owner="w"))
            reveal_type(await aj.recover())
            async with aj.turn("s") as turn:
                reveal_type(turn)
                reveal_type(turn.step_number)
                reveal_type(await turn.assistant("", tool_calls=[]))
                async with turn.dispatch("c1") as call:
                    reveal_type(call)
                    reveal_type(await call.result("3"))
            await aj.append(1, "user_message", {})  # ERROR session_id
            await aj.append("s", "user_message", {}, keey="k")  # ERROR keyword
            await aj.count()  # ERROR missing


    def sync(path: str) -> None:
        with journal.open(path) as j:
            reveal_type(j.append("s", "user_message", {}))
            turns: TurnCalls = j
            results: ResultCalls = j
            claims: ClaimCalls = j
            j.count(3)  # ERROR sync
"""


def test_mypy_sees_the_async_face_typed_and_refuses_a_wrong_argument(tmp_path: Path) -> None:
    source = textwrap.dedent(USER_FILE)
    (tmp_path / "user.py").write_text(source)
    (tmp_path / "mypy.ini").write_text("[mypy]\nstrict = True\nignore_missing_imports = True\n")
    env = dict(os.environ, MYPYPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--follow-imports=silent", "--cache-dir",
         str(tmp_path / "cache"), "--no-error-summary", "--hide-error-context", "user.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = [line for line in run.stdout.splitlines() if line.startswith("user.py:")]
    revealed = {
        int(line.split(":")[1]): line.split('Revealed type is "')[1].rstrip('"') for line in lines if "Revealed" in line
    }

    def at(fragment: str) -> int:
        return next(i for i, text in enumerate(source.splitlines(), 1) if fragment in text)

    assert revealed == {
        at('reveal_type(await aj.append("s"'): "journal.model.Event",
        at("aj.events"): "list[journal.model.Event]",
        at("aj.count"): "int",
        at("aj.session"): "journal.model.Session",
        at("aj.turn_start"): "journal.aio_handles.AsyncTurn",
        at("aj.claim"): "journal.aio_handles.AsyncClaim | None",
        at("aj.recover"): "list[journal.recovery.RecoveryResult]",
        at("reveal_type(turn)"): "journal.aio_handles.AsyncTurn",
        at("turn.step_number"): "int | None",
        at("turn.assistant"): "journal.model.Event",
        at("reveal_type(call)"): "journal.aio_handles.AsyncDispatch",
        at("call.result"): "journal.results.PutResult",
        at("reveal_type(j.append"): "journal.model.Event",
    }, run.stdout + run.stderr
    errors = {int(line.split(":")[1]) for line in lines if ": error:" in line}
    assert errors == {i for i, text in enumerate(source.splitlines(), 1) if "# ERROR" in text}, run.stdout


def test_handles_depend_on_a_protocol_not_on_the_facade() -> None:
    # Turn, Dispatch and Claim call back into the few methods of their protocol (TurnCalls,
    # ResultCalls, ClaimCalls); the mypy test above checks that a Journal is each of them.
    for module in ("turns", "results", "claims"):
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        imported = {
            node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module is not None
        }
        assert "journal.engine" not in imported, module
        assert "journal" not in {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
    import journal.claims
    import journal.results
    import journal.turns

    for handle, protocol in (
        (journal.turns.Turn, "TurnCalls"),
        (journal.results.Dispatch, "ResultCalls"),
        (journal.claims.Claim, "ClaimCalls"),
    ):
        assert inspect.get_annotations(handle)["journal"] == protocol
        assert getattr(sys.modules[handle.__module__], protocol)._is_protocol


# -- the exported names against docs/api.md -------------------------------------------------------

API = ROOT / "docs" / "api.md"
NAMES_SECTION = "## Names"


def _listed_names() -> list[str]:
    """The names the section "Names" of docs/api.md lists: each `Name` in its tables' first column."""
    text = API.read_text()
    assert NAMES_SECTION in text
    section = text.split(NAMES_SECTION, 1)[1].split("\n## ", 1)[0]
    names = []
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            names += re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", line.split("|")[1])
    return names


def test_journal_all_is_the_list_of_names_documented_in_docs_api_md() -> None:
    listed = _listed_names()
    assert len(listed) == len(set(listed)), "a name is listed twice"
    assert sorted(listed) == sorted(journal.__all__)
    for name in journal.__all__:
        assert hasattr(journal, name), name


def test_every_class_docs_api_md_names_is_exported() -> None:
    # A class the text names in code (a result's type, an error, a handle) is importable from
    # `journal`, from one of the modules the text gives a section (`journal.aio`,
    # `journal.testing`), or is named with its module (`journal.preview.Clipped`).
    text = re.sub(r"```.*?```", "", API.read_text(), flags=re.S)
    code = " ".join(re.findall(r"`([^`\n]+)`", text))
    qualified = set(re.findall(r"journal(?:\.[a-z_]+)+\.([A-Z][A-Za-z0-9]+)", code))
    named = set(re.findall(r"(?<![.\w])([A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+|[A-Z][a-z]{3,})\b", code))
    exported = {*journal.__all__, *journal.aio.__all__, *journal.testing.__all__}
    python = {name for name in named if hasattr(builtins_module, name) or hasattr(asyncio, name)}
    missing = sorted(named - exported - qualified - python)
    assert missing == [], f"docs/api.md names {missing}: export them, or name their module"
    assert {"AsyncJournal", "Session", "SessionTotals", "PurgeResult", "Disagreement"} <= named
