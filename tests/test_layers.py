"""The layers of DESIGN §12 hold: read from the source's imports, so a change that breaks one fails here.

- pure modules (``journal/pure/``) import only the model and the errors;
- only the store (``journal/store/``) and the test VFS import a database driver;
- nothing in the library imports the CLI (or click), the viewer or the adapters;
- the library's modules import each other without a cycle;
- the parts the log asks while it appends (the fork chain, where a call and a turn stand) sit
  below it: they never import ``journal.log``, they reach it through the ``Log`` they are given;
- the parts of the kill harness and of the crash campaign sit below the module that gathers them
  (and re-exports their names): the witness and the judge never import ``journal.testing.harness``,
  the campaign's parts never import ``journal.testing.torture``;
- the fork chain is walked in one module, ``journal.lineage``: no other part of the library
  reads a session's ``parent_id`` to follow it.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "journal"
DRIVERS = {"apsw", "sqlite3", "psycopg", "psycopg2", "asyncpg"}
FRONTS = ("journal.cli", "journal.serve", "journal.adapters")
PURE_MAY_IMPORT = {"journal.model", "journal.errors"}
BELOW_THE_LOG = ("journal.lineage", "journal.results", "journal.turns")
PARTS_OF = {
    "journal.testing.harness": ("journal.testing.witness", "journal.testing.verdict"),
    "journal.testing.torture": (
        "journal.testing.torture_plan", "journal.testing.torture_trial", "journal.testing.torture_report",
        "journal.testing.pgtorture",
    ),
}  # fmt: skip
# A statement that reads a session's parent to follow it: the fork-chain walk. The listing
# (journal.sessions) shows the column, and the store may inspect its own schema.
WALK = re.compile(r"\bSELECT\b.*\bparent_id\b.*\bFROM sessions\b", re.DOTALL | re.IGNORECASE)
WALK_MAY_READ = ("journal.lineage", "journal.sessions", "journal.store")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(path: Path, package: set[str], *, top_level_only: bool) -> set[str]:
    """The modules a file imports (``from a import b`` counts as ``a.b`` when that is a module
    of the package, else as ``a``); imports under ``if TYPE_CHECKING:`` are not run, so skipped."""
    found: set[str] = set()

    def visit(nodes: list[Any]) -> None:
        for node in nodes:
            if _is_type_checking(node):
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found.add(full if full in package else node.module)
            elif top_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit(inner)

    tree = ast.parse(path.read_text(encoding="utf-8"))
    visit(tree.body)
    return found


def walks(path: Path) -> bool:
    """Whether the file holds a statement that follows a session to its parent."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    texts = (node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str))
    return any(WALK.search(text) for text in texts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def violations(root: Path) -> list[str]:
    """Every broken layer rule in the package at ``root``, one line each."""
    out: list[str] = []
    mods = modules(root)
    for name, path in mods.items():
        used = imports(path, set(mods), top_level_only=False)
        ours = {m for m in used if m == "journal" or m.startswith("journal.")}
        if name.startswith("journal.pure"):
            bad = {m for m in ours if not m.startswith("journal.pure") and m not in PURE_MAY_IMPORT}
            out += [f"{name}: a pure module imports {m}" for m in sorted(bad)]
        if not (name.startswith("journal.store") or name == "journal.testing.faultvfs"):
            out += [f"{name}: imports the driver {m}" for m in sorted(used) if m.split(".")[0] in DRIVERS]
        if not name.startswith(FRONTS):
            out += [f"{name}: the library imports {m}" for m in sorted(ours) if m.startswith(FRONTS)]
            out += [f"{name}: the library imports click" for m in sorted(used) if m.split(".")[0] == "click"]
            if not name.startswith(WALK_MAY_READ) and walks(path):
                out.append(f"{name}: walks the fork chain itself (journal.lineage is its one walk)")
        if name in BELOW_THE_LOG and "journal.log" in ours:
            out.append(f"{name}: imports journal.log, which asks it while it appends")
        wholes = [whole for whole, parts in PARTS_OF.items() if name in parts and whole in ours]
        out += [f"{name}: a part of {whole} imports it" for whole in wholes]
    graph = {
        name: {m for m in imports(path, set(mods), top_level_only=True) if m in mods and m != name}
        for name, path in mods.items()
    }
    out += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group) + [min(group)])

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                connect(node)
    finally:
        sys.setrecursionlimit(limit)
    return groups


def test_the_package_keeps_its_layers() -> None:
    assert violations(PACKAGE) == []


def test_the_layers_under_test_exist() -> None:
    names = modules(PACKAGE)
    assert any(n.startswith("journal.pure.") for n in names)
    assert any(n.startswith("journal.store.") for n in names)
    assert any(n.startswith("journal.cli") for n in names)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "journal"
    for rel, text in {"__init__.py": "", "model.py": "", "errors.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"pure/__init__.py": "", "pure/plan.py": "from journal import log\n", "log.py": ""},
         "journal.pure.plan: a pure module imports journal.log"),
        ({"turns.py": "import apsw\n"}, "journal.turns: imports the driver apsw"),
        ({"log.py": "def f():\n    import sqlite3\n"}, "journal.log: imports the driver sqlite3"),
        ({"cli/__init__.py": "", "log.py": "from journal.cli import main\n"},
         "journal.log: the library imports journal.cli"),
        ({"log.py": "import click\n"}, "journal.log: the library imports click"),
        ({"a.py": "import journal.b\n", "b.py": "from journal import a\n"},
         "import cycle: journal.a -> journal.b -> journal.a"),
        ({"log.py": "", "results.py": "def f():\n    from journal import log\n"},
         "journal.results: imports journal.log, which asks it while it appends"),
        ({"testing/__init__.py": "", "testing/harness.py": "",
          "testing/verdict.py": "def f():\n    from journal.testing import harness\n"},
         "journal.testing.verdict: a part of journal.testing.harness imports it"),
        ({"audit.py": 'PARENT = (\n    "SELECT parent_id, seed_length "\n    "FROM sessions WHERE id = ?"\n)\n'},
         "journal.audit: walks the fork chain itself (journal.lineage is its one walk)"),
    ],
    ids=["pure-imports-a-part", "driver-outside-store", "driver-in-a-function", "library-imports-cli", "click",
         "cycle", "a-part-below-the-log-imports-it", "a-part-of-the-harness-imports-it", "a-second-fork-chain-walk"],
)  # fmt: skip
def test_each_broken_rule_is_reported(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    assert expected in violations(_tree(tmp_path, files))


def test_type_checking_imports_and_the_store_and_test_vfs_are_allowed(tmp_path: Path) -> None:
    files = {
        "store/__init__.py": "", "store/sqlite.py": "import apsw\n", "testing/__init__.py": "",
        "testing/faultvfs.py": "import apsw\n",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from journal import b\n",
        "b.py": "import journal.a\n",
    }  # fmt: skip
    assert violations(_tree(tmp_path, files)) == []
