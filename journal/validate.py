"""Event validation (DESIGN §5): everything is checked before anything is written (G12).

The order is fixed: known type; ``data`` is a JSON object that encodes; size within the limit;
required fields present with the right JSON types; ``surface_op`` only on surface events and
well formed. A refusal raises ``InvalidEvent`` naming the field.
"""

from __future__ import annotations

import json
import math
from typing import Any

from journal.errors import InvalidEvent
from journal.model import (
    APP_TYPE_PREFIX,
    SURFACE_TYPES,
    EffectKind,
    OperatorOutcome,
    StepOutcome,
    StopReason,
    TurnEndReason,
)

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024

_STR = (str,)
_INT = "int"  # an int that is not a bool
_CONTENT = "content"  # a string, or any JSON array/object (content blocks)
_OBJ = (dict,)
_LIST = (list, tuple)
_BOOL = (bool,)

# type -> ({required field: kind}, {optional field: kind})
_FIELDS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "system_message": ({"content": _CONTENT}, {"name": _STR, "metadata": _OBJ}),
    "user_message": (
        {"content": _CONTENT},
        {"name": _STR, "metadata": _OBJ, "submission_id": _STR},
    ),
    "assistant_message": (
        {"content": _CONTENT},
        {
            "tool_calls": _LIST,
            "stop_reason": {r.value for r in StopReason},
            "error_message": _STR,
            "usage": _OBJ,
            "reasoning": _STR,
            "metadata": _OBJ,
        },
    ),
    "tool_result": (
        {"tool_call_id": _STR, "content": _CONTENT},
        {"name": _STR, "is_error": _BOOL, "metadata": _OBJ},
    ),
    "tool_call": (
        {"id": _STR, "name": _STR},
        {
            "idempotency_key": _STR,
            "request_id": _STR,
            "effect": {k.value for k in EffectKind},
        },
    ),
    "tool_result_late": ({"tool_call_id": _STR}, {"name": _STR, "is_error": _BOOL, "metadata": _OBJ}),
    "turn_start": ({"turn": _INT}, {"submission_id": _STR}),
    # `turn` is optional: recovery closes a turn_start that carried no number without one.
    "turn_end": ({"steps": _INT, "reason": {r.value for r in TurnEndReason}}, {"turn": _INT}),
    "step_start": ({"turn": _INT, "step": _INT}, {}),
    "step_end": ({"turn": _INT, "step": _INT, "outcome": {o.value for o in StepOutcome}}, {}),
    "stream_interrupted": ({}, {}),
    "stream_continued": ({}, {}),
    "submission_interrupted": ({}, {"submission_id": _STR, "tool_call_ids": _LIST}),
    "operator_resolution": (
        {"tool_call_id": _STR, "outcome": {o.value for o in OperatorOutcome}},
        {"note": _STR},
    ),
}

KNOWN_TYPES = frozenset(_FIELDS)

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, check_circular=False, separators=(",", ":"))
# The C encoder behind ``_encoder``, made once: ``JSONEncoder.encode`` builds it again on every
# call, which costs as much as encoding a short message. (Absent where json has no C speedups.)
_c_encoder = (
    None
    if json.encoder.c_make_encoder is None
    else json.encoder.c_make_encoder(
        None, _encoder.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)


def _to_text(value: dict[str, Any]) -> str:
    """Compact JSON text of an already validated copy, as ``_encoder.encode`` gives it."""
    if _c_encoder is None:
        return _encoder.encode(value)
    return "".join(_c_encoder(value, 0))


def is_known_type(type_: object) -> bool:
    return isinstance(type_, str) and (
        type_ in _FIELDS or (type_.startswith(APP_TYPE_PREFIX) and len(type_) > len(APP_TYPE_PREFIX))
    )


def encode(
    type_: object, data: object, *, max_bytes: int = DEFAULT_MAX_EVENT_BYTES, index: int | None = None
) -> str:
    """Validate one event and return its data as compact JSON text; raise ``InvalidEvent``."""
    return encode_copy(type_, data, max_bytes=max_bytes, index=index)[0]


def encode_copy(
    type_: object, data: object, *, max_bytes: int = DEFAULT_MAX_EVENT_BYTES, index: int | None = None
) -> tuple[str, dict[str, Any]]:
    """``encode``, and a copy of ``data`` equal to what decoding the text gives (tuples become
    lists): the returned event's data, made during the validation walk instead of a decode."""
    spec = _FIELDS.get(type_) if isinstance(type_, str) else None
    if spec is None and not is_known_type(type_):
        raise InvalidEvent("type", f"unknown event type {type_!r}", index)
    if not isinstance(data, dict):
        raise InvalidEvent("data", f"must be a JSON object, not {type(data).__name__}", index)
    copy = _copy_json(data, "data", index, set())
    text = _to_text(copy)
    size = len(text.encode("utf-8")) if len(text) * 4 > max_bytes else len(text)
    if size > max_bytes:
        raise InvalidEvent("data", f"encodes to {size} bytes, over the limit of {max_bytes}", index)
    assert isinstance(type_, str)
    if spec is not None:
        required, optional = spec
        for name, kind in required.items():
            if name not in data:
                raise InvalidEvent(f"data.{name}", f"required for {type_}", index)
            _check_field(name, data[name], kind, index)
        for name, kind in optional.items():
            if name in data and data[name] is not None:
                _check_field(name, data[name], kind, index)
        if type_ == "assistant_message" and "tool_calls" in data and data["tool_calls"] is not None:
            _check_tool_calls(data["tool_calls"], index)
    if "surface_op" in data:
        _check_surface_op(type_, data["surface_op"], index)
    return text, copy


def _copy_json(value: Any, where: str, index: int | None, path: set[int]) -> Any:
    """A copy of a JSON value (scalars as they are), refusing what JSON cannot hold."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if isinstance(value, str):  # a str subclass (an enum member, say) is stored as its text
        return str.__str__(value)
    if isinstance(value, int):
        return bool(value) if isinstance(value, bool) else int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidEvent(where, f"{value!r} is not a JSON number", index)
        return float(value)
    if isinstance(value, (dict, list, tuple)):
        if id(value) in path:
            raise InvalidEvent(where, "contains a cycle", index)
        path.add(id(value))
        if isinstance(value, dict):
            copy: Any = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidEvent(where, f"has a non-string key {key!r}", index)
                kind = type(item)
                if kind is str or kind is int or kind is bool or item is None:
                    copy[key] = item  # the common leaves, without a call
                else:
                    copy[key] = _copy_json(item, f"{where}.{key}", index, path)
        else:
            copy = [_copy_json(item, f"{where}[{i}]", index, path) for i, item in enumerate(value)]
        path.discard(id(value))
        return copy
    raise InvalidEvent(where, f"{type(value).__name__} is not JSON", index)


def _check_field(name: str, value: Any, kind: Any, index: int | None) -> None:
    field = f"data.{name}"
    if kind is _INT:
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidEvent(field, f"must be an integer, not {value!r}", index)
    elif kind is _CONTENT:
        if not isinstance(value, (str, list, tuple, dict)):
            raise InvalidEvent(field, f"must be a string or JSON content blocks, not {value!r}", index)
    elif isinstance(kind, (set, frozenset)):
        if value not in kind:
            raise InvalidEvent(field, f"must be one of {sorted(kind)}, not {value!r}", index)
    elif not isinstance(value, kind) or (kind is _OBJ and not isinstance(value, dict)):
        expected = {_STR: "a string", _OBJ: "an object", _LIST: "a list", _BOOL: "a boolean"}[kind]
        raise InvalidEvent(field, f"must be {expected}, not {value!r}", index)


def _check_tool_calls(calls: Any, index: int | None) -> None:
    seen: set[str] = set()
    for i, call in enumerate(calls):
        where = f"data.tool_calls[{i}]"
        if not isinstance(call, dict):
            raise InvalidEvent(where, "must be an object {id, name, arguments}", index)
        for name in ("id", "name"):
            if not isinstance(call.get(name), str) or not call[name]:
                raise InvalidEvent(f"{where}.{name}", "must be a non-empty string", index)
        if call["id"] in seen:
            raise InvalidEvent(f"{where}.id", f"duplicate tool call id {call['id']!r}", index)
        seen.add(call["id"])


def _check_surface_op(type_: str, op: Any, index: int | None) -> None:
    if type_ not in SURFACE_TYPES:
        raise InvalidEvent("data.surface_op", f"only surface events may carry one, not {type_}", index)
    if op is None or op == "append":
        return
    if (
        isinstance(op, (list, tuple))
        and len(op) == 3
        and op[0] == "replace"
        and all(isinstance(x, int) and not isinstance(x, bool) for x in op[1:])
        and 0 <= op[1] <= op[2]
    ):
        return
    raise InvalidEvent(
        "data.surface_op", f'must be "append" or ["replace", start, stop] with 0 <= start <= stop, not {op!r}', index
    )
