"""ADK events <-> the journal's events: the verbatim payload, the typed events, the projection.

Pure functions (no I/O), used by ``journal.adapters.adk``:

- ``native``/``restore``: an ADK ``Event`` as the data of an ``x.adk.event`` event and back;
  ``restore(native(e)) == e`` (the JSON ``Event.model_dump_json`` writes, parsed, so a bytes
  field keeps its base64 form and reads back as the same bytes);
- ``derive``: the typed events one ADK event stands for (a ``user_message``, an
  ``assistant_message`` whose ``tool_calls`` are its function calls, a ``tool_result`` per
  function response);
- ``project``: the ADK events a session shows, with a function-response event placed right after
  each function call the journal answered (a real result or recovery's synthetic one) that no
  stored ADK event answers -- ADK drops a call without a response from the next model request,
  and the model would ask for it again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from google.adk.events.event import Event as AdkEvent
from google.genai import types

from journal.model import Event

ADK_EVENT = "x.adk.event"  # one ADK event, verbatim
ADK_CREATED = "x.adk.session"  # the session's creation: app, user and id as ADK knows them

Typed = tuple[str, dict[str, Any], str | None]

# ADK's own call asking a human to confirm a tool call (and the human's answer to it): a pause of
# the invocation, not a tool the agent runs, so no typed request or result (the verbatim event
# keeps it for ADK).
CONFIRMATION_CALL = "adk_request_confirmation"


def native(event: AdkEvent) -> dict[str, Any]:
    """The event as the JSON object ``model_dump_json(exclude_none=True)`` writes."""
    data: dict[str, Any] = json.loads(event.model_dump_json(exclude_none=True))
    return data


def restore(data: dict[str, Any]) -> AdkEvent:
    """The ADK event stored by ``native`` (through its JSON text, as ADK's stores read it)."""
    return AdkEvent.model_validate_json(json.dumps(data))


def response_content(response: Any) -> Any:
    """A function response's dict as a ``tool_result``'s content (a JSON object or a string)."""
    if isinstance(response, (dict, list, str)):
        return response
    return json.dumps(response)


def as_response(content: Any) -> dict[str, Any]:
    """A ``tool_result``'s content as the ``response`` dict of an ADK ``FunctionResponse``
    (ADK wraps a tool's non-dict output as ``{"result": ...}`` too)."""
    if isinstance(content, dict):
        return content
    return {"result": content}


def derive(event: AdkEvent) -> list[Typed]:
    """The typed events an ADK event stands for, in order (pure; never raises on content)."""
    content = event.content
    parts = list(content.parts or []) if content is not None else []
    texts = [p.text for p in parts if p.text and not p.thought]
    calls = [p.function_call for p in parts if p.function_call is not None]
    calls = [c for c in calls if c.name != CONFIRMATION_CALL]
    # A call the confirmation gate answered while it waits for a human is not answered yet.
    waiting = set(event.actions.requested_tool_confirmations) if event.actions else set()
    responses = [
        p.function_response
        for p in parts
        if p.function_response is not None
        and p.function_response.name != CONFIRMATION_CALL
        and p.function_response.id not in waiting
    ]
    out: list[Typed] = []
    text = "\n".join(texts)
    if event.author == "user":
        if texts:
            out.append(("user_message", {"content": text}, None))
    elif calls:
        tool_calls = [
            {"id": c.id, "name": c.name or "", "arguments": dict(c.args or {})} for c in calls if isinstance(c.id, str)
        ]
        data: dict[str, Any] = {"content": text, "tool_calls": tool_calls, "stop_reason": "tool_use"}
        out.append(("assistant_message", data, None))
    elif texts:
        out.append(("assistant_message", {"content": text, "stop_reason": "stop"}, None))
    elif event.error_code or event.error_message:
        error = {"content": "", "stop_reason": "error", "error_message": str(event.error_message or event.error_code)}
        out.append(("assistant_message", error, None))
    for r in responses:
        if isinstance(r.id, str):
            result: dict[str, Any] = {"tool_call_id": r.id, "content": response_content(r.response or {})}
            if r.name:
                result["name"] = r.name
            out.append(("tool_result", result, None))
    return out


def call_ids(event: AdkEvent) -> list[str]:
    """The ids of the event's function calls, in order."""
    return [c.id for c in event.get_function_calls() if isinstance(c.id, str)]


def placeholder_ids(event: AdkEvent) -> set[str]:
    """The calls ADK's confirmation gate answers in this event while it waits for a human (its
    placeholder reply is no answer: the tool has not run)."""
    return set(event.actions.requested_tool_confirmations) if event.actions else set()


def response_ids(event: AdkEvent) -> list[str]:
    """The ids of the event's function responses, but for the confirmation gate's placeholders."""
    waiting = placeholder_ids(event)
    return [r.id for r in event.get_function_responses() if isinstance(r.id, str) and r.id not in waiting]


def _handshake(event: AdkEvent, calls: set[str]) -> bool:
    """Whether ``event`` is part of the confirmation handshake of ``calls``: the gate's
    placeholder reply, ADK's request to the human, or the human's answer."""
    named = [c.name for c in event.get_function_calls()] + [r.name for r in event.get_function_responses()]
    return bool(placeholder_ids(event) & calls) or CONFIRMATION_CALL in named


def unanswered(events: Sequence[AdkEvent]) -> set[str]:
    """Ids of function calls no event of ``events`` answers."""
    answered = {i for e in events for i in response_ids(e)}
    return {i for e in events for i in call_ids(e) if i not in answered}


def project(events: Sequence[AdkEvent], results: dict[str, Event]) -> list[AdkEvent]:
    """``events`` with, right after each event whose calls no event answers, one
    function-response event carrying the journal's results (``results``: call id -> the
    ``tool_result`` event) for those calls, in call order. Calls without a journal result are
    left unanswered (a long-running tool, a call awaiting a human)."""
    owed = unanswered(events)
    if not owed:
        return list(events)
    gated = {i for e in events for i in placeholder_ids(e)}
    later: dict[int, list[tuple[AdkEvent, list[str]]]] = {}
    out: list[AdkEvent] = []
    for index, event in enumerate(events):
        out.append(event)
        answers = [i for i in call_ids(event) if i in owed and i in results]
        now = [i for i in answers if i not in gated]
        if now:
            out.append(answer_event(event, [results[i] for i in now]))
        if waited := [i for i in answers if i in gated]:
            # A call the gate held for a human: answered where its own answer would be, after
            # the handshake (the human's confirmation, then the run that the crash cut short).
            end = index
            while end + 1 < len(events) and _handshake(events[end + 1], set(waited)):
                end += 1
            later.setdefault(end, []).append((event, waited))
        for call_event, waited in later.pop(index, ()):
            out.append(answer_event(call_event, [results[i] for i in waited], after=event))
    return out


def answer_event(call_event: AdkEvent, results: Iterable[Event], *, after: AdkEvent | None = None) -> AdkEvent:
    """The function-response event that answers ``call_event``'s calls with the journal's
    ``tool_result`` events: same invocation, author and timestamp as the call (so ordering and
    ``after_timestamp`` keep it beside the call; ``after``'s timestamp when it goes after another
    event), a stable id."""
    names = {c.id: c.name for c in call_event.get_function_calls()}
    parts = []
    ids = []
    for result in results:
        call_id = result.data["tool_call_id"]
        ids.append(call_id)
        name = result.data.get("name") or names.get(call_id) or ""
        response = types.FunctionResponse(id=call_id, name=name, response=as_response(result.data.get("content")))
        parts.append(types.Part(function_response=response))
    digest = hashlib.sha256("\0".join([call_event.id, *ids]).encode("utf-8", "surrogatepass")).hexdigest()
    return AdkEvent(
        id=f"journal-{digest[:32]}",
        invocation_id=call_event.invocation_id,
        author=call_event.author,
        branch=call_event.branch,
        timestamp=(after or call_event).timestamp,
        content=types.Content(role="user", parts=parts),
    )
