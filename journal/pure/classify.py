"""Name the situation of an interrupted submission: the pure half of the resume policy.

``classify_submission_state`` reads the events after a submission's input and returns one state
(DESIGN §7(3)); the reconciler acts on it. Nothing here does I/O, and nothing raises on any list
of events: the log is evidence, and evidence can be odd (a hand-written ``append``, an older
writer, a bug elsewhere), so every field is read through an accessor that answers "absent" for a
value of the wrong type.

Which events count. Only *significant* events take part when this module says "after",
"directly followed by", "then" or "at the end": surface events (system, user and assistant
messages, tool results) and the reconciler's signals (``stream_interrupted``,
``stream_continued``, ``submission_interrupted``). Turn and step markers, dispatches
(``tool_call``), late results, operator resolutions, ``x.`` application events and unknown types
are skipped, because the live loop writes them between surface events and they say nothing about
what the model saw or produced. So an aborted assistant, a ``step_end``, a ``stream_interrupted``
and a ``stream_continued`` count as "directly followed".
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from typing import Any, ClassVar, cast

import attrs

from journal.model import SURFACE_TYPES, Event, EventType, StopReason, Vocabulary

__all__ = [
    "Absent",
    "AdvancedPastInput",
    "ClassifiedState",
    "Completed",
    "Pending",
    "Resume",
    "ResumeMode",
    "TerminalError",
    "ToolUseUnresolved",
    "TrailingPartialToolBatch",
    "classify_submission_state",
    "count_consecutive_retryable_errors",
    "find_trailing_partial_tool_batch",
    "is_context_overflow",
    "is_retryable_error",
]

_USER = EventType.USER_MESSAGE.value
_ASSISTANT = EventType.ASSISTANT_MESSAGE.value
_TOOL_RESULT = EventType.TOOL_RESULT.value
_STREAM_INTERRUPTED = EventType.STREAM_INTERRUPTED.value
_STREAM_CONTINUED = EventType.STREAM_CONTINUED.value
_SIGNALS = frozenset({_STREAM_INTERRUPTED, _STREAM_CONTINUED, EventType.SUBMISSION_INTERRUPTED.value})
_SIGNIFICANT = SURFACE_TYPES | _SIGNALS

# Whole numbers only: "HTTP 503" is retryable, "215000 tokens" or "15029" is not. A digit, or a
# decimal/thousands separator followed by a digit, on either side means a longer number.
_HTTP_STATUS = r"(?<![\d.,])(?:429|500|502|503|504)(?!\d|[.,]\d)"

_RETRYABLE_MESSAGE = re.compile(
    "|".join(
        [
            r"overloaded",
            r"rate[ _-]?limit",
            r"too many requests",
            _HTTP_STATUS,
            r"service[ _-]?unavailable",
            r"(?:server|network)[ _-]?error",
            r"connection[ _-]?(?:was[ _-]?)?(?:reset|refused|lost)",
            r"econn(?:reset|refused)",
            r"socket hang up",
            r"fetch failed",
            r"timed[ _-]?out",
            r"timeout",
            r"throttl(?:ed|ing)",  # Bedrock's ThrottlingException, "request was throttled"
        ]
    ),
    re.IGNORECASE,
)

# The providers' ways of saying "the request does not fit the context window".
_OVERFLOW_MESSAGE = re.compile(
    "|".join(
        [
            r"prompt is too long",  # Anthropic
            r"input is too long",  # Bedrock
            r"maximum context length",  # OpenAI-compatible, OpenRouter
            r"context[ _-]?length[ _-]?exceeded",  # OpenAI's code, and prose
            r"exceeds? the (?:model'?s? )?context window",  # OpenAI responses
            r"context window exceeds limit",  # MiniMax
            r"too many tokens",
            r"request[ _-]?too[ _-]?large",  # Anthropic's 413 (request_too_large)
            r"token limit exceeded|exceeded (?:the )?(?:model )?token limit",  # Kimi and others
            r"input token count[^\n]*exceeds the maximum",  # Gemini
            r"maximum prompt length",  # xAI
            r"reduce the length of the messages",  # Groq, OpenAI
            r"exceeds the available context size",  # llama.cpp
            r"greater than the context length",  # LM Studio
        ]
    ),
    re.IGNORECASE,
)

# Transient failures whose wording can match an overflow pattern: Bedrock throttles with
# "ThrottlingException: Too many tokens, please wait before trying again", and rate limits
# count tokens too. A message matching one of these is never an overflow, whatever else it
# says: it is retried as it is, not compacted. No bare status number here: OpenAI's overflow
# message "you requested 4429 tokens (429 in the messages, ...)" holds a whole 429.
_NOT_OVERFLOW_MESSAGE = re.compile(
    "|".join(
        [
            r"^\s*(?:throttling error|service unavailable)\s*:",  # Bedrock's error prefixes
            r"throttl(?:ed|ing)",  # Bedrock's ThrottlingException, and others' wording
            r"rate[ _-]?limit",
            r"too many requests",
        ]
    ),
    re.IGNORECASE,
)


class ResumeMode(Vocabulary):
    """How a resumed attempt continues: the ``mode`` of a ``Resume`` state."""

    INPUT_ONLY = "input_only"  # the input was applied; no model answer yet
    STREAM_CONTINUATION = "stream_continuation"  # a recovered partial stream: continue after it
    TOOL_RESULTS = "tool_results"  # the last batch is answered: ask the model again
    TOOL_RESULTS_PARTIAL = "tool_results_partial"  # some calls of the last batch lack a result
    TRANSIENT_RETRY = "transient_retry"  # the provider failed in a way worth retrying
    OVERFLOW = "overflow"  # the context window was exceeded: compact, then retry
    ABORTED_PARTIAL = "aborted_partial"  # the answer was cut off: continue after it


class _State:
    """What every state shares: a class-level ``kind`` and a plain-dict form."""

    __slots__ = ()
    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """The state as plain data (``kind`` first; events as their ``to_dict``)."""
        out: dict[str, Any] = {"kind": self.kind}
        for field in attrs.fields(cast("type[attrs.AttrsInstance]", type(self))):  # each state is an attrs class
            value = getattr(self, field.name)
            if isinstance(value, Event):
                value = value.to_dict()
            elif isinstance(value, enum.Enum):
                value = value.value
            out[field.name] = value
        return out


@attrs.frozen
class Absent(_State):
    """The submission's input event was not found: there is nothing to classify."""

    kind: ClassVar[str] = "absent"


@attrs.frozen
class AdvancedPastInput(_State):
    """A later user message follows the input: the conversation moved on without it."""

    kind: ClassVar[str] = "advanced_past_input"


@attrs.frozen
class Completed(_State):
    """The model finished (``stop`` or ``length``); ``overflow`` says it silently hit the window."""

    kind: ClassVar[str] = "completed"
    assistant: Event
    overflow: bool


@attrs.frozen
class ToolUseUnresolved(_State):
    """The model asked for tool calls and no result at all was written after the input."""

    kind: ClassVar[str] = "tool_use_unresolved"
    assistant: Event


@attrs.frozen
class TerminalError(_State):
    """A failure that resuming cannot fix; ``reason`` is the error message or the stop reason."""

    kind: ClassVar[str] = "terminal_error"
    reason: str


@attrs.frozen
class Pending(_State):
    """The submission's input was never applied. The classifier itself never returns it."""

    kind: ClassVar[str] = "pending"


@attrs.frozen
class Resume(_State):
    """Start a new attempt that continues as ``mode`` says.

    ``assistant`` is the last assistant message after the input (``None`` for ``input_only``);
    for a partial batch, ``find_trailing_partial_tool_batch`` names the calls still owed.
    ``consecutive_retryable_errors`` lets the caller bound its retries.
    """

    kind: ClassVar[str] = "resume"
    mode: ResumeMode
    assistant: Event | None
    consecutive_retryable_errors: int


ClassifiedState = Absent | AdvancedPastInput | Completed | ToolUseUnresolved | TerminalError | Pending | Resume


@attrs.frozen
class TrailingPartialToolBatch:
    """A tool-use assistant at the end of the log with calls still lacking a result.

    ``tool_calls`` are all its calls (the well-formed ones, dicts), in call order.
    """

    assistant: Event
    tool_calls: tuple[dict[str, Any], ...] = attrs.field(hash=False)


# --- defensive accessors: the wrong type reads as absent ----------------------------------


def _text(value: object) -> str | None:
    """``value`` as a plain string, or ``None`` if it is not one (str enums give their value)."""
    if isinstance(value, enum.Enum):
        value = value.value
    return value if isinstance(value, str) else None


def _type(event: object) -> str | None:
    return _text(getattr(event, "type", None))


def _data(event: object) -> dict[str, Any]:
    data = getattr(event, "data", None)
    return data if isinstance(data, dict) else {}


def _stop_reason(event: object) -> str | None:
    return _text(_data(event).get("stop_reason"))


def _error_message(event: object) -> str | None:
    return _text(_data(event).get("error_message"))


def _tool_calls(event: object) -> tuple[dict[str, Any], ...]:
    calls = _data(event).get("tool_calls")
    if not isinstance(calls, (list, tuple)):
        return ()
    return tuple(call for call in calls if isinstance(call, dict))


def _token_count(value: object) -> int | None:
    """A token count as an exact int, or ``None`` if ``value`` is not a non-negative whole number.

    Integral floats (``1000.0``, as some JSON writers produce) are accepted; ints keep the
    arithmetic exact, so a huge count cannot overflow a float conversion.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():  # NaN and infinities are not integers
        value = int(value)
    if isinstance(value, int) and value >= 0:
        return value
    return None


def _significant(events: Iterable[Event]) -> list[Event]:
    """The surface events and signals, in log order (see the module docstring)."""
    return [event for event in events if _type(event) in _SIGNIFICANT]


def _is_assistant(event: object, stop_reason: str) -> bool:
    return _type(event) == _ASSISTANT and _stop_reason(event) == stop_reason


# --- predicates ---------------------------------------------------------------------------


def is_retryable_error(assistant_or_message: Event | str) -> bool:
    """Whether an error is worth retrying as is: overload, rate limit, 5xx, network, timeout.

    Takes an error message, or an assistant message event, which counts only when its
    ``stop_reason`` is ``error`` (an aborted answer is not an error, whatever its text says).
    HTTP statuses match as whole numbers only. A context-overflow message is never retryable
    (the same request would overflow again), but a rate limit or a throttle that mentions
    tokens is not an overflow: it is retryable.
    """
    message = _text(assistant_or_message)
    if message is None:
        if not _is_assistant(assistant_or_message, StopReason.ERROR.value):
            return False
        message = _error_message(assistant_or_message)
    if not message or _is_overflow_message(message):
        return False
    return _RETRYABLE_MESSAGE.search(message) is not None


def _is_overflow_message(message: str) -> bool:
    """Whether an error message says the request did not fit the context window.

    A provider's overflow wording, unless the message is a rate limit or a throttle: those
    also talk of too many tokens, and they pass by themselves.
    """
    return _OVERFLOW_MESSAGE.search(message) is not None and _NOT_OVERFLOW_MESSAGE.search(message) is None


def is_context_overflow(assistant: Event, *, context_window: int) -> bool:
    """Whether an assistant message shows that the request did not fit the context window.

    Either an ``error`` whose message is a provider's overflow message (and not a rate limit or
    a throttle, which can mention too many tokens as well), or a silent overflow:
    ``stop`` with ``usage.input + usage.cache_read > context_window``, or ``length`` with
    ``usage.output == 0`` and ``input + cache_read >= 0.99 * context_window``. A missing
    ``cache_read`` counts as 0; a missing ``input`` or ``output`` (or a ``context_window`` that
    is not a positive whole number) means no silent overflow.
    """
    if _type(assistant) != _ASSISTANT:
        return False
    stop_reason = _stop_reason(assistant)
    if stop_reason == StopReason.ERROR.value:
        message = _error_message(assistant)
        return message is not None and message != "" and _is_overflow_message(message)
    window = _token_count(context_window)
    usage = _data(assistant).get("usage")
    if not window or not isinstance(usage, dict):
        return False
    used_input = _token_count(usage.get("input"))
    if used_input is None:
        return False
    used = used_input + (_token_count(usage.get("cache_read")) or 0)
    if stop_reason == StopReason.STOP.value:
        return used > window
    if stop_reason == StopReason.LENGTH.value:
        # 100·used ≥ 99·window is used ≥ 0.99·window in exact integer arithmetic.
        return _token_count(usage.get("output")) == 0 and 100 * used >= 99 * window
    return False


def count_consecutive_retryable_errors(following: Iterable[Event] | None) -> int:
    """How many retryable-error assistant messages end ``following``, in a row.

    Counted back from the end until a user message or an assistant message that is not a
    retryable error; other events (tool results, system messages, signals, bookkeeping) are
    passed over.
    """
    if following is None:
        return 0
    count = 0
    for event in reversed(_significant(following)):
        kind = _type(event)
        if kind == _USER:
            break
        if kind == _ASSISTANT:
            if not is_retryable_error(event):
                break
            count += 1
    return count


# --- the trailing tool batch --------------------------------------------------------------


def find_trailing_partial_tool_batch(
    following: Iterable[Event] | None,
) -> TrailingPartialToolBatch | None:
    """The tool-use assistant ending ``following`` whose calls are not all answered, or ``None``.

    Accepts only one shape at the end of the significant events: a ``tool_use`` assistant, then
    tool results, then at most one ``aborted`` assistant. Any other shape gives ``None``, as does a
    ``stream_continued`` signal anywhere in the slice (a recovered stream is being continued, so
    there is no batch to repair). A result whose ``tool_call_id`` is not one of the assistant's
    calls is passed over, not treated as a break in the shape: it answers nothing, and the calls
    it does not answer are still owed.
    """
    if following is None:
        return None
    events = _significant(following)
    if any(_type(event) == _STREAM_CONTINUED for event in events):
        return None
    end = len(events)
    if end and _is_assistant(events[end - 1], StopReason.ABORTED.value):
        end -= 1  # the aborted partial belongs to the next request, not to the batch
    answered: set[str] = set()
    index = end - 1
    while index >= 0 and _type(events[index]) == _TOOL_RESULT:
        call_id = _text(_data(events[index]).get("tool_call_id"))
        if call_id is not None:
            answered.add(call_id)
        index -= 1
    if index < 0 or not _is_assistant(events[index], StopReason.TOOL_USE.value):
        return None
    assistant = events[index]
    calls = _tool_calls(assistant)
    if all(_text(call.get("id")) in answered for call in calls):
        return None
    return TrailingPartialToolBatch(assistant=assistant, tool_calls=calls)


# --- the classifier -----------------------------------------------------------------------


def classify_submission_state(following: Iterable[Event] | None, *, context_window: int) -> ClassifiedState:
    """Name the situation of an interrupted submission from the events after its input.

    The ten rules of DESIGN §7(3), in order, first match wins (``A`` is the last assistant
    message): no input → ``Absent``; a later user message → ``AdvancedPastInput``; no
    assistant → ``Resume(input_only)``; ``A`` stopped (``stop``/``length``) → ``Completed``;
    overflow → ``Resume(overflow)``; retryable error → ``Resume(transient_retry)``; aborted and
    directly followed by ``stream_interrupted`` then ``stream_continued`` →
    ``Resume(stream_continuation)``; ``tool_use`` → ``ToolUseUnresolved`` (no result at all after
    the input), ``Resume(tool_results_partial)`` or ``Resume(tool_results)``; ``aborted`` →
    ``Resume(tool_results_partial)`` or ``Resume(aborted_partial)``; anything else →
    ``TerminalError``. Never returns ``Pending``. Deterministic; never raises on any events.
    """
    if following is None:
        return Absent()
    events = _significant(following)
    if any(_type(event) == _USER for event in events):
        return AdvancedPastInput()
    last = next((i for i in reversed(range(len(events))) if _type(events[i]) == _ASSISTANT), None)
    if last is None:
        return Resume(ResumeMode.INPUT_ONLY, None, count_consecutive_retryable_errors(events))
    assistant = events[last]
    stop_reason = _stop_reason(assistant)
    if stop_reason in (StopReason.STOP.value, StopReason.LENGTH.value):
        # Finished work is never thrown away; overflow only tells the caller to compact next.
        overflow = is_context_overflow(assistant, context_window=context_window)
        return Completed(assistant=assistant, overflow=overflow)

    errors = count_consecutive_retryable_errors(events)

    def resume(mode: ResumeMode) -> Resume:
        return Resume(mode=mode, assistant=assistant, consecutive_retryable_errors=errors)

    if is_context_overflow(assistant, context_window=context_window):
        return resume(ResumeMode.OVERFLOW)
    if is_retryable_error(assistant):
        return resume(ResumeMode.TRANSIENT_RETRY)
    if stop_reason == StopReason.ABORTED.value:
        after = [_type(event) for event in events[last + 1 : last + 3]]
        if after == [_STREAM_INTERRUPTED, _STREAM_CONTINUED]:
            return resume(ResumeMode.STREAM_CONTINUATION)
    if stop_reason == StopReason.TOOL_USE.value:
        if not any(_type(event) == _TOOL_RESULT for event in events):
            return ToolUseUnresolved(assistant=assistant)
        if find_trailing_partial_tool_batch(events) is not None:
            return resume(ResumeMode.TOOL_RESULTS_PARTIAL)
        return resume(ResumeMode.TOOL_RESULTS)
    if stop_reason == StopReason.ABORTED.value:
        if find_trailing_partial_tool_batch(events) is not None:
            return resume(ResumeMode.TOOL_RESULTS_PARTIAL)
        return resume(ResumeMode.ABORTED_PARTIAL)
    return TerminalError(reason=_error_message(assistant) or stop_reason or "unknown")
