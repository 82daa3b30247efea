"""Export and import: sessions as JSON lines, and back (``journal export`` / ``journal import``).

For each session, a ``{"session": {"id", "meta", "created_ms"}}`` line, then one
``{"event": {"session_id", "seq", "type", "data", "time_ms"}}`` line per event of its log (with
``"key"`` when it was appended with an idempotency key), then one ``{"state": {"session_id",
"key", "at", "json"}}`` line per version of its keyed state, oldest first (``"bytes"``, in
base64, instead of ``"json"`` for a bytes value). A fork is exported with the events and state
versions it inherits, as a plain session of its own. Only the log and the
session row travel: derived state (the turn journal, tool-call states) is rebuilt from the events
by the schema's triggers on import, and what is not an event (submissions, notifications, stream
chunks, a running turn's phase and stream key, fork parentage) stays behind.

Import checks every record strictly (known keys, right types, contiguous seqs, each event through
the same validation as an append) and writes each session, its row and its events, in one
transaction: a refused session leaves nothing behind (G2, G12). Exporting what was imported
gives the same bytes.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import stat
from collections.abc import Iterable, Iterator
from typing import IO, Any

from journal import log as _log
from journal import state as _state
from journal.codec import Codec, check_int
from journal.engine import Journal
from journal.errors import InvalidArgument, InvalidEvent
from journal.escape import dumps
from journal.model import Session
from journal.store import SQLITE_HEADER

_SESSION_KEYS = frozenset({"id", "meta", "created_ms"})
_EVENT_KEYS = frozenset({"session_id", "seq", "type", "data", "time_ms"})
_EVENT_FIELDS = _EVENT_KEYS | {"key"}
_STATE_KEYS = frozenset({"session_id", "key", "at", "json", "bytes"})


def export_lines(j: Journal, session_ids: Iterable[str] | None = None) -> Iterator[str]:
    """The sessions (all of them, oldest first, by default) as JSON lines, without newlines."""
    found = _every_session(j) if session_ids is None else (j.session(sid) for sid in list(session_ids))
    for info in found:
        sid = info.id
        yield dumps({"session": {"id": info.id, "meta": info.meta, "created_ms": info.created_ms}})
        for event in j.events(sid):
            yield dumps({"event": event.to_dict()})
        for key, at, value in j._state_history(sid):
            stored = {"bytes": base64.b64encode(value).decode("ascii")} if isinstance(value, bytes) else {"json": value}
            yield dumps({"state": {"session_id": sid, "key": key, "at": at, **stored}})


_PAGE = 1000


def _every_session(j: Journal) -> Iterator[Session]:
    """Every session, oldest first, a page at a time (never all of them held at once)."""
    after: Session | None = None
    while True:
        page = j.sessions(limit=_PAGE, after=after)
        yield from page
        if len(page) < _PAGE:
            return
        after = page[-1]


def export_file(j: Journal, path: str, session_ids: Iterable[str] | None = None) -> int:
    """Write ``export_lines`` to the file at ``path``; returns how many lines were written.

    The file is created 0600 (transcripts hold secrets), never opened through a symlink, and
    never one of the journal's own files or an SQLite database (``InvalidArgument``, nothing
    touched). An unknown session fails before the file is opened."""
    ids = None if session_ids is None else list(session_ids)
    for sid in ids or ():
        j.session(sid)
    written = 0
    with _export_target(path, j.path) as out:
        for line in export_lines(j, ids):
            out.write(line + "\n")
            written += 1
    return written


def _journal_files(db: str) -> list[os.stat_result]:
    """The journal and its side files as they stand (an export must never write over them)."""
    found = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            found.append(os.stat(db + suffix))
    return found


def _export_target(path: str, db: str) -> IO[str]:
    """``path`` opened for an export; the checks read the opened file itself, so what is
    checked is what gets truncated."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        info = os.fstat(fd)
        if any(os.path.samestat(info, other) for other in _journal_files(db)):
            raise InvalidArgument("export", f"{path} is the journal being read (or one of its files)")
        if stat.S_ISREG(info.st_mode):
            if os.pread(fd, len(SQLITE_HEADER), 0) == SQLITE_HEADER:
                raise InvalidArgument("export", f"{path} is an SQLite database; it is left untouched")
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "w", encoding="utf-8", newline="\n")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"duplicate key {key!r}")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> Any:
    """Strict JSON: no NaN or Infinity, no key twice in one object; ``ValueError`` otherwise."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def _record(number: int, line: str | bytes) -> dict[str, Any] | None:
    """One line as a record, or ``None`` for a blank line; ``InvalidArgument`` names the line."""
    where = f"line {number}"
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgument(where, f"not UTF-8 text (byte {exc.start})") from None
    if not line.strip():
        return None
    try:
        record = parse_json(line)
    except ValueError as exc:
        raise InvalidArgument(where, f"not JSON: {exc}") from None
    if not isinstance(record, dict) or len(record) != 1 or not ({"session", "event", "state"} & record.keys()):
        raise InvalidArgument(where, 'expected {"session": {...}}, {"event": {...}} or {"state": {...}}')
    return record


def _fields(where: str, value: Any, keys: frozenset[str], required: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(where, "must be a JSON object")
    unknown = sorted(value.keys() - keys)
    if unknown:
        raise InvalidArgument(where, f"unknown field {unknown[0]!r}")
    missing = sorted(required - value.keys())
    if missing:
        raise InvalidArgument(where, f"missing field {missing[0]!r}")
    return value


class _Pending:
    """One session read from the file and validated, not yet written."""

    def __init__(self, where: str, fields: dict[str, Any], codec: Codec) -> None:
        try:
            self.id = _log.check_session_id(fields["id"])
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: id", exc.problem) from None
        meta = fields.get("meta")
        if meta is not None and not isinstance(meta, dict):
            raise InvalidArgument(f"{where}: meta", "must be a JSON object or null")
        self.meta = None if meta is None else _encoded(where, "x.meta", meta, codec)[0]
        created = fields.get("created_ms")
        self.created_ms = _log.now_ms() if created is None else check_int(f"{where}: created_ms", created)
        self.events: list[tuple[int, str, str, int, str | None, str | None]] = []
        self.keys: set[str] = set()
        self.state: list[tuple[str, int, str, Any]] = []

    def _own(self, where: str, fields: dict[str, Any]) -> None:
        if fields["session_id"] != self.id:
            problem = f"{fields['session_id']!r} is not the session above ({self.id!r})"
            raise InvalidArgument(f"{where}: session_id", problem)

    def add(self, where: str, fields: dict[str, Any], codec: Codec) -> None:
        self._own(where, fields)
        if self.state:
            raise InvalidArgument(where, "an event after the session's state lines")
        seq = check_int(f"{where}: seq", fields["seq"])
        if seq != len(self.events):
            raise InvalidArgument(f"{where}: seq", f"{seq} breaks the sequence (expected {len(self.events)})")
        time_ms = check_int(f"{where}: time_ms", fields["time_ms"])
        text, copy = _encoded(where, fields["type"], fields["data"], codec)
        key = fields.get("key")
        if key is not None:
            _state.check_key(key, f"{where}: key")
            if key in self.keys:
                raise InvalidArgument(f"{where}: key", f"{key!r} is the key of an event above")
            self.keys.add(key)
        self.events.append((seq, fields["type"], text, time_ms, _log.call_id_of(fields["type"], copy), key))

    def add_state(self, where: str, fields: dict[str, Any], codec: Codec) -> None:
        self._own(where, fields)
        key = _state.check_key(fields["key"], f"{where}: key")
        at = check_int(f"{where}: at", fields["at"], maximum=len(self.events))
        if self.state and at < self.state[-1][1]:
            raise InvalidArgument(f"{where}: at", f"{at} is older than the state line above")
        if ("json" in fields) == ("bytes" in fields):
            raise InvalidArgument(where, 'a state line holds one of "json" or "bytes"')
        if "bytes" in fields:
            try:
                value = base64.b64decode(fields["bytes"], validate=True) if isinstance(fields["bytes"], str) else None
            except binascii.Error:
                value = None
            if value is None:
                raise InvalidArgument(f"{where}: bytes", "must be base64 text")
        else:
            value = fields["json"]
        ((_, kind, stored),) = _state.encode_values(codec, {key: value})
        self.state.append((key, at, kind, stored))


def _encoded(where: str, type_: Any, data: Any, codec: Codec) -> tuple[str, dict[str, Any]]:
    """``encode_copy`` (the append's own validation), its refusal naming the line."""
    try:
        return codec.encode_copy(type_, data)
    except InvalidEvent as exc:
        raise InvalidEvent(f"{where}: {exc.field}", exc.problem) from None


def _write(j: Journal, pending: _Pending) -> None:
    """The session row and all its events, in one transaction."""
    j._import_session(pending.id, pending.meta, pending.created_ms, pending.events, pending.state)


def import_lines(j: Journal, lines: Iterable[str | bytes]) -> int:
    """Import what ``export_lines`` wrote; returns how many sessions were imported.

    Each session is checked whole before its one transaction, so a refused one (``InvalidArgument``
    or ``InvalidEvent`` naming the line, ``SessionExists``) leaves nothing of itself; the sessions
    before it in the file stay imported, the ones after it are not read."""
    codec = j._codec
    pending: _Pending | None = None
    imported = 0
    for number, line in enumerate(lines, start=1):
        record = _record(number, line)
        if record is None:
            continue
        where = f"line {number}"
        if "session" in record:
            if pending is not None:
                _write(j, pending)
                imported += 1
            pending = _Pending(where, _fields(where, record["session"], _SESSION_KEYS, frozenset({"id"})), codec)
        elif pending is None:
            raise InvalidArgument(where, "an event or state line before any session line")
        elif "event" in record:
            pending.add(where, _fields(where, record["event"], _EVENT_FIELDS, _EVENT_KEYS), codec)
        else:
            fields = _fields(where, record["state"], _STATE_KEYS, frozenset({"session_id", "key", "at"}))
            pending.add_state(where, fields, codec)
    if pending is not None:
        _write(j, pending)
        imported += 1
    return imported
