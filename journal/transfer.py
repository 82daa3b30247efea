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

Import obeys the rules append obeys: every record is checked strictly (known keys, right types,
contiguous seqs, clocks in range, ids and keys within the codec's limits), each event goes
through the append's validation (the journal's codec: known type, JSON that encodes, nesting, size, required
fields, ``surface_op``) and then the append's write path (a dispatch only inside an open turn,
one dispatch and one result per call, the schema's triggers). A ``retract`` event, which only
``retract()`` writes, is taken only as ``retract()`` would have written it: naming the
transcript's last message. The whole import is one transaction: a refusal (a typed error naming
the line, and the field) leaves nothing behind (G2, G12). Exporting what was imported gives the
same bytes.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import stat
from collections.abc import Iterable, Iterator
from typing import IO, Any

from journal import log as _log
from journal import state as _state
from journal.codec import MAX_CLOCK_MS, MAX_DEPTH, Codec, check_int, parse_json
from journal.engine import Journal
from journal.errors import InvalidArgument, InvalidEvent
from journal.escape import dumps
from journal.model import SURFACE_TYPES, Session
from journal.store.header import KIND_PREFIX, sqlite_file_kind

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

    The file is created 0600 (transcripts hold secrets) and never opened through a symlink.
    It is never one of SQLite's files, which an export would destroy (``InvalidArgument``, the
    file untouched byte for byte): the journal being read or its side files; a name ending in
    ``-wal``, ``-shm`` or ``-journal`` (SQLite would take the file for a side file of the
    database beside it), whether or not it exists; a file whose first bytes are an SQLite
    database's (a journal or any other), a write-ahead log's, a rollback journal's or a WAL
    index's. An unknown session fails before the file is opened."""
    ids = None if session_ids is None else list(session_ids)
    for sid in ids or ():
        j.session(sid)
    written = 0
    with _export_target(path, j.path) as out:
        for line in export_lines(j, ids):
            out.write(line + "\n")
            written += 1
    return written


_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
_KINDS = {
    "database": "an SQLite database (a journal or another)",
    "wal": "an SQLite write-ahead log (a -wal file)",
    "journal": "an SQLite rollback journal (a -journal file)",
    "shm": "an SQLite WAL index (a -shm file)",
}


def _journal_files(db: str) -> list[os.stat_result]:
    """The journal and its side files as they stand (an export must never write over them)."""
    found = []
    for suffix in ("", *_SIDE_SUFFIXES):
        with contextlib.suppress(OSError):
            found.append(os.stat(db + suffix))
    return found


def _export_target(path: str, db: str) -> IO[str]:
    """``path`` opened for an export; the checks read the opened file itself, so what is
    checked is what gets truncated."""
    if os.path.basename(path).endswith(_SIDE_SUFFIXES):
        raise InvalidArgument(
            "export", f"{path} is named as an SQLite side file (-wal, -shm, -journal); choose another name"
        )
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        info = os.fstat(fd)
        if any(os.path.samestat(info, other) for other in _journal_files(db)):
            raise InvalidArgument("export", f"{path} is the journal being read (or one of its files)")
        if stat.S_ISREG(info.st_mode):
            kind = sqlite_file_kind(os.pread(fd, KIND_PREFIX, 0))
            if kind is not None:
                raise InvalidArgument("export", f"{path} is {_KINDS[kind]}; it is left untouched")
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "w", encoding="utf-8", newline="\n")


# A record holds its data two levels down ({"event": {"data": ...}}).
_LINE_DEPTH = MAX_DEPTH + 2


def _record(number: int, line: str | bytes) -> dict[str, Any] | None:
    """One line as a record, or ``None`` for a blank line; ``InvalidArgument`` names the line
    (``InvalidEvent`` for nesting far too deep for any event)."""
    where = f"line {number}"
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgument(where, f"not UTF-8 text (byte {exc.start})") from None
    if not line.strip():
        return None
    try:  # the codec's parser: strict, its nesting bounded before it may recurse
        record = parse_json(line, where, depth=_LINE_DEPTH)
    except InvalidEvent as exc:
        if isinstance(exc.__cause__, ValueError):  # not strict JSON: the line's fault, not an event's
            raise InvalidArgument(where, f"not JSON: {exc.__cause__}") from None
        raise  # nested past the limit: refused as the append refuses it, naming the line
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


def _clock(where: str, value: Any) -> int:
    """A ``time_ms`` or ``created_ms``: what the engine's clock can have written."""
    return check_int(where, value, maximum=MAX_CLOCK_MS)


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
        try:  # validated as create_session validates a meta
            self.meta = None if meta is None else codec.encode_meta(meta)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {exc.name}", exc.problem) from None
        created = fields.get("created_ms")
        self.created_ms = _log.now_ms() if created is None else _clock(f"{where}: created_ms", created)
        self.events: list[_log.ImportedEvent] = []
        self.keys: set[str] = set()
        self.state: list[tuple[str, int, str, Any]] = []
        # The seqs of the transcript's messages as they stand (fold's rules): a retract must
        # name the last one, as retract() does.
        self.transcript: list[int] = []

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
        time_ms = _clock(f"{where}: time_ms", fields["time_ms"])
        type_ = fields["type"]
        text, copy = _encoded(where, type_, fields["data"], codec)
        key = fields.get("key")
        if key is not None:
            _state.check_key(key, f"{where}: key")
            if key in self.keys:
                raise InvalidArgument(f"{where}: key", f"{key!r} is the key of an event above")
            self.keys.add(key)
        self._follow(where, seq, type_, copy)
        self.events.append((where, seq, type_, text, time_ms, _log.call_id_of(type_, copy), key))

    def _follow(self, where: str, seq: int, type_: str, data: dict[str, Any]) -> None:
        """Keep the transcript's message seqs; refuse a retract ``retract()`` would not write."""
        if type_ == "retract":
            if not self.transcript:
                raise InvalidEvent(f"{where}: type", "a retract with no message in the transcript to take back")
            if data["seq"] != self.transcript[-1]:
                problem = f"must name the transcript's last message (seq {self.transcript[-1]}), not {data['seq']}"
                raise InvalidEvent(f"{where}: data.seq", problem)
            self.transcript.pop()
        elif type_ in SURFACE_TYPES:
            op = data.get("surface_op")
            if isinstance(op, list):  # the codec let through only a well-formed replace
                self.transcript[op[1] : op[2] + 1] = (seq,)
            else:
                self.transcript.append(seq)

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
        try:
            ((_, kind, stored),) = _state.encode_values(codec, {key: value})
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {'bytes' if 'bytes' in fields else 'json'}", exc.problem) from None
        self.state.append((key, at, kind, stored))

    def row(self) -> tuple[str, str | None, int, list[_log.ImportedEvent], list[tuple[str, int, str, Any]]]:
        """What ``Log.import_sessions`` writes of it."""
        return self.id, self.meta, self.created_ms, self.events, self.state


def _encoded(where: str, type_: Any, data: Any, codec: Codec) -> tuple[str, dict[str, Any]]:
    """``encode_copy`` (the append's own validation), its refusal naming the line."""
    try:
        return codec.encode_copy(type_, data)
    except InvalidEvent as exc:
        raise InvalidEvent(f"{where}: {exc.field}", exc.problem) from None


def import_lines(j: Journal, lines: Iterable[str | bytes]) -> int:
    """Import what ``export_lines`` wrote; returns how many sessions were imported.

    The whole import is one transaction: all of it or nothing (G2, G12). Each session is checked
    whole, by the rules an append obeys, before its rows are written; a refusal raises before
    the commit and leaves nothing behind: ``InvalidArgument`` or ``InvalidEvent`` naming the
    line (and the field), ``SessionExists``. The lines are read as the transaction goes (one
    session held at a time), so a slow source holds the write lock meanwhile."""
    return j._import_sessions(_sessions(j._codec, lines))


def import_file(j: Journal, source: IO[bytes]) -> int:
    """``import_lines`` of a binary file (``journal import``), each line read with a bound: a
    line longer than any record the journal's limits allow is refused (``InvalidEvent`` naming
    it) before it is held in memory whole."""
    return import_lines(j, _bounded_lines(source, _max_line_bytes(j._codec.max_event_bytes)))


def _max_line_bytes(max_event_bytes: int) -> int:
    # An event's stored text is within the limit; its line escapes each character in at most
    # six bytes (``\u007f``), and the record around it is small.
    return 6 * max_event_bytes + 64 * 1024


def _bounded_lines(source: IO[bytes], limit: int) -> Iterator[bytes]:
    number = 0
    while line := source.readline(limit + 1):
        number += 1
        if len(line) > limit and not line.endswith(b"\n"):
            raise InvalidEvent(f"line {number}", f"is longer than {limit} bytes, more than any record can need")
        yield line


def _sessions(
    codec: Codec, lines: Iterable[str | bytes]
) -> Iterator[tuple[str, str | None, int, list[_log.ImportedEvent], list[tuple[str, int, str, Any]]]]:
    """The sessions of the lines, each once it is read and checked whole."""
    pending: _Pending | None = None
    for number, line in enumerate(lines, start=1):
        record = _record(number, line)
        if record is None:
            continue
        where = f"line {number}"
        if "session" in record:
            if pending is not None:
                yield pending.row()
            pending = _Pending(where, _fields(where, record["session"], _SESSION_KEYS, frozenset({"id"})), codec)
        elif pending is None:
            raise InvalidArgument(where, "an event or state line before any session line")
        elif "event" in record:
            pending.add(where, _fields(where, record["event"], _EVENT_FIELDS, _EVENT_KEYS), codec)
        else:
            fields = _fields(where, record["state"], _STATE_KEYS, frozenset({"session_id", "key", "at"}))
            pending.add_state(where, fields, codec)
    if pending is not None:
        yield pending.row()
