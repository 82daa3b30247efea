"""A raw connection to a journal on either backend, past the library: what a hand-made or
hostile writer does to the database. Each statement commits on its own; the schema's refusal
is ``Refused``, whose ``kind`` says what refused it: ``"trigger"`` or ``"key"``."""

from __future__ import annotations

from typing import Any

import apsw


class Refused(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


class WriteLock:
    """The journal's write lock, held from another connection (as a writer in another process
    holds it) until ``release()``."""

    def __init__(self, target: Any) -> None:
        self.raw = Raw(target)
        if self.raw.postgres:
            from journal.store.postgres import lock_key

            key = lock_key(self.raw.value("SELECT current_schema()"))
            self.raw.execute("BEGIN")
            self.raw.execute(f"SELECT pg_advisory_xact_lock({key})")
        else:
            self.raw.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self.raw.execute("ROLLBACK")
        self.raw.close()


class Raw:
    def __init__(self, target: Any) -> None:
        self.target = str(target)
        self.postgres = self.target.startswith("postgresql://")
        if self.postgres:
            import psycopg

            self._conn: Any = psycopg.connect(self.target, autocommit=True)
        else:
            self._conn = apsw.Connection(self.target)

    def execute(self, sql: str, bindings: Any = ()) -> list[tuple[Any, ...]]:
        if not self.postgres:
            try:
                return list(self._conn.execute(sql, bindings))
            except apsw.ConstraintError as exc:
                codes = {apsw.SQLITE_CONSTRAINT_TRIGGER: "trigger", apsw.SQLITE_CONSTRAINT_PRIMARYKEY: "key"}
                codes[apsw.SQLITE_CONSTRAINT_UNIQUE] = "key"
                raise Refused(codes.get(exc.extendedresult, "check"), str(exc)) from exc
        import psycopg

        from journal.store.postgres import pg_sql

        text, order, _ = pg_sql(sql)
        if order is not None:
            bindings = [bindings[i] for i in order]
        try:
            cursor = self._conn.execute(text, bindings or None)
        except psycopg.errors.IntegrityError as exc:
            raise Refused("key" if exc.sqlstate == "23505" else "check", str(exc)) from exc
        except psycopg.Error as exc:
            if exc.sqlstate == "JR001":
                raise Refused("trigger", str(exc)) from exc
            raise
        return cursor.fetchall() if cursor.description else []

    def tables(self) -> list[str]:
        """The names of the journal's tables."""
        if self.postgres:
            sql = "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
        else:
            sql = "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"
        return [row[0] for row in self.execute(sql)]

    def value(self, sql: str, bindings: Any = ()) -> Any:
        rows = self.execute(sql, bindings)
        return rows[0][0] if rows else None

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
