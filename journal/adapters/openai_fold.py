"""openai-agents items stored once: an item as the residue of the typed event that holds it (pure).

An item the runner saves that has a typed event (a user or system message, an assistant message,
a function call, a function call's output) is not stored beside that event: it is stored *in* it,
or next to it as a reference, as an **entry** -- the item minus what the typed event already
holds -- and put back exactly (deep-equal, key order and JSON types kept) by ``unfold``.

Where entries are stored (``rows``):

- a **carrier**: a typed event (``user_message``, ``system_message``, ``assistant_message``,
  ``tool_result``, or the ``tool_result_late`` G5 makes of a second, different result) whose
  ``metadata["openai_items"]`` lists the entries of the items it was derived from, in order;
- a **reference**, ``x.openai_agents.ref`` ``{"items": [[seq], [seq, entry], ...]}``: items whose
  typed event the hooks wrote earlier (the model's answer with its calls, each call's result),
  each naming the seq of that event;
- ``x.openai_agents.item`` ``{"item": ...}``: an item stored whole (no typed event holds it), as
  every item was before (files of that format read as they did).

An entry is a dict, the **residue**: the item's fields that the event's *template* (the item the
event rebuilds, ``_template``) does not hold, by their names. ``"$"`` names the template when it
is not the event's first one (an int ``n``: the call ``tool_calls[n]``), ``"$keys"`` lists the
item's field names when the template's order (or fields) differ; an item field whose name starts
with ``$`` is stored with one more ``$``. In the residue's values, ``"$c"`` stands for the event's
``content`` (a string) and a string that starts with ``$`` is stored with one more ``$``. An entry
that is a one-element list ``[item]`` holds an item whole (a reasoning item carried by its
answer).
"""

from __future__ import annotations

import copy as _copy
import json
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from journal.adapters.claude_entries import dumps, same
from journal.errors import CorruptJournal
from journal.escape import escape
from journal.model import Event

ITEM = "x.openai_agents.item"
REF = "x.openai_agents.ref"
CARRIED = "openai_items"  # the metadata key of a carrier's entries
CARRIERS = ("user_message", "system_message", "assistant_message", "tool_result", "tool_result_late")
_ABSENT = object()
_SLOT = object()  # a template field whose place is fixed and whose value is always the residue's
_COMPACT = json.JSONEncoder(separators=(",", ":"))  # json.dumps(..., separators=(",", ":")), built once
_MIN_REF = 4  # shorter contents are not worth a reference


# -- the items a typed event rebuilds ---------------------------------------------------------------


def function_call(tool_call: dict[str, Any]) -> dict[str, Any]:
    """A ``function_call`` item rebuilt from a typed tool call (arguments as compact JSON), its
    fields in the order the SDK gives them."""
    arguments = tool_call.get("arguments")
    text = arguments if isinstance(arguments, str) else _COMPACT.encode(arguments if arguments is not None else {})
    return {"arguments": text, "call_id": tool_call["id"], "name": tool_call.get("name"), "type": "function_call"}


def call_items(event: Event) -> dict[str, Any]:
    """The call items of an ``assistant_message`` with calls, as the model sent them, by call id
    (its ``metadata["openai_agents"]`` keeps what its ``tool_calls`` do not rebuild)."""
    kept = (event.data.get("metadata") or {}).get("openai_agents") or {}
    items: dict[str, Any] = {i["call_id"]: i for i in kept.get("items", ()) if isinstance(i, dict) and "call_id" in i}
    residues = kept.get("call_items") or {}
    for tool_call in event.data.get("tool_calls") or ():
        residue = residues.get(tool_call.get("id")) if isinstance(tool_call, dict) else None
        if isinstance(residue, dict):
            items[tool_call["id"]] = {**function_call(tool_call), **residue}
    return items


def _fresh(value: Any) -> Any:
    """A value of an event's data an item may hold: a copy when it is a container (two items,
    or an item and its event, never share one object)."""
    return value if type(value) is str or not isinstance(value, (list, dict)) else _copy.deepcopy(value)


def _parts(content: Any) -> Any:
    """An assistant message's content as the Responses API gives it: one output text part."""
    if type(content) is str:
        return [{"annotations": [], "text": content, "type": "output_text", "logprobs": []}]
    return _fresh(content)


def _template(event: Event, tag: Any) -> dict[str, Any] | None:
    """The item ``event`` rebuilds under ``tag`` (``None``: its first template), or ``None``: a
    new object, which the rebuilt item may keep."""
    data, kind = event.data, event.type
    content = data.get("content")
    if kind != "assistant_message":
        content = _fresh(content)
    if kind in ("user_message", "system_message"):
        role = "user" if kind == "user_message" else "system"
        if tag is None:
            return {"content": content, "role": role}
        return {"role": role, "content": content} if tag == "r" else None
    if kind in ("tool_result", "tool_result_late"):
        call_id = data.get("tool_call_id")
        if tag is None:
            return {"call_id": call_id, "output": content, "type": "function_call_output"}
        return {"type": "function_call_output", "call_id": call_id, "output": content} if tag == "t" else None
    if kind != "assistant_message":
        return None
    if tag is None:
        return {"id": _SLOT, "content": _parts(content), "role": "assistant", "status": "completed", "type": "message"}
    if tag == "e":
        return {"role": "assistant", "content": _fresh(content)}
    calls = data.get("tool_calls")
    if type(tag) is int and isinstance(calls, list) and 0 <= tag < len(calls) and isinstance(calls[tag], dict):
        call = calls[tag]
        kept = call_items(event).get(call.get("id"))
        return {k: _fresh(v) for k, v in kept.items()} if isinstance(kept, dict) else function_call(call)
    return None


def _tags(event: Event, call: int | None) -> list[Any]:
    """The templates an item may be folded against: the call's, or the event type's."""
    if call is not None:
        return [call]
    if event.type in ("user_message", "system_message"):
        return [None, "r"]
    if event.type in ("tool_result", "tool_result_late"):
        return [None, "t"]
    return [None, "e"]


# -- fold and unfold ---------------------------------------------------------------------------------


def _escape(value: Any, content: Any) -> Any:
    if type(value) is str:
        if value == content:
            return "$c"
        return "$" + value if value.startswith("$") else value
    if isinstance(value, dict):
        return {name: _escape(child, content) for name, child in value.items()}
    if isinstance(value, list):
        return [_escape(child, content) for child in value]
    return value


def _unescape(value: Any, content: Any, corrupt: Any) -> Any:
    if type(value) is str:
        if value[:1] != "$":
            return value
        if value[1:2] == "$":
            return value[1:]
        if value == "$c" and isinstance(content, str):
            return content
        raise corrupt(f"holds a reference its event cannot resolve ({value[:40]!r})")
    if isinstance(value, dict):
        return {name: _unescape(child, content, corrupt) for name, child in value.items()}
    if isinstance(value, list):
        return [_unescape(child, content, corrupt) for child in value]
    return value


def _apply(template: dict[str, Any], residue: dict[str, Any], content: Any, corrupt: Any) -> dict[str, Any]:
    """``template`` (a new object: it is consumed) with ``residue`` applied."""
    if not residue:  # the item is its event's template (the common case)
        return {name: value for name, value in template.items() if value is not _SLOT}
    values: dict[str, Any] = {}
    for name, value in residue.items():
        if name in ("$", "$keys"):
            continue
        if name[:1] == "$":
            if name[1:2] != "$":
                raise corrupt(f"has a field name it does not define ({name[:40]!r})")
            name = name[1:]
        values[name] = _unescape(value, content, corrupt)
    out: dict[str, Any] = {}
    for name, value in template.items():
        if name in values:
            out[name] = values.pop(name)
        elif value is not _SLOT:
            out[name] = value
    out.update(values)
    keys = residue.get("$keys")
    if keys is not None:
        if not isinstance(keys, list) or not all(isinstance(k, str) and k in out for k in keys):
            raise corrupt("lists fields it does not hold")
        out = {name: out[name] for name in keys}
    return out


def _residue(item: dict[str, Any], template: dict[str, Any], tag: Any, content: Any) -> dict[str, Any]:
    ref = content if isinstance(content, str) and len(content) >= _MIN_REF else _ABSENT
    residue: dict[str, Any] = {} if tag is None else {"$": tag}
    for name, value in item.items():
        held = template.get(name, _ABSENT)
        if held is _ABSENT or held is _SLOT or not same(held, value):
            residue["$" + name if name.startswith("$") else name] = _escape(value, ref)
    return residue


def _never(detail: str) -> CorruptJournal:  # pragma: no cover - fold checks what it writes
    return CorruptJournal("an item being stored", detail)


def fold(item: Any, event: Event, *, call: int | None = None) -> Any:
    """The entry that stores ``item`` in (or against) ``event``: the shortest residue that
    rebuilds it exactly, or ``[item]`` (whole) when none does. ``call``: the item is the call
    ``tool_calls[call]`` of the event. ``event`` may be the typed event about to be written (its
    seq does not matter)."""
    if not isinstance(item, dict):
        return [item]
    best: Any = [item]
    size = len(dumps(best))
    exact = dumps(item)
    content = event.data.get("content")
    for tag in _tags(event, call):
        template = _template(event, tag)
        if template is None:
            continue
        residue = _residue(item, template, tag, content)
        rebuilt = _apply(template, residue, content, _never)
        if list(rebuilt) != list(item):
            residue["$keys"] = list(item)
            rebuilt = _apply(_template(event, tag) or {}, residue, content, _never)
        if dumps(rebuilt) != exact:
            continue
        length = len(dumps(residue))
        if length < size:
            best, size = residue, length
    return best


def unfold(entry: Any, event: Event) -> Any:
    """The item an entry stores, against the event that holds it (exact)."""

    def corrupt(detail: str) -> CorruptJournal:
        return CorruptJournal(
            escape(f"session {event.session_id!r}")[:300],
            escape(f"an openai-agents item stored in its {event.type} at seq {event.seq} {detail}")[:400],
        )

    if isinstance(entry, list) and len(entry) == 1:
        return entry[0]
    if not isinstance(entry, dict):
        raise corrupt("is neither an item nor a residue")
    template = _template(event, entry.get("$"))
    if template is None:
        raise corrupt(escape(f"names a template the event does not have ({entry.get('$')!r})")[:200])
    return _apply(template, entry, event.data.get("content"), corrupt)


# -- the stored items of a read ----------------------------------------------------------------------


class Stored(NamedTuple):
    """One item as the log stores it: the seq of its row, its place in that row (``n``), the item,
    the seq a stored projection stands after (``at``), and the typed event it is stored in or was
    derived next to (``typed``: what ``pop_item`` may retract)."""

    seq: int
    n: int
    item: Any
    at: int | None = None
    typed: int | None = None


def entries(event: Event) -> list[Any] | None:
    """The entries a carrier holds (``None`` when the event stores no item)."""
    if event.type not in CARRIERS:
        return None
    metadata = event.data.get("metadata")
    found = metadata.get(CARRIED) if isinstance(metadata, dict) else None
    return found if isinstance(found, list) else None


def is_row(event: Event) -> bool:
    """Whether ``event`` stores items (an item event, a reference or a carrier)."""
    return event.type in (ITEM, REF) or entries(event) is not None


def ref_sources(events: Iterable[Event]) -> set[int]:
    """The seqs the references among ``events`` name."""
    out: set[int] = set()
    for event in events:
        if event.type == REF:
            for ref in event.data.get("items") or ():
                if isinstance(ref, list) and ref and type(ref[0]) is int:
                    out.add(ref[0])
    return out


def stored(events: Sequence[Event], sources: dict[int, Event] | None = None) -> list[Stored]:
    """The items ``events`` (in seq order) store, in order; events that store none are passed
    over. A reference's event is looked up among ``events`` and ``sources`` (by seq); a missing
    one is ``CorruptJournal``."""
    by_seq: dict[int, Event] | None = None
    out: list[Stored] = []
    for event in events:
        kind = event.type
        if kind == ITEM:
            at = event.data.get("at")
            out.append(Stored(event.seq, 0, event.data.get("item"), at if isinstance(at, int) else None, event.seq + 1))
        elif kind == REF:
            if by_seq is None:
                by_seq = {**(sources or {}), **{e.seq: e for e in events}}
            for n, ref in enumerate(event.data.get("items") or ()):
                source = by_seq.get(ref[0]) if isinstance(ref, list) and ref and type(ref[0]) is int else None
                if source is None or source.seq >= event.seq:
                    raise CorruptJournal(
                        escape(f"session {event.session_id!r}")[:300],
                        escape(f"its {REF} at seq {event.seq} names an event that is not there ({ref!r})")[:300],
                    )
                out.append(Stored(event.seq, n, unfold(ref[1] if len(ref) > 1 else {}, source)))
        elif kind in CARRIERS:
            for n, entry in enumerate(entries(event) or ()):
                out.append(Stored(event.seq, n, unfold(entry, event), None, event.seq))
    return out
