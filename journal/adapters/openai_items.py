"""openai-agents items and the journal's typed log, both ways (pure: no I/O, no framework import).

- ``derive``: the batch ``add_items`` appends for the runner's items: each item verbatim as an
  ``x.openai_agents.item`` event, followed by the typed events it completes.
- ``project``: what ``get_items`` shows: the stored items (minus pops, since the last clear), and
  what recovery wrote that the items lack, in the framework's shape and in its place (DESIGN §14):
  a ``function_call_output`` right after the calls it answers, and the ``function_call`` plus its
  output of a call the runner never saved (it saves a call with its output, after the tool ran)
  at the place of the answer that asked for it -- before anything later, such as the next input.
- ``cut_tail``: how far back a read must look for what ``project`` derives from the typed log.

Where projections come from. The typed events a projection rests on (the results, the answers
of interrupted turns) are read from the *tail*: the events after the last stored item, reaching
back to the start of any turn the tail closes as interrupted. Each ``add_items`` first stores the
projections of its tail (``x.openai_agents.item`` events with ``at``, the seq they stand after),
in the same transaction as the new items, so what it buries under them stays shown. A read is
then the stored items plus the projections of the tail, never a walk of the whole log.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from journal.model import Event

ITEM = "x.openai_agents.item"
POP = "x.openai_agents.pop"
CLEAR = "x.openai_agents.clear"
MARKERS = [ITEM, POP, CLEAR]
_ABSENT = object()

Typed = tuple[str, dict[str, Any], str | None]
# What a shown item is known by, for pops: ("seq", s) for a stored item event, ("call", call id,
# "call" | "output") for a projection not stored yet.
Key = tuple[Any, ...]


# -- items ------------------------------------------------------------------------------------------


def get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def is_assistant_side(item: Any) -> bool:
    """Items the model produced: they group into one assistant message."""
    kind = get(item, "type")
    if kind in ("function_call", "reasoning"):
        return True
    return get(item, "role") == "assistant" and kind in (None, "message")


def _text(content: Any) -> Any:
    """A message's content as the journal shows it: a string as is, text parts joined, anything
    else (images, files) kept as the list of parts."""
    if isinstance(content, str) or not isinstance(content, list):
        return content
    texts = []
    for part in content:
        text = part.get("text", part.get("refusal")) if isinstance(part, dict) else None
        if not isinstance(text, str):
            return content
        texts.append(text)
    return "".join(texts)


def _arguments(raw: Any) -> Any:
    """A call's arguments: the decoded JSON the model sent, or the raw string if it is not JSON."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _is_content(value: Any) -> bool:
    """Whether the journal takes ``value`` as a message's content (text or JSON blocks)."""
    return isinstance(value, (str, list, dict))


def calls_key(call_id: str) -> str:
    """The idempotency key of the assistant message that requested ``call_id`` first: the hooks
    and the session derive the same message, and the journal keeps the first one written."""
    key = f"oa-calls:{call_id}"
    if len(key) <= 256:
        return key
    return "oa-calls:" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()


def assistant(group: Sequence[Any], *, keep_items: bool = False) -> list[Typed]:
    """The typed events of a run of assistant-side items: one message with the calls, or one
    message per text message when there are none. Items the journal could not type (a call
    without an id or name, a repeated call id, content that is not content) stay verbatim only."""
    calls: dict[str, Any] = {}
    for item in group:
        call_id, name = get(item, "call_id"), get(item, "name")
        if (
            get(item, "type") == "function_call"
            and isinstance(call_id, str)
            and call_id
            and isinstance(name, str)
            and name
        ):
            calls.setdefault(call_id, item)
    texts = [
        _text(get(i, "content"))
        for i in group
        if get(i, "type") not in ("function_call", "reasoning") and _is_content(get(i, "content"))
    ]
    if not calls:
        return [("assistant_message", {"content": t, "stop_reason": "stop"}, None) for t in texts]
    content: Any = "".join(texts) if all(isinstance(t, str) for t in texts) else texts
    data: dict[str, Any] = {
        "content": content,
        "tool_calls": [
            {"id": call_id, "name": get(c, "name"), "arguments": _arguments(get(c, "arguments"))}
            for call_id, c in calls.items()
        ],
        "stop_reason": "tool_use",
    }
    if keep_items:  # what rebuilds the call items as the model sent them (calls never saved)
        data["metadata"] = {"openai_agents": _call_items(data["tool_calls"], calls)}
    return [("assistant_message", data, calls_key(next(iter(calls))))]


def _call_items(tool_calls: Sequence[dict[str, Any]], items: dict[str, Any]) -> dict[str, Any]:
    """The call items as the message's metadata keeps them: for each call, only the fields its
    typed ``tool_calls`` entry does not rebuild (``call_items``: call id -> those fields), so the
    item is not stored a second time; an item that cannot be rebuilt so is kept whole (``items``)."""
    residues: dict[str, Any] = {}
    whole: list[Any] = []
    for tool_call in tool_calls:
        item = items[tool_call["id"]]
        rebuilt = function_call(tool_call)
        residue = {k: v for k, v in item.items() if rebuilt.get(k, _ABSENT) != v} if isinstance(item, dict) else None
        if residue is not None and {**rebuilt, **residue} == item:
            residues[tool_call["id"]] = residue
        else:
            whole.append(item)
    return {"call_items": residues, **({"items": whole} if whole else {})}


def call_items(event: Event) -> dict[str, Any]:
    """The call items of an ``assistant_message`` with calls, rebuilt exactly, by call id."""
    kept = (event.data.get("metadata") or {}).get("openai_agents") or {}
    items = {get(i, "call_id"): i for i in kept.get("items", ()) if isinstance(i, dict)}
    residues = kept.get("call_items") or {}
    for tool_call in event.data.get("tool_calls") or ():
        residue = residues.get(tool_call.get("id")) if isinstance(tool_call, dict) else None
        if isinstance(residue, dict):
            items[tool_call["id"]] = {**function_call(tool_call), **residue}
    return items


def _typed(item: dict[str, Any]) -> list[Typed]:
    """The typed events of one item that is not assistant-side."""
    kind, role, call_id = item.get("type"), item.get("role"), item.get("call_id")
    if kind == "function_call_output" and isinstance(call_id, str) and call_id and _is_content(item.get("output")):
        return [("tool_result", {"tool_call_id": call_id, "content": item["output"]}, None)]
    if kind in (None, "message") and _is_content(item.get("content")):
        if role == "user":
            return [("user_message", {"content": _text(item["content"])}, None)]
        if role in ("system", "developer"):
            return [("system_message", {"content": _text(item["content"])}, None)]
    return []


def derive(items: Sequence[Any]) -> list[Typed]:
    """The batch ``add_items`` appends: each item verbatim, each followed by the typed events it
    completes (a group of assistant-side items by its one message, after its last item)."""
    batch: list[Typed] = []
    group: list[Any] = []
    for item in items:
        if isinstance(item, dict) and is_assistant_side(item):
            group.append(item)
            batch.append((ITEM, {"item": item}, None))
            continue
        if group:
            batch.extend(assistant(group))
            group = []
        batch.append((ITEM, {"item": item}, None))
        if isinstance(item, dict):
            batch.extend(_typed(item))
    if group:
        batch.extend(assistant(group))
    return batch


def function_call(tool_call: dict[str, Any]) -> dict[str, Any]:
    """A ``function_call`` item rebuilt from a typed tool call (arguments as compact JSON)."""
    arguments = tool_call.get("arguments")
    text = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(arguments if arguments is not None else {}, separators=(",", ":"))
    )
    return {"type": "function_call", "call_id": tool_call["id"], "name": tool_call.get("name"), "arguments": text}


def function_call_output(call_id: str, content: Any) -> dict[str, Any]:
    """The ``function_call_output`` item that carries a result's content."""
    output = content if isinstance(content, (str, list)) else json.dumps(content)
    return {"type": "function_call_output", "call_id": call_id, "output": output}


# -- the view ---------------------------------------------------------------------------------------


@attrs.frozen
class Shown:
    """One item of the framework's view: where it stands (``pos``, a sort key), what pops call it
    (``key``), the item, and, for a projection, the seq it stands after (``at``: stored with it
    when ``add_items`` makes it permanent)."""

    pos: tuple[int, int, int, int]
    key: Key
    item: Any
    at: int | None = None  # set for a projection (stored or not)
    stored: bool = True


def pop_key(data: dict[str, Any]) -> Key:
    """The key a pop marker's data names."""
    if "call_id" in data:
        return ("call", data["call_id"], data.get("part"))
    return ("seq", data.get("seq"))


def pop_data(key: Key) -> dict[str, Any]:
    """The pop marker's data for a shown item's key."""
    if key[0] == "seq":
        return {"seq": key[1]}
    return {"call_id": key[1], "part": key[2]}


@attrs.frozen
class _Asked:
    """An answer of an interrupted turn that asked for calls: its seq and its calls."""

    seq: int
    calls: tuple[dict[str, Any], ...]
    items: dict[str, Any]  # call id -> the function_call item as the model sent it


def _typed_facts(tail: Iterable[Event]) -> tuple[dict[str, Any], list[_Asked]]:
    """From the tail: the first result of each call, and the answers of interrupted turns."""
    results: dict[str, Any] = {}
    asked: list[_Asked] = []
    turn: list[_Asked] = []  # answers of the turn being read (the tail may start inside one)
    for event in tail:
        if event.type == "turn_start":
            turn = []
        elif event.type == "turn_end":
            if event.data.get("reason") == "interrupted":
                asked.extend(turn)
            turn = []
        elif event.type == "assistant_message" and event.data.get("tool_calls"):
            calls = tuple(c for c in event.data["tool_calls"] if isinstance(c, dict) and isinstance(c.get("id"), str))
            turn.append(_Asked(event.seq, calls, call_items(event)))
        elif event.type == "tool_result":
            call_id = event.data.get("tool_call_id")
            if isinstance(call_id, str):  # (the codec checks a result's call id)
                results.setdefault(call_id, event.data.get("content"))
    return results, asked


def project(
    marks: Sequence[Event],
    tail: Sequence[Event],
    *,
    since: int = 0,
    called: Iterable[str] = (),
    answered: Iterable[str] = (),
) -> list[Shown]:
    """The framework's view, oldest first: the stored items of ``marks`` (item, pop and clear
    events) and the projections of ``tail`` (the events after the last stored item, reaching back
    to the start of every turn it closes as interrupted), everything before ``since`` left out.

    ``called``/``answered``: call ids whose ``function_call``/``function_call_output`` items are
    being added with this read (``add_items``): nothing is projected for them."""
    stored: dict[int, Event] = {}
    popped: set[Key] = set()
    for event in [*marks, *tail]:
        if event.seq < since:
            continue
        if event.type == ITEM:
            stored[event.seq] = event
        elif event.type == POP:
            popped.add(pop_key(event.data))
    # What the payload holds, popped or not: a popped call or output is the framework's choice.
    has_call, has_output = set(called), set(answered)
    for event in stored.values():
        item = event.data.get("item")
        kind, call_id = get(item, "type"), get(item, "call_id")
        if kind == "function_call":
            has_call.add(call_id)
        elif kind == "function_call_output":
            has_output.add(call_id)
    results, asked = _typed_facts(e for e in tail if e.seq >= since)

    view: list[Shown] = []
    for seq, event in stored.items():
        at = event.data.get("at")
        if isinstance(at, int):
            view.append(Shown((at, 1, seq, 0), ("seq", seq), event.data["item"], at=at))
        else:
            view.append(Shown((seq, 0, 0, 0), ("seq", seq), event.data["item"]))
    # Calls the runner never saved, answered by the journal: the call items, then their outputs,
    # where the answer that asked for them stands.
    for ask in asked:
        new = [c for c in ask.calls if c["id"] not in has_call and c["id"] in results]
        for k, call in enumerate(new):
            item = ask.items.get(call["id"]) or function_call(call)
            view.append(Shown((ask.seq, 2, k, 0), ("call", call["id"], "call"), item, at=ask.seq, stored=False))
            has_call.add(call["id"])
        for k, call in enumerate(new):
            if call["id"] in has_output:
                continue
            output = function_call_output(call["id"], results[call["id"]])
            view.append(
                Shown((ask.seq, 2, len(new) + k, 0), ("call", call["id"], "output"), output, at=ask.seq, stored=False)
            )
            has_output.add(call["id"])
    view.sort(key=lambda s: s.pos)
    view = [s for s in view if s.key not in popped]
    return _answer_shown_calls(view, results, has_output, popped)


def shown_items(marks: Sequence[Event], tail: Sequence[Event], *, since: int = 0) -> list[Any]:
    """``project``'s items alone. Without a crash to show (the tail holds no result and no
    interrupted answer, no projection was stored) the stored items in seq order minus pops:
    the same answer, without building the view (``get_items`` reads every item of a session)."""
    results, asked = _typed_facts(e for e in tail if e.seq >= since)
    if not results and not asked:
        shown: dict[int, Any] = {}
        for event in marks:
            if event.seq < since:
                continue
            if event.type == ITEM:
                if "at" in event.data:
                    break  # a stored projection stands at its place: the full view places it
                shown[event.seq] = event.data["item"]
            elif event.type == POP:
                if "call_id" in event.data:
                    break
                seq = event.data.get("seq")
                if isinstance(seq, int):  # (a pop this adapter wrote names a seq; another pops nothing)
                    shown.pop(seq, None)
        else:
            return list(shown.values())
    return [s.item for s in project(marks, tail, since=since)]


def _answer_shown_calls(
    view: list[Shown], results: dict[str, Any], has_output: set[str], popped: set[Key]
) -> list[Shown]:
    """Insert an output for each shown call the tail answers and the payload does not, right
    after the run of model items (and outputs) the call belongs to, in call order."""
    if not results:
        return view
    out: list[Shown] = []
    owed: list[str] = []

    def settle() -> None:
        last = out[-1]
        anchor = last.at if last.at is not None else last.pos[0]
        for k, call_id in enumerate(owed):
            key = ("call", call_id, "output")
            if key not in popped:
                pos = (last.pos[0], last.pos[1], last.pos[2], last.pos[3] + 1 + k)
                out.append(Shown(pos, key, function_call_output(call_id, results[call_id]), at=anchor, stored=False))
            has_output.add(call_id)
        owed.clear()

    for shown in view:
        item = shown.item
        if owed and not (is_assistant_side(item) or get(item, "type") == "function_call_output"):
            settle()
        out.append(shown)
        call_id = get(item, "call_id")
        if get(item, "type") == "function_call" and call_id in results and call_id not in has_output | set(owed):
            owed.append(call_id)
    if owed:
        settle()
    return out


def cut_tail(newest: Sequence[Event]) -> tuple[list[Event], bool]:
    """The tail a read projects from, in seq order, out of events read newest first; and whether
    it is complete (otherwise read further back). It ends at the last stored item (kept) or clear
    (left out), reaching back to the ``turn_start`` of each turn it closes as interrupted."""
    owed = 0  # interrupted turns whose start is not read yet
    found = False
    out: list[Event] = []
    for event in newest:
        if event.type == CLEAR:
            return out[::-1], True
        if event.type == "turn_end" and event.data.get("reason") == "interrupted":
            owed += 1
        elif event.type == "turn_start" and owed:
            owed -= 1
        out.append(event)
        found = found or event.type == ITEM
        if found and not owed:
            return out[::-1], True
    return out[::-1], False


def tail_claims(tail: Sequence[Event], *, called: Iterable[str] = (), answered: Iterable[str] = ()) -> set[str]:
    """Call ids the tail may have to project for (results and interrupted answers' calls) that its
    own items and the items being added do not already cover: empty in a run without a crash, so
    ``add_items`` needs no read of the older items."""
    results, asked = _typed_facts(tail)
    items = [e.data.get("item") for e in tail if e.type == ITEM]
    covered = set(answered) | {get(i, "call_id") for i in items if get(i, "type") == "function_call_output"}
    saved = set(called) | {get(i, "call_id") for i in items if get(i, "type") == "function_call"}
    claims = {c for c in results if c not in covered}
    claims |= {c["id"] for a in asked for c in a.calls if c["id"] in results and c["id"] not in saved}
    return claims
