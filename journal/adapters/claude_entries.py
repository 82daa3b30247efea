"""Claude Code's transcript entries as the journal stores and shows them (pure functions, no I/O).

Two concerns of the Claude adapter (``journal.adapters.claude``), kept apart so they can be
read, and table-tested, alone:

- **each item stored once**: a value an entry shares with a typed event derived from it (a
  prompt's text, a tool's input, its output) is stored once, in the typed event, and the entry
  keeps a hole there that ``filled`` puts the value back into, exactly;
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


# -- each item stored once: an entry's big values live in the typed events derived from it ---------
#
# A value of an entry that a typed event of the same batch holds too (a prompt's text, a tool's
# input, its output) is stored once, in the typed event: the entry keeps a hole there, and
# ``{"entry": <with holes>, "holes": [[entry path, offset, typed path, typed type], ...]}`` says
# where to take each value back from (the event ``offset`` places after the entry's). Values
# shorter than a hole's own cost stay in the entry.
MIN_HOLE = 48


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _typed_values(data: dict[str, Any]) -> list[tuple[list[Any], Any]]:
    """The values of a typed event an entry may hold verbatim, with their paths."""
    out: list[tuple[list[Any], Any]] = [([name], data[name]) for name in ("content", "reasoning") if name in data]
    for i, call in enumerate(data.get("tool_calls") or ()):
        out.append((["tool_calls", i, "arguments"], call.get("arguments")))
    return out


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


def holes_of(entry: Any, derived: list[Item]) -> list[list[Any]]:
    """Where the entry's values are held by the typed events derived from it (pure). A place
    inside another hole is not a hole of its own."""
    if not isinstance(entry, dict):
        return []
    held: dict[str, tuple[int, list[Any], str]] = {}
    for offset, (type_, data, _key) in enumerate(derived, start=1):
        for tpath, value in _typed_values(data):
            if isinstance(value, (str, list, dict)):
                held.setdefault(_dumps(value), (offset, tpath, type_))
    holes: list[list[Any]] = []
    for path, value in _entry_values(entry):
        if not isinstance(value, (str, list, dict)) or any(path[: len(h[0])] == h[0] for h in holes):
            continue
        text = _dumps(value)
        if len(text) >= MIN_HOLE and text in held:
            offset, tpath, type_ = held[text]
            holes.append([path, offset, tpath, type_])
    return holes


def _at(value: Any, path: list[Any]) -> Any:
    for step in path:
        value = value[step]
    return value


def punched(entry: dict[str, Any], holes: list[list[Any]]) -> dict[str, Any]:
    """A copy of the entry with ``None`` at each hole (only the containers on the way copied)."""
    out = dict(entry)
    for path, *_ in holes:
        node = out
        for step in path[:-1]:
            node[step] = child = list(node[step]) if isinstance(node[step], list) else dict(node[step])
            node = child
        node[path[-1]] = None
    return out


def filled(event: Event, by_seq: dict[int, Event]) -> dict[str, Any]:
    """The entry back from its residue and the typed events its holes name (exact: the values
    are the JSON the typed events hold)."""
    out = _copy.deepcopy(event.data["entry"])
    for path, offset, tpath, type_ in event.data["holes"]:
        source = by_seq.get(event.seq + offset)
        if source is None or source.type != type_:
            raise CorruptJournal(
                escape(f"session {event.session_id!r}")[:300],
                f"its {ENTRY} at seq {event.seq} takes a value from a {type_} at seq {event.seq + offset} that is not there",
            )
        node = out
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = _copy.deepcopy(_at(source.data, tpath))
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
        calls = after.get(index)
        if not calls:
            continue
        template = entry if isinstance(entry, dict) else {}
        parent = template.get("uuid")
        for call in calls:
            answer = _answer_entry(session_id, call, results[call], parent, template)
            out.append(answer)
            parent = answer["uuid"]
        if template.get("uuid") is not None:
            moved[template["uuid"]] = parent
    return out
