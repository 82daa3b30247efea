"""openai-agents items and the journal's typed log, both ways (pure: no I/O, no framework import).

- ``Planner``: the batch ``add_items`` appends for the runner's items, each item stored once
  (``journal.adapters.openai_fold``): in the typed event derived from it (a *carrier*), as a
  reference to the typed event the hooks wrote before (the answer with its calls, each call's
  result), or whole as an ``x.openai_agents.item`` when no typed event holds it.
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
then the stored items plus the projections of the tail: one read of the session's item and typed
events since the last clear (``READ``), never of its bookkeeping.

Why a reference needs the tail. A carrier is written only where it is sure to be written: a
``tool_result`` for a call that already has one is not (G5 skips the same result again), nor an
answer whose key is stored (the idempotency key). The hooks' answer and results stand in the
tail the runner's items are added on, so those items refer to them; otherwise ``Known`` (what the
whole log holds: keys and answered calls) says whether a carrier is sure, and where it is not the
item is stored whole beside its typed event, as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from journal.adapters.claude_entries import same
from journal.adapters.openai_fold import (
    CARRIED,
    CARRIERS,
    ITEM,
    REF,
    Stored,
    call_items,
    fold,
    function_call,
    is_row,
    stored,
)
from journal.model import Event

POP = "x.openai_agents.pop"
CLEAR = "x.openai_agents.clear"
MARKERS = [ITEM, REF, POP, CLEAR]
# What a read of every item takes from the log: the rows that store items (and the typed events
# a reference names: the hooks' answers and results are of those types), and the pops. A read of
# the newest of them (``READ``) takes the clears and the turns' starts and ends too: the tail.
ROWS = [ITEM, REF, POP, *CARRIERS]
READ = [*ROWS, CLEAR, "turn_start", "turn_end"]
_ABSENT = object()

Typed = tuple[str, dict[str, Any], str | None]
# What a shown item is known by, for pops: ("seq", s, n) for the n-th item a row stores,
# ("call", call id, "call" | "output") for a projection not stored yet.
Key = tuple[Any, ...]

__all__ = ["CLEAR", "ITEM", "POP", "READ", "REF", "ROWS", "call_items", "function_call"]


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


def _is_message(item: dict[str, Any]) -> bool:
    """An item that is a message with content the journal takes (a user's, a model's...)."""
    return item.get("type") in (None, "message") and _is_content(item.get("content"))


def calls_key(call_id: str) -> str:
    """The idempotency key of the assistant message that requested ``call_id`` first: the hooks
    and the session derive the same message, and the journal keeps the first one written."""
    key = f"oa-calls:{call_id}"
    if len(key) <= 256:
        return key
    return "oa-calls:" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()


def _calls(group: Sequence[Any]) -> dict[str, Any]:
    """The calls the journal types in a run of assistant-side items: the first item of each call
    id that has an id and a name, by call id, in order."""
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
    return calls


def assistant(group: Sequence[Any], *, keep_items: bool = False) -> list[Typed]:
    """The typed events of a run of assistant-side items: one message with the calls, or one
    message per text message when there are none. Items the journal could not type (a call
    without an id or name, a repeated call id, content that is not content) are not in them."""
    calls = _calls(group)
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
    if keep_items:  # what rebuilds the call items as the model sent them
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


def function_call_output(call_id: str, content: Any) -> dict[str, Any]:
    """The ``function_call_output`` item that carries a result's content (a projection)."""
    output = content if isinstance(content, (str, list)) else json.dumps(content)
    return {"type": "function_call_output", "call_id": call_id, "output": output}


# -- the batch add_items appends -------------------------------------------------------------------


def digest(content: Any) -> str:
    """What a result's content is, loosely (``1``, ``1.0`` and ``true`` alike, keys in any order):
    two contents with the same digest may be the same result to G5, which compares with ``==``."""

    def loose(value: Any) -> Any:
        if isinstance(value, bool) or isinstance(value, int):
            return float(value)
        if isinstance(value, dict):
            return {name: loose(child) for name, child in value.items()}
        if isinstance(value, list):
            return [loose(child) for child in value]
        return value

    text = json.dumps(loose(content), sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@attrs.define
class Known:
    """What the whole log holds that decides whether a carrier is sure to be written: the
    idempotency keys stored, and the calls that have a result with their content's ``digest``
    (as of ``seen`` events)."""

    created_ms: int
    seen: int = 0
    keys: set[str] = attrs.field(factory=set)
    answered: dict[str, str] = attrs.field(factory=dict)

    def fold(self, events: Iterable[Event], count: int) -> None:
        for event in events:
            if event.seq < self.seen or event.seq >= count:
                continue
            if event.key is not None:
                self.keys.add(event.key)
            call_id = event.data.get("tool_call_id")
            if event.type == "tool_result" and isinstance(call_id, str):
                self.answered.setdefault(call_id, digest(event.data.get("content")))
        self.seen = max(self.seen, count)


class NeedKnown(Exception):
    """The plan needs ``Known``: an item's typed event may already be stored, not in the tail."""


def _carrier(type_: str, data: dict[str, Any], item_entries: list[Any], key: str | None = None) -> Typed:
    metadata = dict(data.get("metadata") or {})
    metadata[CARRIED] = item_entries
    return (type_, {**data, "metadata": metadata}, key)


def _draft(type_: str, data: dict[str, Any]) -> Event:
    """A typed event about to be written, to fold its items against (its seq does not matter)."""
    return Event("", -1, type_, data, 0)


class Planner:
    """The rows that store ``items`` once (see the module's docstring), planned against the tail
    the batch is appended on (``expected_count``) and, when the tail cannot tell, ``Known``."""

    def __init__(self, tail: Sequence[Event], known: Known | None = None) -> None:
        self.known = known
        self.rows: list[Typed] = []
        self._refs: list[list[Any]] = []
        self.answers: dict[str, Event] = {}  # key -> the answer stored under it, in the tail
        self.results: dict[str, Event] = {}  # call id -> its result, in the tail
        for event in tail:
            if event.type == "assistant_message" and event.key is not None:
                self.answers.setdefault(event.key, event)
            elif event.type == "tool_result" and isinstance(event.data.get("tool_call_id"), str):
                self.results.setdefault(event.data["tool_call_id"], event)
        self.keys: set[str] = set()  # keys written by this batch
        self.answered: dict[str, str] = {}  # calls answered by this batch: the digest of their output

    def plan(self, items: Sequence[Any]) -> list[Typed]:
        group: list[Any] = []
        for item in items:
            if isinstance(item, dict) and is_assistant_side(item):
                group.append(item)
                continue
            if group:
                self._group(group)
                group = []
            self._single(item)
        if group:
            self._group(group)
        self._flush()
        return self.rows

    def _add(self, row: Typed) -> None:
        self._flush()
        self.rows.append(row)

    def _whole(self, item: Any) -> None:
        self._add((ITEM, {"item": item}, None))

    def _ref(self, source: Event, entry: Any) -> None:
        if isinstance(entry, list):  # no residue rebuilds it (it cannot be the event's): whole
            self._whole(entry[0])
        else:
            self._refs.append([source.seq] if not entry else [source.seq, entry])

    def _flush(self) -> None:
        if self._refs:
            self.rows.append((REF, {"items": self._refs}, None))
            self._refs = []

    def _stored(self, key: str) -> bool:
        if key in self.keys:
            return True
        if self.known is None:
            raise NeedKnown(key)
        return key in self.known.keys

    def _winner(self, call_id: str) -> str | None:
        """The digest of the result the call has already (``None``: it has none)."""
        if call_id in self.answered:
            return self.answered[call_id]
        if self.known is None:
            raise NeedKnown(call_id)
        return self.known.answered.get(call_id)

    def _single(self, item: Any) -> None:
        if not isinstance(item, dict):
            self._whole(item)
            return
        kind, role, call_id = item.get("type"), item.get("role"), item.get("call_id")
        if kind == "function_call_output" and isinstance(call_id, str) and call_id and _is_content(item.get("output")):
            self._output(item, call_id)
        elif _is_message(item) and role in ("user", "system", "developer"):
            type_ = "user_message" if role == "user" else "system_message"
            data = {"content": _text(item["content"])}
            self._add(_carrier(type_, data, [fold(item, _draft(type_, data))]))
        else:
            self._whole(item)

    def _output(self, item: dict[str, Any], call_id: str) -> None:
        output = item["output"]
        data = {"tool_call_id": call_id, "content": output}
        result = self.results.get(call_id)
        if result is not None:
            winner: str | None = digest(result.data.get("content"))
            if same(result.data.get("content"), output):
                self._ref(result, fold(item, result))  # the hooks' result: the same output
                return
        else:
            winner = self._winner(call_id)
        if winner is None:  # the call's first result: the item's own
            self.answered[call_id] = digest(output)
        elif winner == digest(output):
            # The same result again (or one G5 may take for it): nothing typed to add, and a
            # typed event the journal may skip cannot carry the item. Stored whole.
            self._whole(item)
            return
        # The first result, or another one than the stored result: G5 keeps it as
        # tool_result_late, which carries the item (it differs from the result, so it is written).
        self._add(_carrier("tool_result", data, [fold(item, _draft("tool_result", data))]))

    def _group(self, group: list[Any]) -> None:
        calls = _calls(group)
        if not calls:
            self._plain(group)
            return
        ((_, data, key),) = assistant(group, keep_items=True)
        assert key is not None
        answer = self.answers.get(key)
        if answer is not None and key not in self.keys:
            self._refer(group, calls, answer)
        elif self._stored(key):
            # Its answer is stored where this batch cannot see it (the journal would not write it
            # again: its key is stored): the items whole.
            for item in group:
                self._whole(item)
        else:
            self.keys.add(key)
            draft = _draft("assistant_message", data)
            index = {c["id"]: n for n, c in enumerate(data["tool_calls"])}
            messages = sum(1 for i in group if _is_message(i) and i.get("role") == "assistant")
            held: list[Any] = []
            for item in group:
                call_id = item.get("call_id")
                if item.get("type") == "function_call" and calls.get(call_id) is item:
                    held.append(fold(item, draft, call=index[call_id]))
                elif _is_message(item) and messages == 1:
                    held.append(fold(item, draft))
                else:
                    held.append([item])
            self._add(_carrier("assistant_message", data, held, key))

    def _refer(self, group: list[Any], calls: dict[str, Any], answer: Event) -> None:
        """The items of an answer the hooks stored: references to it where it holds them."""
        index = {c.get("id"): n for n, c in enumerate(answer.data.get("tool_calls") or ()) if isinstance(c, dict)}
        messages = sum(1 for i in group if _is_message(i) and i.get("role") == "assistant")
        for item in group:
            call_id = item.get("call_id")
            if item.get("type") == "function_call" and calls.get(call_id) is item and call_id in index:
                self._ref(answer, fold(item, answer, call=index[call_id]))
            elif _is_message(item) and messages == 1:
                self._ref(answer, fold(item, answer))
            else:
                self._whole(item)

    def _plain(self, group: list[Any]) -> None:
        """A run of model items without calls: each message its own ``assistant_message``, which
        carries it and the items before it (reasoning); the last also the items after it."""
        carried: list[tuple[dict[str, Any], list[Any]]] = []
        pending: list[Any] = []
        for item in group:
            if item.get("type") not in ("function_call", "reasoning") and _is_content(item.get("content")):
                data = {"content": _text(item["content"]), "stop_reason": "stop"}
                carried.append((data, [[i] for i in pending] + [fold(item, _draft("assistant_message", data))]))
                pending = []
            else:
                pending.append(item)
        if not carried:
            for item in pending:
                self._whole(item)
            return
        carried[-1][1].extend([i] for i in pending)
        for data, held in carried:
            self._add(_carrier("assistant_message", data, held))


def plan(items: Sequence[Any], tail: Sequence[Event], known: Known | None = None) -> list[Typed]:
    """The batch that stores ``items`` once (``Planner``); ``NeedKnown`` when ``known`` is
    needed and not given."""
    return Planner(tail, known).plan(items)


# -- the view ---------------------------------------------------------------------------------------


@attrs.frozen
class Shown:
    """One item of the framework's view: where it stands (``pos``, a sort key), what pops call it
    (``key``), the item, and, for a projection, the seq it stands after (``at``: stored with it
    when ``add_items`` makes it permanent); ``typed``: the typed event it is stored in or was
    derived next to (what a pop of it may retract)."""

    pos: tuple[int, int, int, int]
    key: Key
    item: Any
    at: int | None = None  # set for a projection (stored or not)
    stored: bool = True
    typed: int | None = None


def pop_key(data: dict[str, Any]) -> Key:
    """The key a pop marker's data names."""
    if "call_id" in data:
        return ("call", data["call_id"], data.get("part"))
    n = data.get("n", 0)
    return ("seq", data.get("seq"), n if type(n) is int else None)


def pop_data(key: Key) -> dict[str, Any]:
    """The pop marker's data for a shown item's key."""
    if key[0] == "seq":
        return {"seq": key[1]} if key[2] == 0 else {"seq": key[1], "n": key[2]}
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


def _rows(
    marks: Sequence[Event], tail: Sequence[Event], since: int, sources: dict[int, Event] | None
) -> tuple[list[Stored], set[Key]]:
    """The items the rows of ``marks`` and ``tail`` (both in seq order) store, since ``since``,
    and the pops."""
    known = {e.seq for e in marks}
    extra = [e for e in tail if e.seq not in known]
    events = sorted([*marks, *extra], key=lambda e: e.seq) if extra else list(marks)
    if since:
        events = [e for e in events if e.seq >= since]
    popped = {pop_key(e.data) for e in events if e.type == POP}
    if sources is not None:
        sources = {**sources, **{e.seq: e for e in tail}}
    return stored(events, sources), popped


def project(
    marks: Sequence[Event],
    tail: Sequence[Event],
    *,
    since: int = 0,
    called: Iterable[str] = (),
    answered: Iterable[str] = (),
    sources: dict[int, Event] | None = None,
) -> list[Shown]:
    """The framework's view, oldest first: the items stored by ``marks`` (a read of ``READ``
    events: item rows, carriers, pops) and the projections of ``tail`` (the events after the last
    stored item, reaching back to the start of every turn it closes as interrupted), everything
    before ``since`` left out. ``sources``: events a reference may name, beyond those two.

    ``called``/``answered``: call ids whose ``function_call``/``function_call_output`` items are
    being added with this read (``add_items``): nothing is projected for them."""
    items, popped = _rows(marks, tail, since, sources)
    # What the payload holds, popped or not: a popped call or output is the framework's choice.
    has_call, has_output = set(called), set(answered)
    for one in items:
        kind, call_id = get(one.item, "type"), get(one.item, "call_id")
        if kind == "function_call":
            has_call.add(call_id)
        elif kind == "function_call_output":
            has_output.add(call_id)
    results, asked = _typed_facts(e for e in tail if e.seq >= since)

    view: list[Shown] = []
    for one in items:
        key = ("seq", one.seq, one.n)
        if one.at is not None:
            view.append(Shown((one.at, 1, one.seq, 0), key, one.item, at=one.at))
        else:
            view.append(Shown((one.seq, 0, one.n, 0), key, one.item, typed=one.typed))
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


def shown_items(
    marks: Sequence[Event], tail: Sequence[Event], *, since: int = 0, sources: dict[int, Event] | None = None
) -> list[Any]:
    """``project``'s items alone. Without a crash to show (the tail holds no result and no
    interrupted answer, no projection was stored) the stored items in order minus pops: the
    same answer, without building the view (``get_items`` reads every item of a session)."""
    results, asked = _typed_facts(e for e in tail if e.seq >= since)
    if not results and not asked:
        items, popped = _rows(marks, tail, since, sources)
        if not any(one.at is not None for one in items) and not any(key[0] != "seq" for key in popped):
            return [one.item for one in items if ("seq", one.seq, one.n) not in popped]
    return [s.item for s in project(marks, tail, since=since, sources=sources)]


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
    it is complete (otherwise read further back). It ends at the last row that stores items
    (kept) or clear (left out), reaching back to the ``turn_start`` of each turn it closes as
    interrupted."""
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
        found = found or is_row(event)
        if found and not owed:
            return out[::-1], True
    return out[::-1], False


def tail_claims(
    tail: Sequence[Event],
    *,
    called: Iterable[str] = (),
    answered: Iterable[str] = (),
    sources: dict[int, Event] | None = None,
) -> set[str]:
    """Call ids the tail may have to project for (results and interrupted answers' calls) that its
    own items and the items being added do not already cover: empty in a run without a crash, so
    ``add_items`` needs no read of the older items."""
    results, asked = _typed_facts(tail)
    if not results and not asked:
        return set()
    items = [one.item for one in _rows([], tail, 0, sources)[0]]
    covered = set(answered) | {get(i, "call_id") for i in items if get(i, "type") == "function_call_output"}
    saved = set(called) | {get(i, "call_id") for i in items if get(i, "type") == "function_call"}
    claims = {c for c in results if c not in covered}
    claims |= {c["id"] for a in asked for c in a.calls if c["id"] in results and c["id"] not in saved}
    return claims
