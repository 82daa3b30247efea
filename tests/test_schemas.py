"""The two schemas, schema.sql and schema_pg.sql, hold the same vocabularies and agree on types
(DESIGN §16, parity; STYLE: the schema's CHECK constraints list the enums' values)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

import journal
from journal import store
from journal.classify import ResumeMode
from journal.store import postgres

from .test_store import _check_lists

VOCABULARIES = [
    ("phase", journal.Phase),
    ("end_reason", journal.TurnEndReason),
    ("type", journal.EventType),
    ("resume_mode", ResumeMode),
    ("effect", journal.EffectKind),
    ("state", journal.CallState),
    ("state", journal.SubmissionState),
]


@pytest.mark.parametrize(("column", "vocabulary"), VOCABULARIES, ids=lambda v: getattr(v, "__name__", v))
def test_schema_pg_check_constraints_list_exactly_the_enums_values(column: str, vocabulary: Any) -> None:
    sql = postgres.schema_sql()
    lists = _check_lists(sql, column)
    # The rules of the tables every append writes are domains (schema_pg.sql says why).
    domains = {domain for columns in postgres.DOMAIN_COLUMNS.values() for c, domain in columns.items() if c == column}
    for domain in domains:
        lists += _check_lists(postgres._domains()[domain], "VALUE")
    assert lists, f"no CHECK ({column} IN ...) in schema_pg.sql"
    assert {v.value for v in vocabulary} in lists


def test_the_shipped_postgresql_schema_is_the_root_schema() -> None:
    root = Path(__file__).resolve().parent.parent / "schema_pg.sql"
    assert postgres.schema_sql() == root.read_text(encoding="utf-8")
    assert postgres.SCHEMA_VERSION == store.SCHEMA_VERSION  # one version for the same tables


# How each SQLite column type is spelled on PostgreSQL (INTEGER: a 64-bit integer, except the
# few flags and the stamp that hold small numbers).
_SAME_TYPE = {"INTEGER": {"bigint", "integer"}, "TEXT": {"text"}, "REAL": {"double precision"}, "BLOB": {"bytea"}}
# The one deliberate difference: session_meta (an index of the metas, never read back) keeps
# json_each's typed value on SQLite and its text on PostgreSQL (schema_pg.sql says why).
_DIFFERENT = {("session_meta", "value"): ("ANY", "text")}


@pytest.fixture
def sqlite_columns(tmp_path: Path) -> dict[str, list[tuple[str, str]]]:
    path = tmp_path / "j.db"
    journal.open(path).close()
    conn = apsw.Connection(str(path))
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        return {t: [(r[1], r[2].upper()) for r in conn.execute(f"PRAGMA table_info({t})")] for t in tables}
    finally:
        conn.close()


@pytest.fixture
def pg_columns(pg_server: Any) -> Iterator[dict[str, list[tuple[str, str]]]]:
    import psycopg

    schema = "schemas_" + uuid.uuid4().hex[:12]
    base = pg_server.dsn("contract")
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{base}&options=-csearch_path%3D{schema}"
    journal.open(dsn).close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns "
            "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
        ).fetchall()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        out.setdefault(table, []).append((column, kind))
    yield out


def test_both_schemas_have_the_same_tables_columns_and_types(sqlite_columns: dict, pg_columns: dict) -> None:
    # journal_meta is PostgreSQL's stamp (SQLite's is in the file header); derived_by_statement
    # is SQLite's switch of recovery's set-based derived state (PostgreSQL's is a setting,
    # journal.derived).
    assert sorted(set(sqlite_columns) - {"derived_by_statement"}) == sorted(set(pg_columns) - {"journal_meta"})
    for table, columns in sqlite_columns.items():
        if table == "derived_by_statement":
            continue
        assert [c for c, _ in columns] == [c for c, _ in pg_columns[table]], table
        for (column, lite), (_, pg) in zip(columns, pg_columns[table], strict=True):
            if (table, column) in _DIFFERENT:
                assert (lite, pg) == _DIFFERENT[table, column]
            else:
                assert pg in _SAME_TYPE[lite], f"{table}.{column}: {lite} on SQLite, {pg} on PostgreSQL"
