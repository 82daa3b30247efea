"""The codec: event validation and encoding (DESIGN §5), the only way an event becomes stored
text. Everything is checked before anything is written (G12), under the journal's own limits.

The order is fixed: known type; ``data`` is a JSON object that encodes; size within the limit;
required fields present with the right JSON types; ``surface_op`` only on surface events and
well formed. A refusal raises ``InvalidEvent`` naming the field.

The same limits hold for what is not an event: ``check_text`` is the one check of every key and
id a caller passes, ``check_id`` of an identifier's length (``MAX_KEY``, ``MAX_CALL_ID``,
``MAX_STREAM_KEY``: the same on both backends, DESIGN §16), ``encode_value`` and ``encode_meta``
validate state values and metas (``InvalidArgument``), and ``parse_json`` is the one reader of
JSON text a caller gives (the command line, an import), nesting bounded by ``MAX_DEPTH`` before
its parser may recurse.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from typing import Any

from journal.errors import InvalidArgument, InvalidEvent
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
# Nesting deeper than this is refused: every reader (Python's json, SQLite's json functions,
# which stop at 1000) must be able to decode whatever was accepted.
MAX_DEPTH = 100
# JSON integers are kept only in the signed 64-bit range: SQLite's json functions (the schema's
# triggers read turn numbers and seqs with them) turn a larger one into a float, and most JSON
# readers other than Python's lose its low digits.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
# An x. type name is printable ASCII without spaces, as a session id is.
_APP_TYPE = re.compile(r"x\.[\x21-\x7e]{1,254}")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Bounds of the numbers callers pass (not event data): a clock in ms up to 2**53 (exact as a
# float, year 285,000) plus a duration up to a century never leaves SQLite's 64-bit integers.
MAX_CLOCK_MS = 2**53
MAX_DURATION_MS = 100 * 365 * 24 * 3600 * 1000
# Identifier limits, the same on both backends (DESIGN §16, parity): PostgreSQL's btree holds an
# index entry of at most about 2,700 bytes (SQLite's any length), and each identifier below sits
# in a unique key or an index, most beside a session id (256 bytes of ASCII). Counted in
# characters; the worst case in UTF-8, 4 bytes a character, still fits: a call id or stream key
# 2 KiB, a key 1 KiB. A NUL is refused in each: PostgreSQL text cannot hold one.
# (A session's or submission's id is 1-256 printable ASCII characters: journal.log.check_session_id.)
MAX_KEY = 256  # an idempotency key (append's key=), a state key
MAX_CALL_ID = 512  # a tool call id (G5's and G6's unique keys, tool_calls, notifications)
MAX_STREAM_KEY = 512  # a stream's key (stream_chunks' primary key)

_STR = (str,)
_INT = "int"  # an int that is not a bool
_CONTENT = "content"  # a string, or any JSON array/object (content blocks)
_OBJ = (dict,)
_LIST = (list, tuple)
_BOOL = (bool,)
_CALL_ID = "call id"  # a tool call id: a string of at most MAX_CALL_ID characters, no NUL
_NAME = "name"  # text the schema copies into a column (a tool's name, a request id): no NUL

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
        {"tool_call_id": _CALL_ID, "content": _CONTENT},
        {"name": _NAME, "is_error": _BOOL, "metadata": _OBJ},
    ),
    "tool_call": (
        {"id": _CALL_ID, "name": _NAME},
        {
            "idempotency_key": _NAME,
            "request_id": _NAME,
            "effect": {k.value for k in EffectKind},
        },
    ),
    "tool_result_late": ({"tool_call_id": _CALL_ID}, {"name": _STR, "is_error": _BOOL, "metadata": _OBJ}),
    "turn_start": ({"turn": _INT}, {"submission_id": _NAME}),
    # `turn` is optional: recovery closes a turn_start that carried no number without one.
    "turn_end": ({"steps": _INT, "reason": {r.value for r in TurnEndReason}}, {"turn": _INT}),
    "step_start": ({"turn": _INT, "step": _INT}, {}),
    "step_end": ({"turn": _INT, "step": _INT, "outcome": {o.value for o in StepOutcome}}, {}),
    "stream_interrupted": ({}, {}),
    "stream_continued": ({}, {}),
    "submission_interrupted": ({}, {"submission_id": _STR, "tool_call_ids": _LIST}),
    "operator_resolution": (
        {"tool_call_id": _CALL_ID, "outcome": {o.value for o in OperatorOutcome}},
        {"note": _STR},
    ),
    # The transcript's last message is taken back (nothing is deleted): `seq` names that message.
    "retract": ({"seq": _INT}, {"reason": _STR}),
}

KNOWN_TYPES = frozenset(_FIELDS)

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, check_circular=False, separators=(",", ":"))
# The C encoder behind ``_encoder``, made once: ``JSONEncoder.encode`` builds it again on every
# call, which costs as much as encoding a short message. (Absent where json has no C speedups.)
_make_c_encoder: Callable[..., Any] | None = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed
# The encoder of a JSON string that both use (non-ASCII kept as it is, ensure_ascii=False).
_string: Callable[[str], str] = json.encoder.encode_basestring
_c_encoder = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(None, _encoder.default, _string, None, ":", ",", False, False, False)
)


def check_int(name: str, value: object, *, minimum: int = 0, maximum: int = _INT_MAX) -> int:
    """``value`` if it is an int (not a bool) in ``minimum..maximum``; else ``InvalidArgument``."""
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidArgument(name, f"must be an integer from {minimum} to {maximum}, not {short_repr(value)}")
    return int(value)


def check_number(name: str, value: object, *, minimum: float, maximum: float) -> float:
    """``value`` if it is a finite int or float in ``minimum..maximum``; else ``InvalidArgument``."""
    # NaN fails every comparison and the bounds are finite, so the range check refuses both.
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidArgument(name, f"must be a number from {minimum:g} to {maximum:g}, not {short_repr(value)}")
    return float(value)


def check_text(name: str, value: object) -> str:
    """``value`` if it is a ``str`` of valid Unicode text; else ``InvalidArgument`` naming ``name``.

    The one check of every key and id a caller passes (a session, submission or tool call id,
    an idempotency, state or stream key, a filter of them): a lone surrogate encodes in Python
    but not as UTF-8, so a driver would refuse it mid-transaction; it is refused here, before
    anything is written or read. So is a NUL: PostgreSQL's text cannot hold one, so no key or id
    holds one on either backend, and a read that names one is refused the same way on both."""
    if not isinstance(value, str):
        raise InvalidArgument(name, f"must be a string, not {type(value).__name__}")
    if not value.isascii() and _SURROGATE.search(value):
        raise lone_surrogate(name, value)
    if "\0" in value:
        raise InvalidArgument(name, f"{short_repr(value)} holds a NUL character (PostgreSQL text cannot hold one)")
    return value


def check_id(name: str, value: object, limit: int) -> str:
    """``value`` if it is 1 to ``limit`` characters of valid Unicode text without a NUL; else
    ``InvalidArgument`` naming ``name``. The one check of an identifier's limit (``MAX_KEY``,
    ``MAX_CALL_ID``, ``MAX_STREAM_KEY``): what one backend accepts, the other does too."""
    if not isinstance(value, str) or not 1 <= len(value) <= limit:
        raise InvalidArgument(name, f"must be a string of 1 to {limit} characters, not {short_repr(value)}")
    return check_text(name, value)


def check_stored_text(name: str, value: object) -> str:
    """``value`` if it is valid Unicode text without a NUL character; else ``InvalidArgument``
    naming ``name``. For a caller's text that a backend keeps in a text column as it is (a stream
    chunk, a lease owner, a meta key or value): PostgreSQL's text cannot hold a NUL, so neither
    backend takes one, and a file always moves to a server (DESIGN §16)."""
    return check_text(name, value)


def _meta_nul(value: Any, where: str) -> None:
    """Refuse a NUL in any key or string of a (validated, bounded-depth) meta value."""
    if isinstance(value, str):
        check_stored_text(where, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_stored_text(f"{where} (a key)", key)
            _meta_nul(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _meta_nul(item, f"{where}[{i}]")


def lone_surrogate(name: str, text: str) -> InvalidArgument:
    """The refusal of a string holding a lone surrogate (not valid Unicode text), naming ``name``."""
    return InvalidArgument(name, f"{short_repr(text)} holds a lone surrogate (not valid Unicode text)")


def parse_json(text: str | bytes, where: str = "data", index: int | None = None, *, depth: int = MAX_DEPTH) -> Any:
    """Strict JSON text as a value, under the rules data is stored by; ``InvalidEvent`` naming
    ``where`` otherwise.

    Strict: no NaN or Infinity, no key twice in one object, nesting at most ``MAX_DEPTH``
    (checked on the text before parsing: Python's parser recurses, and text nested 100,000 deep
    would raise ``RecursionError`` from inside it). Every path that reads JSON text from a
    caller (the command line, ``journal import``) parses it here; what it gives is then encoded
    by the codec as any value is (which refuses a lone surrogate, naming its place). ``depth``:
    a wrapper's text (an export line holds its data two levels down) allows its own levels more."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEvent(where, f"is not UTF-8 text (byte {exc.start})", index) from None
    if not isinstance(text, str):
        raise InvalidEvent(where, f"must be JSON text, not {type(text).__name__}", index)
    if too_deep(text, depth):
        raise InvalidEvent(where, f"nests deeper than the limit of {MAX_DEPTH} levels", index)
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as exc:  # JSONDecodeError, a duplicate key, NaN, 1e999, an integer of too many digits
        # Chained (not `from None`): a reader with its own wording (an import's line) tells text
        # that is not JSON from nesting too deep by this cause, not by the message.
        raise InvalidEvent(where, f"is not JSON: {exc}", index) from exc
    except RecursionError:  # a parser nearer its recursion limit than the depth bound allows
        raise InvalidEvent(where, f"nests deeper than the limit of {MAX_DEPTH} levels", index) from None
    return value


# A JSON string (escapes included) and a run of characters that are not brackets: what the
# depth scan skips.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NESTING = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def too_deep(text: str, depth: int = MAX_DEPTH) -> bool:
    """Whether the arrays and objects of JSON text nest deeper than ``depth`` levels (brackets
    inside strings do not count): one pass of two regular expressions and a running sum."""
    if text.count("[") + text.count("{") <= depth:  # the common case: no scan needed
        return False
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(map(_NESTING.__getitem__, map(ord, brackets))), default=0) > depth


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {short_repr(key)}")
            seen.add(key)
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{short_repr(text)} is not JSON (too large for a number)")
    return value


class Codec:
    """Validation and encoding under one journal's limits: the way its events become text."""

    __slots__ = ("max_event_bytes",)

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes

    def encode(self, type_: object, data: object, *, index: int | None = None) -> str:
        """Validate one event and return its data as compact JSON text; raise ``InvalidEvent``."""
        return self.encode_copy(type_, data, index=index)[0]

    def encode_copy(self, type_: object, data: object, *, index: int | None = None) -> tuple[str, dict[str, Any]]:
        """``encode``, and a copy of ``data`` equal to what decoding the text gives (tuples become
        lists): the returned event's data, made during the validation walk instead of a decode."""
        return _encode_copy(type_, data, self.max_event_bytes, index)

    def encode_value(self, where: str, value: object) -> str:
        """Validate any JSON value (a state value, say) under the same rules and size limit as
        an event's data, and return its compact JSON text; raise ``InvalidArgument`` naming
        ``where``."""
        try:
            copy = _copy_json(value, where, None, set())
        except InvalidEvent as exc:  # its field is the place inside the value: `where` or below it
            raise InvalidArgument(exc.field, exc.problem) from exc
        text = _to_text(copy)
        if not text.isascii() and _SURROGATE.search(text):
            raise InvalidArgument(_surrogate_at(copy, where), "holds a lone surrogate (not valid Unicode text)")
        size = len(text.encode("utf-8")) if len(text) * 4 > self.max_event_bytes else len(text)
        if size > self.max_event_bytes:
            raise InvalidArgument(where, f"encodes to {size} bytes, over the limit of {self.max_event_bytes}")
        return text

    def encode_meta(self, meta: object) -> str:
        """A session's meta (a JSON object) validated as ``encode_value`` validates a value, as
        its compact JSON text; ``InvalidArgument`` naming ``meta`` or the place in it."""
        if not isinstance(meta, dict):
            raise InvalidArgument("meta", f"must be a JSON object, not {type(meta).__name__}")
        text = self.encode_value("meta", meta)
        _meta_nul(meta, "meta")
        return text


def _to_text(value: Any) -> str:
    """Compact JSON text of an already validated copy, as ``_encoder.encode`` gives it."""
    if _c_encoder is None:
        return _encoder.encode(value)
    return "".join(_c_encoder(value, 0))


def is_known_type(type_: object) -> bool:
    return isinstance(type_, str) and (type_ in _FIELDS or _APP_TYPE.fullmatch(type_) is not None)


def _encode_copy(type_: object, data: object, max_bytes: int, index: int | None) -> tuple[str, dict[str, Any]]:
    spec = _FIELDS.get(type_) if isinstance(type_, str) else None
    if spec is None and not is_known_type(type_):
        if isinstance(type_, str) and type_.startswith(APP_TYPE_PREFIX):
            raise InvalidEvent(
                "type", f"an x. type is 3-256 printable ASCII characters without spaces, not {short_repr(type_)}", index
            )
        raise InvalidEvent("type", f"unknown event type {short_repr(type_)}", index)
    if not isinstance(data, dict):
        raise InvalidEvent("data", f"must be a JSON object, not {type(data).__name__}", index)
    copy = _copy_json(data, "data", index, set())
    text = _to_text(copy)
    if not text.isascii() and _SURROGATE.search(text):
        # A lone surrogate encodes in Python but not as UTF-8: SQLite would refuse it at bind
        # time, mid-transaction. Name the string that holds it.
        raise InvalidEvent(_surrogate_at(copy, "data"), "holds a lone surrogate (not valid Unicode text)", index)
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
    """A copy of a JSON value (scalars as they are), refusing what JSON cannot hold.

    ``path`` holds the containers being copied around this one: its size is the depth."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if isinstance(value, str):  # a str subclass (an enum member, say) is stored as its text
        return str.__str__(value)
    if isinstance(value, int):
        if isinstance(value, bool):
            return bool(value)
        if not _INT_MIN <= value <= _INT_MAX:
            raise InvalidEvent(where, f"integer {_int_text(value)} is outside the signed 64-bit range", index)
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidEvent(where, f"{value!r} is not a JSON number", index)
        return float(value)
    if isinstance(value, (dict, list, tuple)):
        if id(value) in path:
            raise InvalidEvent(where, "contains a cycle", index)
        if len(path) >= MAX_DEPTH:
            raise InvalidEvent(where, f"nests deeper than the limit of {MAX_DEPTH} levels", index)
        path.add(id(value))
        if isinstance(value, dict):
            copy: Any = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidEvent(where, f"has a non-string key {short_repr(key)}", index)
                kind = type(item)
                if kind is str or kind is bool or item is None or (kind is int and _INT_MIN <= item <= _INT_MAX):
                    copy[key] = item  # the common leaves, without a call
                else:
                    copy[key] = _copy_json(item, f"{where}.{key}", index, path)
        else:
            copy = [_copy_json(item, f"{where}[{i}]", index, path) for i, item in enumerate(value)]
        path.discard(id(value))
        return copy
    raise InvalidEvent(where, f"{type(value).__name__} is not JSON", index)


def _int_text(value: int) -> str:
    """An integer too long to print whole (str() refuses past 4300 digits) as its size."""
    return f"of {value.bit_length()} bits" if value.bit_length() > 256 else str(value)


def short_repr(value: Any) -> str:
    """``repr(value)`` cut to 80 characters: what an error message shows of a caller's value
    (an integer too long for ``repr``, which refuses past 4300 digits, as its size)."""
    big = isinstance(value, int) and value.bit_length() > 256
    text = f"an integer of {value.bit_length()} bits" if big else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _surrogate_at(value: Any, where: str) -> str:
    """Where in a JSON value (keys included) the first string with a lone surrogate is."""
    if isinstance(value, str):
        return where if _SURROGATE.search(value) else ""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        at = f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]"
        if isinstance(key, str) and _SURROGATE.search(key):
            return f"{where} (a key)"
        found = _surrogate_at(item, at)
        if found:
            return found
    return ""


def _check_field(name: str, value: Any, kind: Any, index: int | None) -> None:
    field = f"data.{name}"
    if kind is _INT:
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidEvent(field, f"must be an integer, not {short_repr(value)}", index)
    elif kind is _CONTENT:
        if not isinstance(value, (str, list, tuple, dict)):
            raise InvalidEvent(field, f"must be a string or JSON content blocks, not {short_repr(value)}", index)
    elif kind is _CALL_ID or kind is _NAME:
        if not isinstance(value, str):
            raise InvalidEvent(field, f"must be a string, not {short_repr(value)}", index)
        _check_name(field, value, MAX_CALL_ID if kind is _CALL_ID else None, index)
    elif isinstance(kind, (set, frozenset)):
        if value not in kind:
            raise InvalidEvent(field, f"must be one of {sorted(kind)}, not {short_repr(value)}", index)
    elif not isinstance(value, kind) or (kind is _OBJ and not isinstance(value, dict)):
        expected = {_STR: "a string", _OBJ: "an object", _LIST: "a list", _BOOL: "a boolean"}[kind]
        raise InvalidEvent(field, f"must be {expected}, not {short_repr(value)}", index)


def _check_name(field: str, value: str, limit: int | None, index: int | None) -> None:
    """An identifier or name in event data: at most ``limit`` characters, no NUL (the schema
    indexes it, or copies it into a text column, which PostgreSQL cannot give a NUL)."""
    if limit is not None and len(value) > limit:
        raise InvalidEvent(field, f"is {len(value)} characters, over the limit of {limit}", index)
    if "\0" in value:
        raise InvalidEvent(field, "holds a NUL character (PostgreSQL text cannot hold one)", index)


def _check_tool_calls(calls: Any, index: int | None) -> None:
    seen: set[str] = set()
    for i, call in enumerate(calls):
        where = f"data.tool_calls[{i}]"
        if not isinstance(call, dict):
            raise InvalidEvent(where, "must be an object {id, name, arguments}", index)
        for name in ("id", "name"):
            if not isinstance(call.get(name), str) or not call[name]:
                raise InvalidEvent(f"{where}.{name}", "must be a non-empty string", index)
            _check_name(f"{where}.{name}", call[name], MAX_CALL_ID if name == "id" else None, index)
        if call["id"] in seen:
            raise InvalidEvent(f"{where}.id", f"duplicate tool call id {short_repr(call['id'])}", index)
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
        "data.surface_op",
        f'must be "append" or ["replace", start, stop] with 0 <= start <= stop, not {short_repr(op)}',
        index,
    )
