"""Claude Code's transcript entries as the journal stores and shows them (pure functions, no I/O).

Two concerns of the Claude adapter (``journal.adapters.claude``), kept apart so they can be
read, and table-tested, alone:

- **each item stored once**: an entry that has a typed event (a prompt, a model message, a
  tool's output) is stored *in* it, as the typed event's ``metadata["claude_entry"]``: the entry
  minus what the log already holds (``fold``: the values the typed events hold, its uuid -- the
  event's key --, the fields it repeats from the entry before it), put back exactly by
  ``unfold``. Entries of the previous format (an ``x.claude.entry`` whose ``holes`` name where
  its values are) still read (``filled``);
- **the framework's view**: ``project`` shows what recovery wrote in the typed log (a synthetic
  result for a call a crash left unanswered) as the user entry Claude Code writes for a failed
  tool, right after the call, in the entries' ``parentUuid`` chain.
"""

from __future__ import annotations

import copy as _copy
import json
import uuid as _uuid
from datetime import datetime, timezone
from typing import Any

from journal.errors import CorruptJournal
from journal.escape import escape
from journal.model import Event

ENTRY = "x.claude.entry"
# Where a typed event carries the entry it was derived from (its metadata's key).
CARRIED = "claude_entry"
# The typed events that can carry their entry: one row for the item, its key moved along.
CARRIERS = ("user_message", "assistant_message", "tool_result")
Item = tuple[str, dict[str, Any], str | None]
# The namespace of the uuids of projected answers: an answer's uuid is a function of its session
# and call, so every read shows the same entry, and the same entry written back is stored once.
_REPAIR_NS = _uuid.UUID("6f1d3c2e-8a4b-5c6d-9e0f-a1b2c3d4e5f6")


def blocks_of(message: Any) -> list[Any]:
    """A message's content as a list of blocks (a string is one text block)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def answer_uuid(session_id: str, call_id: str) -> str:
    """The uuid of the entry that answers ``call_id`` for a recovery (a function of the two)."""
    return str(_uuid.uuid5(_REPAIR_NS, session_id + "\x00" + call_id))


# -- the places of an entry that may repeat what its typed events hold -----------------------------


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    """A JSON value's compact text, as entries are measured and compared (also openai_fold's)."""
    return _ENCODER.encode(value)


def same(a: Any, b: Any) -> bool:
    """The same JSON, strictly: ``True`` is not ``1``, ``1`` is not ``1.0``, key order counts
    (strings compare as is)."""
    if type(a) is str and type(b) is str:
        return a == b
    return type(a) is type(b) and dumps(a) == dumps(b)


def _entry_values(entry: dict[str, Any]) -> list[tuple[list[Any], Any]]:
    """The places of an entry that may repeat a typed value: the message's content (its blocks'
    texts, inputs and outputs) and Claude Code's own copy of a tool's output (``toolUseResult``)."""
    out: list[tuple[list[Any], Any]] = []
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        out.append((["message", "content"], content))
    elif isinstance(content, list):
        out.extend(
            (["message", "content", i, name], block[name])
            for i, block in enumerate(content)
            if isinstance(block, dict)
            for name in ("text", "thinking", "input", "content")
            if name in block
        )
    if "toolUseResult" in entry:
        _walk(["toolUseResult"], entry["toolUseResult"], out, depth=3)
    return out


def _walk(path: list[Any], value: Any, out: list[tuple[list[Any], Any]], *, depth: int) -> None:
    out.append((path, value))
    if depth == 0:
        return
    if isinstance(value, dict):
        for name, child in value.items():
            _walk([*path, name], child, out, depth=depth - 1)
    elif isinstance(value, list):
        for n, child in enumerate(value):
            _walk([*path, n], child, out, depth=depth - 1)


def _at(value: Any, path: list[Any]) -> Any:
    for step in path:
        value = value[step]
    return value


def filled(event: Event, by_seq: dict[int, Event]) -> dict[str, Any]:
    """An entry of the previous format back (read, never written any more): an ``x.claude.entry``
    ``{"entry": <with None at each hole>, "holes": [[entry path, offset, typed path, typed type],
    ...]}``, each hole's value taken from the typed event ``offset`` places after it."""
    out: dict[str, Any] = _copy.deepcopy(event.data["entry"])
    for path, offset, tpath, type_ in event.data["holes"]:
        source = by_seq.get(event.seq + offset)
        if source is None or source.type != type_:
            raise CorruptJournal(
                escape(f"session {event.session_id!r}")[:300],
                f"its {ENTRY} at seq {event.seq} takes a value from a {type_} at seq {event.seq + offset} "
                "that is not there",
            )
        node = out
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = _copy.deepcopy(_at(source.data, tpath))
    return out


# -- each item stored once: the entry minus what the log holds (since issue 31) -------------------
#
# ``fold`` writes an entry as a *residue*: the entry with the same keys in the same order, where a
# value the log already holds is replaced by a reference, a string that starts with ``$``:
#
#   ``$k``          the entry's uuid: the key of the event that stores it
#   ``$^``          (``parentUuid``) the uuid of the entry before it in the session
#   ``$=``          (a top-level field) the same field of the entry before it (``sessionId``, ``cwd``...)
#   ``$c`` ``$r``   the ``content`` / ``reasoning`` of the typed event that carries the entry
#   ``$t``          the ``tool_call_id`` of the ``tool_result`` that carries it
#   ``$a<n>`` ``$d<n>`` ``$n<n>``  the ``arguments`` / ``id`` / ``name`` of its ``tool_calls[n]``
#   ``$i`` ``$m``   its ``metadata`` ``claude_message_id`` / ``model``
#   ``...@<n>``     the same of the event ``n`` places after the carrier (a batch's next result)
#
# and every string of the entry itself that starts with ``$`` is stored with one more ``$`` in
# front, so no content can be read as a reference (``$$`` reads back as ``$``).
REF = "$"
_TYPED_CODES = {
    ("content",): "c",
    ("reasoning",): "r",
    ("tool_call_id",): "t",
    ("metadata", "claude_message_id"): "i",
    ("metadata", "model"): "m",
}
_PATHS = {code: path for path, code in _TYPED_CODES.items()}
_CALL_CODES = {"a": "arguments", "d": "id", "n": "name"}  # a field of tool_calls[n]
_CHAIN = ("$k", "$^", "$=")


def _typed_refs(data: dict[str, Any]) -> list[tuple[str, Any]]:
    """The values of a typed event an entry may reference, with their codes."""
    out = [(code, _at_or(data, list(path))) for path, code in _TYPED_CODES.items()]
    for n, call in enumerate(data.get("tool_calls") or ()):
        if isinstance(call, dict):
            out.extend((f"{code}{n}", call[name]) for code, name in _CALL_CODES.items() if name in call)
    return [(code, value) for code, value in out if isinstance(value, (str, list, dict))]


def _typed_at(data: dict[str, Any], code: str) -> Any:
    """The value a reference's code names in a typed event's data (``None`` if none)."""
    if code[:1] in _CALL_CODES and code[1:].isdigit():
        calls, n = data.get("tool_calls"), int(code[1:])
        call = calls[n] if isinstance(calls, list) and n < len(calls) else None
        return call.get(_CALL_CODES[code[0]]) if isinstance(call, dict) else None
    path = _PATHS.get(code)
    return None if path is None else _at_or(data, list(path))


def _block_places(entry: dict[str, Any]) -> list[tuple[list[Any], Any]]:
    """Short values of an entry the typed events hold too: its message's id and model, and its
    blocks' ids, names and the call ids they answer."""
    message = entry.get("message")
    if not isinstance(message, dict):
        return []
    out: list[tuple[list[Any], Any]] = [
        (["message", name], message[name]) for name in ("id", "model") if name in message
    ]
    content = message.get("content")
    if isinstance(content, list):
        out.extend(
            (["message", "content", n, name], block[name])
            for n, block in enumerate(content)
            if isinstance(block, dict)
            for name in ("id", "name", "tool_use_id")
            if name in block
        )
    return out


def _at_or(value: Any, path: list[Any]) -> Any:
    for step in path:
        if not isinstance(value, dict) or step not in value:
            return None
        value = value[step]
    return value


def _escaped(value: Any, path: tuple[Any, ...], refs: dict[tuple[Any, ...], str]) -> Any:
    """A copy of ``value`` with each referenced place replaced by its reference and each string
    that starts with ``$`` escaped."""
    if refs:
        ref = refs.get(path)
        if ref is not None:
            return ref
    if isinstance(value, str):
        return REF + value if value.startswith(REF) else value
    if isinstance(value, dict):
        return {name: _escaped(child, (*path, name), refs) for name, child in value.items()}
    if isinstance(value, list):
        return [_escaped(child, (*path, n), refs) for n, child in enumerate(value)]
    return value


def fold(
    entry: dict[str, Any], derived: list[Item], carrier: int | None, key: str | None, prev: dict[str, Any]
) -> dict[str, Any]:
    """The residue of ``entry`` (pure). ``derived``: the typed events written right after each
    other with the entry (``carrier``: the index of the one that carries it, ``None`` when an
    ``x.claude.entry`` event does); ``key``: the event's key; ``prev``: the top-level string
    fields of the entry before it in the session (``chain_fields``), as far as they are known."""
    refs: dict[tuple[Any, ...], str] = {}
    if carrier is not None:
        held: dict[str, str] = {}
        for n, (_type, data, _key) in enumerate(derived):
            for code, value in _typed_refs(data):
                held.setdefault(dumps(value), REF + code + (f"@{n - carrier}" if n != carrier else ""))
        for path, value in [*_entry_values(entry), *_block_places(entry)]:
            if not isinstance(value, (str, list, dict)) or any(tuple(path[: len(h)]) == h for h in refs):
                continue
            text = dumps(value)
            ref = held.get(text)
            if ref is not None and len(text) > len(ref) + 2:
                refs[tuple(path)] = ref
    out: dict[str, Any] = {}
    for name, value in entry.items():
        if (name,) not in refs and isinstance(value, str) and len(value) > 2:
            if name == "uuid" and value == key:
                out[name] = "$k"
                continue
            if name == "parentUuid" and value == prev.get("uuid"):
                out[name] = "$^"
                continue
            if name != "uuid" and prev.get(name) == value:
                out[name] = "$="
                continue
        out[name] = _escaped(value, (name,), refs)
    return out


# A residue is stored whole, or as ``[offset, changes]``: the residue of the event ``offset``
# places before it that has the same top-level keys in the same order (its *shape*), with the
# top-level fields ``changes`` holds replaced. A step's entries repeat each other's shapes, so an
# entry costs what changed in it (its time, its text's references), not its field names again.
# A changed field that is an object with the base's keys in the base's order may be stored as
# ``["$~", changes]``, the changes to the base's object, the same way down (a model message whose
# token counts alone changed). No residue holds that list itself: its string would be ``$$~``.
MAX_SHAPES = 64
PER_SHAPE = 4  # the latest residues of a shape kept as bases: a step's user and result entries share one


class Shapes:
    """The latest residues of each shape, by seq: what a residue may be written against
    (``stored``) and read back from (``expand``). A cache: a shape it lost is written whole."""

    def __init__(self) -> None:
        self.by_keys: dict[tuple[str, ...], list[tuple[int, dict[str, Any]]]] = {}
        self.by_seq: dict[int, dict[str, Any]] = {}

    def copy(self) -> Shapes:
        out = Shapes()
        out.by_keys = {keys: list(bases) for keys, bases in self.by_keys.items()}
        out.by_seq = dict(self.by_seq)
        return out

    def note(self, seq: int, residue: dict[str, Any]) -> None:
        """``residue`` (whole) is stored at ``seq``: the latest of its shape."""
        keys = tuple(residue)
        bases = self.by_keys.pop(keys, None)
        if bases is None:
            bases = []
            if len(self.by_keys) >= MAX_SHAPES:
                for old, _ in self.by_keys.pop(next(iter(self.by_keys))):
                    self.by_seq.pop(old, None)
        bases.append((seq, residue))
        if len(bases) > PER_SHAPE:
            self.by_seq.pop(bases.pop(0)[0], None)
        self.by_keys[keys] = bases  # last: the shapes in the order they were last used
        self.by_seq[seq] = residue

    def stored(self, seq: int, residue: dict[str, Any]) -> Any:
        """How ``residue`` is stored at ``seq``: whole, or as the changes to the base of its shape
        that are shortest, when that is shorter."""
        best: Any = residue
        size = len(dumps(residue))
        for base_seq, base in self.by_keys.get(tuple(residue), ()):
            changes = _changes(residue, base)
            diff = [base_seq - seq, changes]
            length = len(dumps(diff))
            if length < size:
                best, size = diff, length
        return best


NESTED = "$~"  # ``[NESTED, changes]``: a changed object stored as its changes to the base's


def _changes(value: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``value`` that differ from ``base``'s (same keys, same order), each whole or,
    an object itself, as ``[NESTED, its changes]`` when that is shorter."""
    out: dict[str, Any] = {}
    for name, field in value.items():
        if same(field, base[name]):
            continue
        was = base[name]
        if isinstance(field, dict) and isinstance(was, dict) and tuple(field) == tuple(was):
            nested = [NESTED, _changes(field, was)]
            if len(dumps(nested)) < len(dumps(field)):
                out[name] = nested
                continue
        out[name] = field
    return out


_MISMATCH = object()


def _applied(changes: Any, base: dict[str, Any]) -> Any:
    """``base`` with ``changes`` (a dict of ``_changes``) applied; ``_MISMATCH`` when they do not fit it."""
    if not isinstance(changes, dict) or not set(changes) <= set(base):
        return _MISMATCH
    out: dict[str, Any] = {}
    for name, was in base.items():
        field = changes.get(name, was)
        if name in changes and isinstance(field, list) and len(field) == 2 and field[0] == NESTED:
            if not isinstance(was, dict):
                return _MISMATCH
            field = _applied(field[1], was)
            if field is _MISMATCH:
                return _MISMATCH
        out[name] = field
    return out


def expand(stored: Any, seq: int, bases: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The whole residue of a stored one (``None`` when it is neither a residue nor a change of
    one of ``bases``: the residues by seq)."""
    if isinstance(stored, dict):
        return stored
    if not (isinstance(stored, list) and len(stored) == 2 and isinstance(stored[0], int)):
        return None
    offset, changes = stored
    base = bases.get(seq + offset) if offset < 0 else None
    if base is None:
        return None
    residue = _applied(changes, base)
    return None if residue is _MISMATCH else residue


def chain_fields(entry: Any) -> dict[str, Any]:
    """The top-level string fields of an entry: what the next entry's ``$=`` and ``$^`` name."""
    if not isinstance(entry, dict):
        return {}
    return {name: value for name, value in entry.items() if isinstance(value, str)}


def known_chain(residue: Any, key: str | None, prev: dict[str, Any]) -> dict[str, Any]:
    """``chain_fields`` of an entry read from its residue alone (a writer following the log): the
    fields whose value is a typed event's are left out, and are then never referenced."""
    if not isinstance(residue, dict):
        return {}
    out: dict[str, Any] = {}
    for name, value in residue.items():
        if not isinstance(value, str):
            continue
        if not value.startswith(REF):
            out[name] = value
        elif value.startswith(REF + REF):
            out[name] = value[1:]
        elif value == "$k" and key is not None:
            out[name] = key
        elif value == "$^" and isinstance(prev.get("uuid"), str):
            out[name] = prev["uuid"]
        elif value == "$=" and isinstance(prev.get(name), str):
            out[name] = prev[name]
    return out


def carried(event: Event) -> Any:
    """The residue a typed event carries, or ``None``."""
    if event.key is None or event.type not in CARRIERS:
        return None
    metadata = event.data.get("metadata")
    return metadata.get(CARRIED) if isinstance(metadata, dict) else None


def unfold(residue: dict[str, Any], event: Event, by_seq: dict[int, Event], prev: Any) -> dict[str, Any]:
    """The entry back from its residue (exact, key order kept): ``event`` stores it, ``by_seq``
    holds the events after it, ``prev`` is the entry before it (``None`` for the first)."""

    def corrupt(detail: str) -> CorruptJournal:
        return CorruptJournal(
            escape(f"session {event.session_id!r}")[:300], f"the Claude entry at seq {event.seq} {detail}"
        )

    def resolve(ref: str) -> Any:
        code, _, off = ref[1:].partition("@")
        try:
            source = event if not off else by_seq.get(event.seq + int(off))
        except ValueError:
            source = None
        if source is None:
            raise corrupt(escape(f"names an event that is not there ({ref!r})")[:200])
        found = _typed_at(source.data, code)
        if isinstance(found, str):
            return found
        if not isinstance(found, (list, dict)):
            raise corrupt(escape(f"names a value its {source.type} at seq {source.seq} does not hold ({ref!r})")[:200])
        return _copy.deepcopy(found)  # a value two places name must not be one object twice

    def back(value: Any) -> Any:
        if type(value) is str:
            if value[:1] != REF:
                return value
            return value[1:] if value[1:2] == REF else resolve(value)
        if isinstance(value, dict):
            return {name: back(child) for name, child in value.items()}
        if isinstance(value, list):
            return [back(child) for child in value]
        return value

    before = prev if isinstance(prev, dict) else {}
    out: dict[str, Any] = {}
    for name, value in residue.items():
        if value in _CHAIN:
            if value == "$k":
                found: Any = event.key
            else:
                found = before.get("uuid" if value == "$^" else name)
            if not isinstance(found, str):
                raise corrupt(escape(f"repeats a field {name!r} the entry before it does not hold")[:200])
            out[name] = found
        else:
            out[name] = back(value)
    return out


def _uses(entry: Any) -> list[str]:
    if not (isinstance(entry, dict) and entry.get("type") == "assistant"):
        return []
    return [
        b["id"]
        for b in blocks_of(entry.get("message"))
        if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str) and b["id"]
    ]


def _answers(entry: Any) -> list[str]:
    if not (isinstance(entry, dict) and entry.get("type") == "user"):
        return []
    return [
        b["tool_use_id"]
        for b in blocks_of(entry.get("message"))
        if isinstance(b, dict) and b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str)
    ]


def owed_calls(entries: list[Any]) -> list[str]:
    """The ids of the ``tool_use`` blocks that no ``tool_result`` block of the entries answers,
    in order (pure)."""
    answered = {call for entry in entries for call in _answers(entry)}
    return list(dict.fromkeys(call for entry in entries for call in _uses(entry) if call not in answered))


def result_only(entry: Any) -> list[str]:
    """The calls a user entry answers when ``tool_result`` blocks are all it holds, else ``[]``."""
    if not (isinstance(entry, dict) and entry.get("type") == "user"):
        return []
    blocks = blocks_of(entry.get("message"))
    if not blocks or not all(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
        return []
    return _answers(entry)


def late_answers(
    session_id: str, entries: list[Any], answering: dict[int, list[str]], results: dict[str, Event]
) -> set[int]:
    """The places of the entries that answer, too late, calls a recovery already answered (pure).

    ``answering``: the entries read from their own event (no typed event carries them) that hold
    only ``tool_result`` blocks, with the calls they answer; ``results``: the typed log's result of
    each call. Such an entry is late when the result of record of each of its calls is
    recovery's synthetic one (G5: the first result stands; this one is ``tool_result_late``) and
    it is not that answer written back. The transcript keeps the answer the model was shown, so
    the session resumed from it stays one chain with one answer per call; the late result stays
    in the typed log, as evidence (``journal show``)."""
    asked = {call: index for index, entry in enumerate(entries) for call in _uses(entry)}
    late: set[int] = set()
    for index, calls in answering.items():
        ours = {answer_uuid(session_id, call) for call in calls}
        if entries[index].get("uuid") in ours:
            continue
        # After its call (one stored before it is no answer to a call recovery saw owed).
        if all(call in results and _synthetic(results[call]) and asked.get(call, index) < index for call in calls):
            late.add(index)
    return late


def without_late(session_id: str, entries: list[Any], late: set[int], answering: dict[int, list[str]]) -> list[Any]:
    """``entries`` without the ``late`` ones (pure): an entry chained to a late one follows the
    answer shown for that call instead (copies; the stored entries are never changed), so the
    chain has no gap."""
    moved = {entries[i].get("uuid"): answer_uuid(session_id, answering[i][-1]) for i in late}
    out: list[Any] = []
    for index, entry in enumerate(entries):
        if index in late:
            continue
        if isinstance(entry, dict) and entry.get("parentUuid") in moved:
            entry = {**entry, "parentUuid": moved[entry["parentUuid"]]}
        out.append(entry)
    return out


def _synthetic(result: Event) -> bool:
    metadata = result.data.get("metadata")
    return isinstance(metadata, dict) and metadata.get("synthetic") is True


def _message_id(entry: Any) -> Any:
    message = entry.get("message") if isinstance(entry, dict) else None
    return message.get("id") if isinstance(message, dict) else None


def _anchor(entries: list[Any], index: int) -> int:
    """Where the answers to the calls of ``entries[index]`` go: after the last entry of the model
    message it belongs to (Claude Code writes one entry per content block, chained)."""
    mid = _message_id(entries[index])
    while (
        mid is not None
        and index + 1 < len(entries)
        and isinstance(entries[index + 1], dict)
        and entries[index + 1].get("type") == "assistant"
        and _message_id(entries[index + 1]) == mid
    ):
        index += 1
    return index


def _stamp(time_ms: int) -> str:
    return (
        datetime.fromtimestamp(time_ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def _answer_entry(
    session_id: str, call_id: str, result: Event, parent: Any, template: dict[str, Any]
) -> dict[str, Any]:
    """The user entry that carries a result the typed log holds, as Claude Code writes one."""
    content = result.data.get("content")
    if not isinstance(content, (str, list)):
        content = json.dumps(content)
    is_error = result.data.get("is_error") is True
    entry: dict[str, Any] = {"parentUuid": parent}
    for name in ("isSidechain", "userType", "cwd", "sessionId", "version", "gitBranch", "agentId"):
        if name in template:
            entry[name] = _copy.deepcopy(template[name])
    entry["type"] = "user"
    entry["message"] = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}],
    }
    entry["uuid"] = answer_uuid(session_id, call_id)
    entry["timestamp"] = _stamp(result.time_ms)
    entry["toolUseResult"] = ("Error: " + content) if is_error and isinstance(content, str) else content
    return entry


def project(session_id: str, entries: list[Any], results: dict[str, Event]) -> list[Any]:
    """The entries as the SDK must see them: each ``tool_use`` that no entry answers but the
    typed log does (``results``: call id -> its ``tool_result`` event, a synthetic one saying the
    tool MAY have run or did not run) gets a user entry holding that ``tool_result`` block
    (``is_error``), right after the model message that asked for it (pure).

    The chain stays one chain: the answer's ``parentUuid`` is the entry it follows, and the
    entries that followed that one now follow the answer (copies; the stored entries are never
    changed). Its ``uuid`` is a function of the session and the call, so a read shows the same
    entry every time, and the same entry appended for real (Claude Code writes back what it
    resumed from) is that answer, stored once. Verbatim entries keep their order; none is
    dropped."""
    owed = [call for call in owed_calls(entries) if call in results]
    if not owed:
        return list(entries)
    pending = set(owed)
    after: dict[int, list[str]] = {}
    for index, entry in enumerate(entries):
        calls = [c for c in _uses(entry) if c in pending]
        if calls:
            pending.difference_update(calls)
            after.setdefault(_anchor(entries, index), []).extend(calls)
    out: list[Any] = []
    moved: dict[Any, Any] = {}  # uuid of an anchor -> uuid of the last answer put after it
    for index, entry in enumerate(entries):
        if isinstance(entry, dict) and entry.get("parentUuid") in moved:
            entry = {**entry, "parentUuid": moved[entry["parentUuid"]]}
        out.append(entry)
        answered = after.get(index)
        if not answered:
            continue
        template = entry if isinstance(entry, dict) else {}
        parent = template.get("uuid")
        for call in answered:
            answer = _answer_entry(session_id, call, results[call], parent, template)
            out.append(answer)
            parent = answer["uuid"]
        if template.get("uuid") is not None:
            moved[template["uuid"]] = parent
    return out
