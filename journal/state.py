"""Per-session keyed state: values under ``(session_id, key)``, latest wins, kept as versions.

A framework's channel values (LangGraph's, say) live here rather than in copies inside events:
each write adds one row per key written, dated by ``at`` (the session's event count when it was
written, so a value written with a batch of events is dated after them), and nothing is ever
updated in place. The value of a key is its latest row; the state *as of* seq ``s`` is made of
the latest rows with ``at <= s + 1``. Bytes on disk grow with what changed, never with a copy
of what did not.

A fork reads its parent's state as it stood at the fork point: ``fork`` copies the latest row of
each key (as of the fork point) into the fork, dated at its seed length; older rows are read
through the parent (with ``at`` below the fork's seed length, so nothing the parent writes after
the fork is seen). ``purge`` erases a session's rows, and first gives a fork reading through it
its own copies.

The Log owns the ``state`` table; these helpers run inside its transactions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from journal.codec import MAX_KEY, Codec, check_id
from journal.errors import InvalidArgument
from journal.lineage import SEQ_END, Segment
from journal.store import Database, Statements

_INSERT = "INSERT INTO state (session_id, key, at, kind, value) VALUES (?, ?, ?, ?, ?)"
# The keys of a session's rows, one index seek each (not a walk of every version).
_FIRST_KEY = "SELECT min(key) FROM state WHERE session_id = ?"
_NEXT_KEY = "SELECT min(key) FROM state WHERE session_id = ? AND key > ?"


def check_key(key: object, name: str = "key") -> str:
    """A state key or an idempotency key: 1 to ``MAX_KEY`` (256) characters of valid Unicode text
    without a NUL (``InvalidArgument`` naming ``name``), on both backends alike."""
    return check_id(name, key, MAX_KEY)


def encode_values(codec: Codec, values: object) -> list[tuple[str, str, Any]]:
    """``(key, kind, stored value)`` for each entry of ``values`` (a mapping of key to bytes or a
    JSON value), validated and encoded under the journal's limits before anything is written."""
    if not isinstance(values, Mapping):
        raise InvalidArgument("state", f"must be a mapping of key to value, not {type(values).__name__}")
    out: list[tuple[str, str, Any]] = []
    for key, value in values.items():
        check_key(key, "state key")
        if isinstance(value, (bytes, bytearray, memoryview)):
            blob = bytes(value)
            if len(blob) > codec.max_event_bytes:
                raise InvalidArgument(f"state[{key!r}]", f"is {len(blob)} bytes; the limit is {codec.max_event_bytes}")
            out.append((key, "bytes", blob))
        else:
            out.append((key, "json", codec.encode_value(f"state[{key!r}]", value)))
    return out


def write_txn(db: Database, session_id: str, at: int, encoded: Iterable[tuple[str, str, Any]]) -> None:
    """New versions of the given keys, dated ``at``, inside the caller's transaction. Every
    value is stored as bytes, on both backends: a JSON value as its UTF-8 text (``_decoded``
    also reads the text a version-6 file kept)."""
    rows = [(session_id, key, at, kind, value if kind == "bytes" else value.encode()) for key, kind, value in encoded]
    db.executemany(_INSERT, rows)


def read_txn(
    db: Database, segments: list[Segment], keys: Iterable[str] | None = None, as_of: int | None = None
) -> dict[str, Any]:
    """The latest value of each key (of ``keys``, or every key) as of seq ``as_of`` (or now),
    through the fork chain ``segments`` (newest owner first): one index seek per key and owner."""
    rows = _latest_txn(db, segments, keys, SEQ_END if as_of is None else as_of + 1)
    return {key: _decoded(kind, value) for key, (kind, value) in sorted(rows.items())}


def snapshot_txn(db: Database, segments: list[Segment], fork_id: str, seed_length: int) -> None:
    """Copy the state as of the fork point (event ``seed_length - 1``) into the new fork, dated
    ``seed_length``: what it inherits, fixed before its parent writes more."""
    rows = _latest_txn(db, segments, None, seed_length)
    db.executemany(_INSERT, [(fork_id, key, seed_length, kind, value) for key, (kind, value) in rows.items()])


def _latest_txn(
    db: Database, segments: list[Segment], keys: Iterable[str] | None, bound: int
) -> dict[str, tuple[str, Any]]:
    """The stored ``(kind, value)`` of each key's latest row with ``at <= bound``, the newest
    owner of the chain first."""
    out: dict[str, tuple[str, Any]] = {}
    wanted = None if keys is None else list(keys)
    for index, (owner, _lo, hi) in enumerate(segments):
        # An ancestor's rows count only below the fork point: the fork's own copy holds those at it.
        limit = bound if index == 0 else min(bound, hi - 1)
        for key in wanted if wanted is not None else _keys(db, owner):
            if key not in out:
                row = db.one(db.sql.state_latest, (owner, key, limit))
                if row is not None:
                    out[key] = (row[0], row[1])
    return out


def copy_inherited_txn(db: Database, segments: list[Segment], fork_id: str) -> None:
    """Give a fork its own copies of the rows it reads through its ancestors (``segments``: its
    chain, itself first), before they are erased: every version, dated as it was."""
    for owner, _lo, hi in segments[1:]:
        db.execute(
            "INSERT INTO state (session_id, key, at, kind, value) "
            "SELECT ?, key, at, kind, value FROM state WHERE session_id = ? AND at < ? ORDER BY id",
            (fork_id, owner, hi),
        )


def _history_sql(*, inherited: bool) -> str:
    """Every version of a session's own rows, oldest first (``inherited``: below a fork point)."""
    return "SELECT key, at, kind, value FROM state WHERE session_id = ?" + (
        " AND at < ? ORDER BY at, id" if inherited else " ORDER BY at, id"
    )


def statement_shapes(sql: Statements) -> list[str]:
    """One statement of each shape this module builds at run time (``tests/test_statements.py``
    prepares them on both backends)."""
    return [_history_sql(inherited=False), _history_sql(inherited=True)]


def history_txn(db: Database, segments: list[Segment]) -> list[tuple[str, int, Any]]:
    """Every version ``(key, at, value)`` the session reads, oldest first: its ancestors' below
    each fork point, then its own (its own copy at the fork point stands for theirs there)."""
    out: list[tuple[str, int, Any]] = []
    for index, (owner, _lo, hi) in reversed(list(enumerate(segments))):
        own = index == 0
        rows = db.execute(_history_sql(inherited=not own), (owner,) if own else (owner, hi))
        out.extend((key, at, _decoded(kind, value)) for key, at, kind, value in rows)
    return out


def forget_txn(db: Database, session_id: str) -> None:
    db.execute("DELETE FROM state WHERE session_id = ?", (session_id,))


def _keys(db: Database, owner: str) -> Iterable[str]:
    key = db.value(_FIRST_KEY, (owner,))
    while key is not None:
        yield key
        key = db.value(_NEXT_KEY, (owner, key))


def _decoded(kind: str, value: Any) -> Any:
    return bytes(value) if kind == "bytes" else json.loads(value)
