"""Every statement the parts use prepares on both backends (DESIGN §12: the dialect lives in the store).

The statements are found, not listed: every SQL string literal in ``journal/`` outside ``store/``
(a constant, an implicit or ``+`` concatenation, an f-string of module-level names), found in the
source by its AST and resolved against the imported module; every statement of each backend's
``journal.store.statements.Statements`` (its own dialect only); and, for a module that builds
SQL at run time from local values, one statement of each shape its ``statement_shapes(sql)``
gives (a module with such a builder must have that function: the test says which). Each is
prepared on SQLite (``EXPLAIN`` with a NULL for each binding) and on PostgreSQL (``EXPLAIN`` with
untyped NULL parameters, against a schema made by schema_pg.sql), so a statement that works on
one backend only fails here, never in production. ``journal/testing/`` is left out: its tools
speak to one backend directly, past the parts (a crash harness's raw SQL).
"""

from __future__ import annotations

import ast
import importlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

import journal
from journal.store import postgres_sql, sqlite_sql
from journal.store.postgres import pg_sql
from journal.store.statements import Statements

PACKAGE = Path(journal.__file__).resolve().parent
# What a statement starts with (upper case: docstrings that start "Select ..." are not SQL).
_SQL_START = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|REPLACE|PRAGMA|CREATE|DROP|ALTER|VALUES)\s")
_TEMPLATE = re.compile(r"\{\w*\}")  # a str.format field left in the text: built at run time
_BINDING = re.compile(r"'(?:[^']|'')*'|\?(\d*)")


class _Unresolved(Exception):
    """A part of a string expression that is only known at run time."""


def _text(node: ast.AST, ns: dict[str, Any]) -> str:
    """The value of a string expression made of literals and module-level names."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return node.value
        raise _Unresolved
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
            elif isinstance(part, ast.FormattedValue) and part.conversion == -1 and part.format_spec is None:
                out.append(_text(part.value, ns))
            else:
                raise _Unresolved
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left, ns) + _text(node.right, ns)
    if isinstance(node, (ast.Name, ast.Attribute)):
        value = _name(node, ns)
        if isinstance(value, str):
            return value
    raise _Unresolved


def _name(node: ast.AST, ns: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name) and node.id in ns:
        return ns[node.id]
    if isinstance(node, ast.Attribute):
        try:
            return getattr(_name(node.value, ns), node.attr)
        except AttributeError:
            raise _Unresolved from None
    raise _Unresolved


def _sketch(node: ast.AST, ns: dict[str, Any]) -> str:
    """The text of a string expression, ``{}`` standing for each part known only at run time."""
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(p.value) if isinstance(p, ast.Constant) else _sketch(p.value, ns)  # type: ignore[attr-defined]
            for p in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _sketch(node.left, ns) + _sketch(node.right, ns)
    try:
        return _text(node, ns)
    except _Unresolved:
        return "{}"


def sql_sites(source: str, ns: dict[str, Any]) -> list[tuple[int, str | None, str]]:
    """``(line, statement or None, sketch)`` for each outermost string expression of ``source``
    that reads as SQL; ``None``: it is built at run time (from local values, or a template)."""
    out: list[tuple[int, str | None, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp)):
            sketch = _sketch(node, ns)
            if _SQL_START.match(sketch):
                try:
                    text: str | None = _text(node, ns)
                except _Unresolved:
                    text = None
                if text is not None and _TEMPLATE.search(text):
                    text = None
                out.append((getattr(node, "lineno", 0), text, sketch))
                return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return out


def _part_modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("store", "testing") or path.name == "__main__.py":
            continue
        yield ".".join(("journal", *rel.with_suffix("").parts)), path


def _part_statements() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The parts' literal statements and the runtime-built sites: ``(where, text)`` each."""
    static: list[tuple[str, str]] = []
    dynamic: list[tuple[str, str]] = []
    for name, path in _part_modules():
        source = path.read_text(encoding="utf-8")
        if not re.search(r"SELECT|INSERT|UPDATE|DELETE", source):
            continue
        ns = vars(importlib.import_module(name))
        for line, text, sketch in sql_sites(source, ns):
            (static if text is not None else dynamic).append((f"{name}:{line}", text or sketch))
    return static, dynamic


def _shapes(sql: Statements) -> list[tuple[str, str]]:
    """What each module's ``statement_shapes`` builds for this backend."""
    out = []
    for name, _path in _part_modules():
        module = importlib.import_module(name)
        shapes = getattr(module, "statement_shapes", None)
        if shapes is not None:
            out += [(f"{name}.statement_shapes[{i}]", text) for i, text in enumerate(shapes(sql))]
    return out


STATIC, DYNAMIC = _part_statements()
BACKENDS = {"sqlite": sqlite_sql.STATEMENTS, "postgresql": postgres_sql.STATEMENTS}


def _cases() -> list[Any]:
    cases = []
    for backend, sql in BACKENDS.items():
        owned = [(f"sql.{name}", text) for name, text in sql.texts().items()]
        for where, text in STATIC + owned + _shapes(sql):
            cases.append(pytest.param(backend, text, id=f"{backend}-{where}"))
    return cases


def _bindings(sql: str) -> list[None]:
    """A NULL for each binding of the statement (``?`` or ``?N``, outside string literals)."""
    numbered = [int(n) for n in _BINDING.findall(sql) if n]
    plain = sum(1 for m in _BINDING.finditer(sql) if m.group(0) == "?")
    return [None] * (max(numbered) if numbered else plain)


def prepare_sqlite(conn: apsw.Connection, sql: str) -> None:
    """SQLite compiles the statement (EXPLAIN: nothing runs); a bad one raises."""
    list(conn.execute("EXPLAIN " + sql, _bindings(sql)))


def prepare_postgres(conn: Any, sql: str) -> None:
    """PostgreSQL parses, types and plans the statement (EXPLAIN: nothing runs), its parameters
    untyped NULLs as a driver's None is; a bad one raises."""
    text, order, _ = pg_sql(sql)
    count = len(order) if order is not None else len(_bindings(sql))
    with conn.transaction(force_rollback=True):
        conn.execute("EXPLAIN " + text, [None] * count)


@pytest.fixture(scope="module")
def sqlite_conn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[apsw.Connection]:
    path = tmp_path_factory.mktemp("statements") / "j.db"
    journal.open(path).close()  # schema.sql, as the store makes it
    conn = apsw.Connection(str(path))
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def pg_conn(pg_server: Any) -> Iterator[Any]:
    import psycopg

    schema = "statements_" + uuid.uuid4().hex[:12]
    base = pg_server.dsn("contract")
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{base}&options=-csearch_path%3D{schema}"
    journal.open(dsn).close()  # schema_pg.sql, as the store makes it
    conn = psycopg.connect(dsn, autocommit=True)
    yield conn
    conn.close()


@pytest.fixture
def prepare(request: pytest.FixtureRequest, backend_name: str) -> Any:
    if backend_name == "sqlite":
        conn = request.getfixturevalue("sqlite_conn")
        return lambda sql: prepare_sqlite(conn, sql)
    conn = request.getfixturevalue("pg_conn")
    return lambda sql: prepare_postgres(conn, sql)


@pytest.fixture
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize(("backend_name", "sql"), _cases(), indirect=["backend_name"])
def test_every_statement_the_parts_use_prepares_on_both_backends(prepare: Any, sql: str) -> None:
    prepare(sql)


def test_the_statements_are_found_in_every_part() -> None:
    # The collection itself: enough statements, from the parts that hold SQL.
    modules = {where.split(":")[0] for where, _ in STATIC}
    assert {"journal.log", "journal.queue", "journal.turns", "journal.results", "journal.state"} <= modules
    assert len(STATIC) >= 50


def test_every_part_that_builds_sql_at_run_time_lists_its_shapes() -> None:
    # A builder's statements are prepared through statement_shapes(sql): without it they
    # would go unchecked.
    missing = sorted(
        {where for where, _ in DYNAMIC if not hasattr(importlib.import_module(where.split(":")[0]), "statement_shapes")}
    )
    assert missing == [], f"these build SQL at run time and have no statement_shapes(sql): {missing}"


def test_the_collector_finds_literals_concatenations_and_builders() -> None:
    source = (
        '_A = "SELECT 1 FROM events"\n'
        '_B = _A + " WHERE seq = ?"\n'
        'def f(where):\n    return f"SELECT {_COLUMNS} FROM events{where}"\n'
        '_D = "Select the rows (a docstring, not SQL)"\n'
    )
    ns = {"_A": "SELECT 1 FROM events", "_COLUMNS": "seq, type"}
    found = [(text, sketch) for _line, text, sketch in sql_sites(source, ns)]
    assert found == [
        ("SELECT 1 FROM events", "SELECT 1 FROM events"),
        ("SELECT 1 FROM events WHERE seq = ?", "SELECT 1 FROM events WHERE seq = ?"),
        (None, "SELECT seq, type FROM events{}"),
    ]


# -- the check catches a statement of one dialect only --------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT instr(data, 'x') FROM events WHERE session_id = ?",  # strpos on PostgreSQL
        "SELECT 1 FROM turn_journal INDEXED BY turn_journal_open WHERE session_id = ? AND end_seq IS NULL",
        "SELECT max(seq, ?) FROM events",  # greatest on PostgreSQL
        "SELECT id FROM submissions ORDER BY rowid",  # SQLite's implicit column
        "UPDATE notifications SET data = json_set(data, '$.delivered_ms', ?) WHERE id = ?",
    ],
)
def test_a_statement_of_sqlite_only_fails_the_postgresql_check(sqlite_conn: apsw.Connection, pg_conn: Any, sql: str):
    prepare_sqlite(sqlite_conn, sql)
    with pytest.raises(Exception):  # noqa: B017 (whatever the server says: it refused)
        prepare_postgres(pg_conn, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT strpos(data, 'x') FROM events WHERE session_id = ?",
        "SELECT id FROM submissions ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
        "SELECT data::json ->> 'id' FROM events",
    ],
)
def test_a_statement_of_postgresql_only_fails_the_sqlite_check(sqlite_conn: apsw.Connection, pg_conn: Any, sql: str):
    prepare_postgres(pg_conn, sql)
    with pytest.raises(apsw.Error):
        prepare_sqlite(sqlite_conn, sql)


def test_each_backend_has_every_statement_written_in_its_own_dialect() -> None:
    sqlite, postgres = sqlite_sql.STATEMENTS, postgres_sql.STATEMENTS
    assert (sqlite.dialect, postgres.dialect) == ("sqlite", "postgresql")
    assert sqlite.texts().keys() == postgres.texts().keys() | ({"open_work"} if postgres.open_work is None else set())
    # A pair differs (else it is shared, and belongs in its part).
    same = [name for name, text in postgres.texts().items() if sqlite.texts()[name] == text]
    assert same == []


# -- the dialect lives in the store --------------------------------------------------------------


def test_no_part_asks_which_backend_it_is_on() -> None:
    asking = []
    for name, path in _part_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "dialect":
                asking.append(f"{name}:{node.lineno}")
    assert asking == []


def test_the_postgresql_store_translates_placeholders_and_nothing_else() -> None:
    sql = "SELECT value FROM json_each(?) WHERE instr(v, '%?') AND x ->> '$.k' = ?2 AND y = ?1"
    text, order, writes = pg_sql(sql)
    assert text == "SELECT value FROM json_each(%s) WHERE instr(v, '%%?') AND x ->> '$.k' = %s AND y = %s"
    assert (order, writes) == ((0, 1, 0), False)
