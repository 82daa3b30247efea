"""pydantic-ai messages and the journal's typed log, both ways (pure: no I/O).

- ``derive``: the batch that stores one ``ModelMessage``: the message verbatim as an
  ``x.pydantic_ai.message`` event (pydantic-ai's own serialization, ``ModelMessagesTypeAdapter``),
  followed by the typed events it holds: a ``ModelRequest``'s system prompts, user prompts and
  tool returns become ``system_message``, ``user_message`` and ``tool_result`` events; a
  ``ModelResponse`` becomes one ``assistant_message`` whose ``tool_calls`` are its tool calls.
  Every event of the batch carries an idempotency key built from the message's index among the
  session's stored messages, so storing a message twice writes nothing the second time.
- ``project``: the history pydantic-ai is handed: the stored messages in order and, right after a
  response whose calls no stored message answers, a ``ModelRequest`` of ``ToolReturnPart``s built
  from the typed log's results (the tool's own, or what recovery wrote: "MAY have run ... verify
  before retrying" / "did not run"). The typed log is the truth; the history is its projection.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import attrs
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    repair_messages,
)

from journal.model import Event

MESSAGE = "x.pydantic_ai.message"
KEY_PREFIX = "pydantic-ai:"

Typed = tuple[str, dict[str, Any], str | None]


def message_key(index: int) -> str:
    """The idempotency key of the session's ``index``-th stored message."""
    return f"{KEY_PREFIX}{index}"


def dump(message: ModelMessage) -> dict[str, Any]:
    """A message as pydantic-ai serializes it (JSON-compatible), without the fields that hold
    their default (``None``, and a usage's zero counters) -- kept only when the message loads
    back equal from that, else the full serialization: a stored message always round-trips."""
    slim: dict[str, Any] = ModelMessagesTypeAdapter.dump_python([message], mode="json", exclude_none=True)[0]
    usage = slim.get("usage")
    if isinstance(usage, dict):
        slim["usage"] = {k: v for k, v in usage.items() if v not in (0, {}) or isinstance(v, bool)}
    if load(slim) == message:
        return slim
    full: dict[str, Any] = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    return full


def load(data: Any) -> ModelMessage:
    """A message back from its serialized form (pydantic-ai validates it)."""
    message: ModelMessage = ModelMessagesTypeAdapter.validate_python([data])[0]
    return message


def _content(value: Any) -> Any:
    """A prompt's content as the journal takes it: a string as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


def result_data(part: ToolReturnPart | RetryPromptPart) -> dict[str, Any]:
    """The ``tool_result`` data of a tool's return (or of a retry prompt that answers a call):
    the text the model is shown, and the tool's name. The capability's live result and the
    stored message derive the same data, so the second is not kept twice (G5)."""
    if isinstance(part, ToolReturnPart):
        data: dict[str, Any] = {"tool_call_id": part.tool_call_id, "content": part.model_response_str()}
        if part.outcome != "success":  # failed, denied, interrupted, or retried (a ModelRetry)
            data["is_error"] = True
    else:
        data = {"tool_call_id": part.tool_call_id, "content": part.model_response(), "is_error": True}
    if part.tool_name:
        data["name"] = part.tool_name
    return data


def tool_calls(message: ModelResponse) -> list[dict[str, Any]]:
    """The ``{id, name, arguments}`` of each tool call a response asks for."""
    return [
        {"id": part.tool_call_id, "name": part.tool_name, "arguments": part.args_as_dict()}
        for part in message.parts
        if isinstance(part, ToolCallPart) and part.tool_call_id and part.tool_name
    ]


def _typed(message: ModelMessage) -> list[tuple[str, dict[str, Any]]]:
    """The typed events one message holds."""
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(message, ModelRequest):
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                out.append(("system_message", {"content": part.content}))
            elif isinstance(part, UserPromptPart):
                out.append(("user_message", {"content": _content(part.content)}))
            elif isinstance(part, ToolReturnPart) and part.tool_call_id:
                out.append(("tool_result", result_data(part)))
            elif isinstance(part, RetryPromptPart):
                if part.tool_name and part.tool_call_id:
                    out.append(("tool_result", result_data(part)))
                else:  # an output validation retry: shown to the model as a user's text
                    out.append(("user_message", {"content": part.model_response()}))
        return out
    text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
    calls = tool_calls(message)
    data: dict[str, Any] = {"content": text, "stop_reason": "tool_use" if calls else _stop(message)}
    if calls:
        data["tool_calls"] = calls
    thinking = "".join(p.content for p in message.parts if isinstance(p, ThinkingPart))
    if thinking:
        data["reasoning"] = thinking
    usage = message.usage
    data["usage"] = {"input": usage.input_tokens, "output": usage.output_tokens, "cache_read": usage.cache_read_tokens}
    out.append(("assistant_message", data))
    return out


def _stop(message: ModelResponse) -> str:
    return "length" if message.finish_reason == "length" else "stop"


def derive(index: int, message: ModelMessage, *, typed: bool = True) -> list[Typed]:
    """The batch that stores ``message`` as the session's ``index``-th message: verbatim, then
    (``typed``) its typed events, each keyed by the index so a second store writes nothing."""
    key = message_key(index)
    batch: list[Typed] = [(MESSAGE, {"index": index, "message": dump(message)}, key)]
    if typed:
        for k, (kind, data) in enumerate(_typed(message)):
            batch.append((kind, data, f"{key}:{k}"))
    return batch


# -- the projection ---------------------------------------------------------------------------------


@attrs.frozen
class History:
    """What a read of the session gives: the history a run is handed (``messages``); the answers
    projected from the typed log that are not stored yet (``projected``: the next write stores
    them, verbatim, before anything newer); how many messages are stored (``stored``: the next
    one's index); the calls the history leaves unanswered."""

    messages: tuple[ModelMessage, ...] = ()
    projected: tuple[ModelMessage, ...] = ()
    stored: int = 0
    unanswered: tuple[str, ...] = ()


def _answered(message: ModelMessage) -> set[str]:
    if not isinstance(message, ModelRequest):
        return set()
    return {
        p.tool_call_id for p in message.parts if isinstance(p, (ToolReturnPart, RetryPromptPart)) and p.tool_call_id
    }


def _time(event: Event) -> datetime:
    return datetime.fromtimestamp(event.time_ms / 1000, tz=timezone.utc)


class Fold:
    """The session's stored messages and first results, read so far (``feed`` the events after
    ``next_seq``): a read of the history then parses only what is new since the last one."""

    def __init__(self) -> None:
        self.next_seq = 0
        self.stored: list[ModelMessage] = []
        self.results: dict[str, Event] = {}

    def feed(self, events: Iterable[Event]) -> Fold:
        for event in events:
            if event.seq < self.next_seq:
                continue
            self.next_seq = event.seq + 1
            if event.type == MESSAGE:
                self.stored.append(load(event.data["message"]))
            elif event.type == "tool_result":
                call_id = event.data.get("tool_call_id")
                if isinstance(call_id, str):
                    self.results.setdefault(call_id, event)
        return self

    def history(self) -> History:
        return _project(self.stored, self.results)


def project(events: Iterable[Event]) -> History:
    """The history, oldest first, from the session's message events and results (seq order).

    A response whose calls no stored message answers is followed by a ``ModelRequest`` holding a
    ``ToolReturnPart`` for each such call the typed log holds a result for (the first result:
    G5), timestamped with the result's own time, so two reads give equal histories. A call with
    no result anywhere (a run still going, a call awaiting approval) is left unanswered. The list
    is then what pydantic-ai itself makes of a history before a run (``repair_messages`` without
    touching the last response: adjacent requests merged), so a run's own clean-up changes
    nothing and the run's new messages start right after it."""
    return Fold().feed(events).history()


def _project(stored: list[ModelMessage], results: dict[str, Event]) -> History:
    answered: set[str] = set()
    for message in stored:
        answered |= _answered(message)
    shown: list[ModelMessage] = []
    projected: list[ModelMessage] = []
    unanswered: list[str] = []
    for message in stored:
        shown.append(message)
        if not isinstance(message, ModelResponse):
            continue
        parts: list[ToolReturnPart] = []
        for call in message.parts:
            if not isinstance(call, ToolCallPart) or call.tool_call_id in answered:
                continue
            found = results.get(call.tool_call_id)
            if found is None:
                unanswered.append(call.tool_call_id)
                continue
            content = found.data.get("content")
            parts.append(
                ToolReturnPart(
                    tool_name=call.tool_name,
                    content=content if isinstance(content, str) else json.dumps(content),
                    tool_call_id=call.tool_call_id,
                    timestamp=_time(found),
                )
            )
            answered.add(call.tool_call_id)
        if parts:
            request = ModelRequest(parts=list(parts), timestamp=max(p.timestamp for p in parts))
            shown.append(request)
            projected.append(request)
    messages = repair_messages(shown, repair_last_response=False) if shown else []
    return History(tuple(messages), tuple(projected), len(stored), tuple(unanswered))
