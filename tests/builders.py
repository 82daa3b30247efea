"""Builders of event logs for the pure-logic tests: one name for each kind of event.

Each builder returns an item, a ``(type, data)`` pair as ``Journal.append_many`` takes it, and
``log`` turns items into the events a session holds. Where a suite's events differ in a detail
(an assistant's text, a tool's name, where seqs start), it passes the parameter, or binds it once
with ``functools.partial``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from journal.model import Event

Item = tuple[Any, Any]
"""One event to log: its type and its data (either may be garbage on purpose)."""

HUGE = 10**12
"""A position past the end of any log, for a greedy replace."""


def log(*items: Item, first_seq: int = 0, clock_ms: int | None = None) -> list[Event]:
    """Session "s" holding these items from seq ``first_seq``; time_ms is 0, or ``clock_ms`` + seq."""
    return [
        Event("s", seq, type_, data, 0 if clock_ms is None else clock_ms + seq)
        for seq, (type_, data) in enumerate(items, start=first_seq)
    ]


def raw(type_: Any, **data: Any) -> Item:
    """An item of any type whose data is exactly these fields."""
    return (type_, data)


# -- bookkeeping ---------------------------------------------------------------------------------


def turn_start(turn: Any = 1) -> Item:
    """A turn starts."""
    return ("turn_start", {"turn": turn})


def turn_end(turn: Any = 1, steps: int = 1, reason: str | None = "complete") -> Item:
    """A turn ends after ``steps`` steps; a ``reason`` of None is left out."""
    data: dict[str, Any] = {"turn": turn, "steps": steps}
    if reason is not None:
        data["reason"] = reason
    return ("turn_end", data)


def step_start(step: int = 1, turn: int = 1) -> Item:
    """A step of a turn starts."""
    return ("step_start", {"turn": turn, "step": step})


def step_end(step: int = 1, outcome: str | None = "ok", turn: int = 1) -> Item:
    """A step of a turn ends; an ``outcome`` of None is left out."""
    data: dict[str, Any] = {"turn": turn, "step": step}
    if outcome is not None:
        data["outcome"] = outcome
    return ("step_end", data)


# -- messages ------------------------------------------------------------------------------------


def user(content: Any = "hi", **fields: Any) -> Item:
    """A user message."""
    return ("user_message", {"content": content, **fields})


def system(content: Any = "be brief", **fields: Any) -> Item:
    """A system message."""
    return ("system_message", {"content": content, **fields})


def call(call_id: str, name: str | None = None, arguments: Any = None) -> dict[str, Any]:
    """A tool call as an assistant asks for it: tool ``tool_<id>`` and no arguments unless given."""
    return {
        "id": call_id,
        "name": f"tool_{call_id}" if name is None else name,
        "arguments": {} if arguments is None else arguments,
    }


def arguments_naming(call_id: str) -> dict[str, str]:
    """Arguments that name their call, so a converted call shows whose arguments it carries."""
    return {"n": call_id}


def assistant(
    content: Any = "",
    *calls: str | dict[str, Any],
    call_arguments: Callable[[str], Any] | None = None,
    **fields: Any,
) -> Item:
    """An assistant message; a call id stands for ``call(id)``, and calls mean stop_reason tool_use unless given.

    ``call_arguments`` gives the arguments of the call with an id (none by default).
    """
    data: dict[str, Any] = {"content": content, **fields}
    if calls:
        data["tool_calls"] = [
            c if isinstance(c, dict) else call(c, arguments=call_arguments(c) if call_arguments else None)
            for c in calls
        ]
        data.setdefault("stop_reason", "tool_use")
    return ("assistant_message", data)


def tool_use(*call_ids: str, content: Any = "", name: str | None = None) -> Item:
    """An assistant that stops to call these tools, each named ``name`` or ``tool_<id>``."""
    return assistant(content, *(call(call_id, name) for call_id in call_ids), stop_reason="tool_use")


def error(message: str | None, content: Any = "") -> Item:
    """An assistant that stopped on an error with this message (None leaves the message out)."""
    fields = {} if message is None else {"error_message": message}
    return assistant(content, stop_reason="error", **fields)


def usage(input: int, output: int, cache_read: int = 0) -> dict[str, int]:
    """An assistant's token counts."""
    return {"input": input, "output": output, "cache_read": cache_read}


# -- tools ---------------------------------------------------------------------------------------


def dispatch(call_id: str, name: str | None = None) -> Item:
    """A call is dispatched to its tool, ``name`` or ``tool_<id>``."""
    return ("tool_call", {"id": call_id, "name": f"tool_{call_id}" if name is None else name})


def result(call_id: str, content: Any = None, **fields: Any) -> Item:
    """A tool's result for a call; its content is ``result of <id>`` unless given."""
    text = f"result of {call_id}" if content is None else content
    return ("tool_result", {"tool_call_id": call_id, "content": text, **fields})


def synthetic_metadata(risk: str) -> dict[str, Any]:
    """The metadata of a result recovery writes for an owed call."""
    return {"synthetic": True, "risk": risk, "source": "recovery"}


# -- compaction ----------------------------------------------------------------------------------


def replace(start: int, stop: int, content: Any = "S", type_: str = "user_message") -> Item:
    """A surface event that replaces positions ``start`` to ``stop`` of the surface (a compaction)."""
    return (type_, {"content": content, "surface_op": ["replace", start, stop]})
