"""The messages view: the transcript a model should see, folded from a session's surface events.

Pure functions over lists of :class:`~journal.model.Event`; no I/O.

- :func:`fold` applies the compaction ops (``surface_op``) and returns every surviving surface
  message in transcript order; :func:`compactions` says where each compaction stands (the
  transcript's length before and after it: what the ``compactions`` table stores).
- :func:`provider_view` shapes that transcript for a provider request: each assistant message's
  tool results directly after it in call order, aborted and errored assistant messages left out,
  calls still owed a result reported (never invented); :func:`provider_tail` gives its last
  messages from the transcript's last messages alone.
- :func:`to_openai` and :func:`to_anthropic` turn messages into the plain dicts those APIs take.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

import attrs

from journal.model import SURFACE_TYPES, Event, EventType, StopReason

__all__ = [
    "Compaction",
    "Message",
    "MissingResult",
    "ProviderView",
    "compactions",
    "exchange_start",
    "fold",
    "is_compaction",
    "messages_of",
    "provider_tail",
    "provider_view",
    "to_anthropic",
    "to_openai",
]

_RETRACT = EventType.RETRACT.value
_ROLES = {
    EventType.SYSTEM_MESSAGE.value: "system",
    EventType.USER_MESSAGE.value: "user",
    EventType.ASSISTANT_MESSAGE.value: "assistant",
    EventType.TOOL_RESULT.value: "tool",
}
# Kept in the log as evidence, never sent back to a provider.
_LEFT_OUT_STOP_REASONS = frozenset({StopReason.ABORTED.value, StopReason.ERROR.value})


@attrs.frozen
class Message:
    """One message of the transcript, built from one surface event.

    ``role`` is ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``. ``tool_calls`` is a tuple
    of ``{id, name, arguments}`` dicts (empty if none). ``seq`` and ``time_ms`` are the event's.
    """

    role: str
    content: Any = attrs.field(default=None, hash=False)
    tool_calls: tuple[dict[str, Any], ...] = attrs.field(default=(), hash=False)
    tool_call_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = attrs.field(default=None, hash=False)
    reasoning: Any = attrs.field(default=None, hash=False)
    stop_reason: str | None = None
    is_error: bool = False
    seq: int | None = None
    time_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The message as plain JSON-ready data (``risk`` included for convenience)."""
        return {**attrs.asdict(self), "risk": self.risk}

    @property
    def risk(self) -> str | None:
        """The ``risk`` a synthetic result carries in its metadata, else ``None``."""
        if isinstance(self.metadata, dict):
            return self.metadata.get("risk")
        return None


@attrs.frozen
class MissingResult:
    """A tool call in the provider view that has no result (yet)."""

    assistant_seq: int | None
    tool_call_id: str  # a requested call's id: never missing (the codec checks it)
    name: str | None


@attrs.frozen
class ProviderView:
    """The messages to send to a provider, and the tool calls among them still owed a result."""

    messages: list[Message] = attrs.field(hash=False)
    missing: tuple[MissingResult, ...] = ()

    def tail(self, n: int) -> ProviderView:
        """The last ``n`` messages (none for 0), and the calls still owed a result by the
        assistant messages among them (an assistant cut off before them is not asked about)."""
        messages = _last(self.messages, n)
        kept = {m.seq for m in messages if m.role == "assistant"}
        return ProviderView(messages=messages, missing=tuple(m for m in self.missing if m.assistant_seq in kept))


def fold(events: Iterable[Event]) -> list[Message]:
    """Fold surface events, in seq order, into the transcript as it stands after compaction.

    An event without ``surface_op`` (or with ``"append"``) appends a message. One with
    ``["replace", start, stop]`` removes the messages currently at positions
    ``start..min(stop, len - 1)`` and stands at ``start`` in their place; it cannot hide events
    that come after it, however large ``stop`` is. A ``start`` at or past the end appends.
    A ``retract`` removes the last message. Other bookkeeping and ``x.`` events are ignored.
    Never raises on a malformed op: it appends.
    """
    folded: list[Event] = []
    for event in sorted(events, key=attrgetter("seq")):
        if event.type == _RETRACT:
            del folded[-1:]  # the last message is taken back (none: nothing)
        elif event.type in SURFACE_TYPES:
            span = _replace_span(event.data.get("surface_op"))
            if span is None:
                folded.append(event)
            else:
                # One slice assignment: O(removed) decrefs plus one memmove of the tail. Python's
                # slice clipping gives exactly fold's rules (stop past the end, start == len).
                start, stop = span
                folded[start : stop + 1] = (event,)
    return messages_of(folded)


class Compaction(NamedTuple):
    """Where a compaction (``kind`` "replace") or a retract stands: the event ``seq``, its op's
    ``first..last`` (a retract's: the position it removed), and the transcript's length just
    ``before`` and ``after`` it (a row of the ``compactions`` table)."""

    seq: int
    kind: str
    first: int
    last: int
    before: int
    after: int


def compactions(events: Iterable[Event]) -> list[Compaction]:
    """Where each compaction and retract of a log (its events in seq order) stands, by
    ``fold``'s rules."""
    out: list[Compaction] = []
    length = 0
    for event in events:
        if event.type == _RETRACT:
            gone = max(length - 1, 0)
            out.append(Compaction(event.seq, "retract", gone, gone, length, gone))
            length = gone
            continue
        if event.type not in SURFACE_TYPES:
            continue
        span = _replace_span(event.data.get("surface_op"))
        if span is None:
            length += 1
            continue
        first, last = span
        after = length + 1 if first >= length else length - (min(last, length - 1) - first)
        out.append(Compaction(event.seq, "replace", first, last, length, after))
        length = after
    return out


def is_compaction(event: Event) -> bool:
    """Whether the event is a surface event that replaces a range (``fold`` does not append it)."""
    return event.type in SURFACE_TYPES and _replace_span(event.data.get("surface_op")) is not None


def messages_of(events: Iterable[Event]) -> list[Message]:
    """The messages of surface events as they stand, in the order given (no folding)."""
    return [_message(event) for event in events]


def provider_view(events: Iterable[Event]) -> ProviderView:
    """The folded transcript shaped for a provider request.

    Each kept assistant message is followed directly by its tool results in call order, whatever
    order they were appended in; the first result for a call wins. Assistant messages that stopped
    with ``aborted`` or ``error`` are left out with their calls. A result whose assistant message
    is not in the transcript (compacted away, left out) is left out. A call with no result is
    listed in ``missing``; the caller decides what to do about it.
    """
    return _shaped(fold(events))


def provider_tail(last: Sequence[Message], n: int, *, whole: bool) -> ProviderView | None:
    """``provider_view(events).tail(n)`` from the transcript's last messages ``last`` alone
    (``whole``: they are all of it), or ``None`` when they are too few to tell.

    What follows an assistant message in the provider view (its results) is found in the
    transcript from that message on, so shaping the transcript's last messages gives the end of
    the provider view exactly: the blocks of the messages among them. It may come out shorter
    than ``last`` (results of earlier assistants, left-out answers); then more are needed.
    """
    view = _shaped(last)
    if len(view.messages) < n and not whole:
        return None
    return view.tail(n)


def exchange_start(last: Sequence[Message], *, whole: bool) -> int | None:
    """Where what ``retract`` takes back starts among the transcript's last messages ``last``
    (``whole``: they are all of it), or ``None`` when they are too few to tell.

    The last message goes; a tool result among those going takes with it the assistant message
    its result belongs to in the provider view (the nearest kept assistant message before it
    that made the call) and everything after that one. Nothing left behind then owes a call
    whose result went."""
    if not last:
        return 0
    owner: dict[Any, int] = {}  # call id -> the index of the kept assistant message that made it
    owners: list[int | None] = []
    for index, message in enumerate(last):
        if message.role == "assistant" and message.stop_reason not in _LEFT_OUT_STOP_REASONS:
            owner.update((call["id"], index) for call in message.tool_calls)
        owners.append(owner.get(message.tool_call_id) if message.role == "tool" else None)
    start = index = len(last) - 1
    while index >= start:
        if last[index].role == "tool":
            found = owners[index]
            if found is None and not whole:
                return None  # its assistant message may stand before these
            if found is not None and found < start:
                start = found
        index -= 1
    return start


def _last(messages: list[Message], n: int) -> list[Message]:
    """The last ``n`` messages (none for 0: not ``messages[-0:]``)."""
    return messages[max(len(messages) - n, 0) :]


def _shaped(folded: Sequence[Message]) -> ProviderView:
    """``provider_view`` of an already folded transcript."""
    # A result belongs to the nearest kept assistant message before it that made a call with its
    # id (providers may reuse ids across turns). Left-out assistants own nothing, so a late result
    # for a kept call is never swallowed by an aborted message that repeats the id.
    owner: dict[Any, int] = {}
    results: dict[tuple[int, Any], Message] = {}
    for index, message in enumerate(folded):
        if message.role == "assistant":
            if message.stop_reason not in _LEFT_OUT_STOP_REASONS:
                for call in message.tool_calls:
                    owner[call["id"]] = index
        elif message.role == "tool":
            assistant = owner.get(message.tool_call_id)
            if assistant is not None:
                results.setdefault((assistant, message.tool_call_id), message)

    messages: list[Message] = []
    missing: list[MissingResult] = []
    for index, message in enumerate(folded):
        if message.role == "tool":
            continue
        if message.role == "assistant" and message.stop_reason in _LEFT_OUT_STOP_REASONS:
            continue
        messages.append(message)
        answered: set[Any] = set()
        for call in message.tool_calls:
            call_id = call["id"]
            if call_id in answered:
                continue
            answered.add(call_id)
            result = results.get((index, call_id))
            if result is None:
                missing.append(MissingResult(message.seq, call_id, call["name"]))
            else:
                messages.append(result)
    return ProviderView(messages=messages, missing=tuple(missing))


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in the OpenAI chat completions shape (plain dicts, no SDK).

    Tool-call arguments become a JSON string; string content passes through; list content is
    treated as content parts; any other JSON content is encoded as a JSON string.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id,
                    "content": _openai_content(message.content, empty=""),
                }
            )
            continue
        item: dict[str, Any] = {
            "role": message.role,
            "content": _openai_content(message.content, empty=None if message.role == "assistant" else ""),
        }
        if message.name is not None:
            item["name"] = message.name
        if message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": _arguments_json(call["arguments"]),
                    },
                }
                for call in message.tool_calls
            ]
        out.append(item)
    return out


def to_anthropic(messages: Sequence[Message]) -> dict[str, Any]:
    """Messages in the Anthropic Messages shape: ``{"system": str | None, "messages": [...]}``.

    System messages are joined (blank line between) into ``system``. Content is always a list of
    blocks; tool results become ``tool_result`` blocks in a user message; consecutive messages
    with the same role are merged; a message left with no blocks (an empty assistant message)
    is dropped, since the API refuses empty content.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            text = _plain_text(message.content)
            if text:
                system.append(text)
            continue
        if message.role == "tool":
            role = "user"
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
            if message.content is not None:
                block["content"] = _tool_result_content(message.content)
            if message.is_error:
                block["is_error"] = True
            blocks = [block]
        else:
            role = "assistant" if message.role == "assistant" else "user"
            blocks = _blocks(message.content)
            for call in message.tool_calls:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["name"],
                        "input": _arguments_object(call["arguments"]),
                    }
                )
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return {"system": "\n\n".join(system) if system else None, "messages": out}


def _replace_span(op: Any) -> tuple[int, int] | None:
    """``(start, stop)`` for a well-formed replace op; ``None`` means append."""
    if isinstance(op, (list, tuple)) and len(op) == 3 and op[0] == "replace":
        start, stop = op[1], op[2]
        if (
            type(start) is int
            and type(stop) is int
            and 0 <= start <= stop  # validated input never breaks this; if it does, append
        ):
            return start, stop
    return None


def _message(event: Event) -> Message:
    data = event.data
    role = _ROLES[event.type]
    calls: tuple[dict[str, Any], ...] = ()
    if role == "assistant":
        raw_calls = data.get("tool_calls")
        if raw_calls:
            calls = tuple(
                {
                    "id": call.get("id"),
                    "name": call.get("name"),
                    "arguments": call.get("arguments", {}),
                }
                for call in raw_calls
                if isinstance(call, dict)
            )
    return Message(
        role=role,
        content=data.get("content"),
        tool_calls=calls,
        tool_call_id=data.get("tool_call_id") if role == "tool" else None,
        name=data.get("name"),
        metadata=data.get("metadata"),
        reasoning=data.get("reasoning"),
        stop_reason=data.get("stop_reason") if role == "assistant" else None,
        is_error=bool(data.get("is_error", False)) if role == "tool" else False,
        seq=event.seq,
        time_ms=event.time_ms,
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _text_block(value: Any) -> dict[str, Any]:
    return {"type": "text", "text": value if isinstance(value, str) else _json(value)}


def _blocks(content: Any) -> list[dict[str, Any]]:
    """Content as a fresh list of blocks: strings become text blocks, dicts with a ``type``
    pass through as blocks, other JSON is encoded into a text block; empty text is dropped."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [_text_block(content)]
    if isinstance(content, dict) and "type" in content:
        return [content]
    if isinstance(content, list):
        blocks: list[dict[str, Any]] = []
        for item in content:
            if isinstance(item, dict) and "type" in item:
                blocks.append(item)
            elif item is not None and item != "":
                blocks.append(_text_block(item))
        return blocks
    return [_text_block(content)]


def _openai_content(content: Any, *, empty: str | None) -> Any:
    if content is None:
        return empty
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _blocks(content)
    return _json(content)


def _tool_result_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    if isinstance(content, list) or (isinstance(content, dict) and "type" in content):
        return _blocks(content)
    return _json(content)


def _plain_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for block in _blocks(content):
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        else:
            parts.append(_json(block))
    return "\n".join(part for part in parts if part)


def _arguments_json(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return _json({} if arguments is None else arguments)


def _arguments_object(arguments: Any) -> Any:
    """Arguments as the object Anthropic's ``input`` wants. A JSON string that decodes to an
    object is decoded; anything else that is not an object passes through unchanged (the view
    does not invent arguments)."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
        except ValueError:
            return arguments
        return decoded if isinstance(decoded, dict) else arguments
    return arguments
