"""The library's value types and vocabularies.

One enum per vocabulary; ``schema.sql``'s CHECK constraints list the same values, and a test
keeps the two in step.
"""

from __future__ import annotations

import enum
import time
from typing import Any

import attrs


def now_ms() -> int:
    """The clock every event and row is dated by: milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


class Vocabulary(str, enum.Enum):
    """The base of every vocabulary: a str enum whose str() is its value."""

    def __str__(self) -> str:
        return str.__str__(self)  # the member is its value (a str)


class Durability(Vocabulary):
    FULL = "full"
    NORMAL = "normal"


class WriteOutcome(Vocabulary):
    """What is known of a write that failed (``JournalIOError.outcome``)."""

    ABSENT = "absent"  # known not written: safe to retry
    PRESENT = "present"  # known written
    UNKNOWN = "unknown"  # the commit itself failed: re-read before retrying


class EventType(Vocabulary):
    SYSTEM_MESSAGE = "system_message"
    USER_MESSAGE = "user_message"
    ASSISTANT_MESSAGE = "assistant_message"
    TOOL_RESULT = "tool_result"
    TOOL_CALL = "tool_call"
    TOOL_RESULT_LATE = "tool_result_late"
    TURN_START = "turn_start"
    TURN_END = "turn_end"
    STEP_START = "step_start"
    STEP_END = "step_end"
    STREAM_INTERRUPTED = "stream_interrupted"
    STREAM_CONTINUED = "stream_continued"
    SUBMISSION_INTERRUPTED = "submission_interrupted"
    OPERATOR_RESOLUTION = "operator_resolution"
    RETRACT = "retract"


SURFACE_TYPES = frozenset(
    {
        EventType.SYSTEM_MESSAGE.value,
        EventType.USER_MESSAGE.value,
        EventType.ASSISTANT_MESSAGE.value,
        EventType.TOOL_RESULT.value,
    }
)
APP_TYPE_PREFIX = "x."


class Phase(Vocabulary):
    BEFORE_PROVIDER = "before_provider"
    PROVIDER_STARTED = "provider_started"
    TOOL_REQUEST_RECORDED = "tool_request_recorded"
    COMMITTED = "committed"


class Risk(Vocabulary):
    TOOL_NOT_STARTED = "tool_not_started"
    TOOL_OUTCOME_UNKNOWN = "tool_outcome_unknown"


class TurnEndReason(Vocabulary):
    COMPLETE = "complete"
    REJECTED = "rejected"
    INTERRUPTED = "interrupted"


class StepOutcome(Vocabulary):
    OK = "ok"
    ERROR = "error"


class StopReason(Vocabulary):
    STOP = "stop"
    LENGTH = "length"
    TOOL_USE = "tool_use"
    ERROR = "error"
    ABORTED = "aborted"


class EffectKind(Vocabulary):
    """The effect class's name as recorded in the ``tool_call`` event (``effect``)."""

    IDEMPOTENT = "idempotent"
    QUERYABLE = "queryable"
    UNSAFE = "unsafe"


class CallState(Vocabulary):
    """Where a tool call stands: derived from the log, kept in ``tool_calls``."""

    REQUESTED = "requested"
    DISPATCHED = "dispatched"
    RESOLVED = "resolved"
    INDETERMINATE = "indeterminate"


class SubmissionState(Vocabulary):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class StaleReason(Vocabulary):
    """Why the restart scan lists a submission."""

    EXPIRED = "expired"  # running, and its lease ran out
    OWNER_DEAD = "owner_dead"  # running, and the process holding its lease is gone
    QUEUED = "queued"  # waiting for a claim


class DecisionAction(Vocabulary):
    """What the reconciler did with one stale submission."""

    SETTLED = "settled"
    FAILED = "failed"
    REQUEUED = "requeued"
    NEW_ATTEMPT = "new_attempt"
    SKIPPED = "skipped"


class OperatorOutcome(Vocabulary):
    RAN = "ran"
    DID_NOT_RUN = "did_not_run"


@attrs.frozen
class Event:
    """One immutable record of a session's log.

    ``key`` is the idempotency key it was appended with, if any. ``existing`` is True on an
    event an append returned without writing it: its key was already stored (the event is the
    stored one). It is not part of the record: two events are equal whatever it says.
    """

    session_id: str
    seq: int
    type: str
    data: dict[str, Any] = attrs.field(eq=True, hash=False)
    time_ms: int
    key: str | None = None
    existing: bool = attrs.field(default=False, eq=False, repr=False)

    @property
    def is_surface(self) -> bool:
        return self.type in SURFACE_TYPES

    def to_dict(self) -> dict[str, Any]:
        out = {
            "session_id": self.session_id,
            "seq": self.seq,
            "type": self.type,
            "data": self.data,
            "time_ms": self.time_ms,
        }
        if self.key is not None:
            out["key"] = self.key
        return out


@attrs.frozen
class Session:
    """A session: its id, how many events its log holds, where it was forked from, and when it
    last changed.

    ``count`` includes the events a fork reads through its parent. ``last_ms`` is the
    ``time_ms`` of the session's last own event (the highest seq), or ``created_ms`` while it
    has none (a new session, a fork not yet appended to): inherited events are the parent's
    activity, not the fork's.
    """

    id: str
    count: int
    created_ms: int
    meta: dict[str, Any] | None = attrs.field(default=None, hash=False)
    parent_id: str | None = None
    seed_length: int = 0
    # Last, with a default: the existing fields keep their order (``to_dict`` is the CLI's
    # contract) and the calls that make a session with no own events need not name it.
    last_ms: int = attrs.field(default=attrs.Factory(lambda self: self.created_ms, takes_self=True))

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)
