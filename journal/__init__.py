"""journal: an AI agent's sessions in one crash-safe SQLite file."""

from journal.claims import Claim
from journal.effects import EffectAction, EffectRecovery, IndeterminateCall, IndeterminateReason
from journal.engine import Journal, open
from journal.errors import (
    AlreadyDispatched,
    AnsweredBeforeApproval,
    ApprovedAfterDispatch,
    BoundaryOutOfRange,
    CorruptJournal,
    CountMismatch,
    DiskFull,
    InvalidArgument,
    InvalidBoundary,
    InvalidEvent,
    InvalidRange,
    JournalBusy,
    JournalClosed,
    JournalError,
    JournalIOError,
    LeaseLost,
    MissingEffectClass,
    NoOpenTurn,
    NotAJournal,
    NotIndeterminate,
    OpenTurnError,
    ResultExists,
    SchemaTooNew,
    SchemaViolation,
    SessionExists,
    SessionHasForks,
    SessionNotFound,
    SubmissionExists,
    SubmissionNotFound,
    ToolNodeNotFound,
    TurnHeld,
    UnansweredCalls,
    UnknownToolCall,
    UnregisteredTool,
    WrongLoop,
)
from journal.model import (
    CallState,
    DecisionAction,
    Durability,
    EffectKind,
    Event,
    EventType,
    OperatorOutcome,
    Phase,
    Risk,
    Session,
    StaleReason,
    StepOutcome,
    StopReason,
    SubmissionState,
    TurnEndReason,
    WriteOutcome,
)
from journal.preview import Preview
from journal.pure.check import Disagreement
from journal.pure.classify import ResumeMode
from journal.pure.plan import Repair
from journal.pure.view import Message, MissingResult, ProviderView
from journal.purge import PurgeResult
from journal.queue import Submission, SubmissionInfo
from journal.reconcile import Decision
from journal.recovery import OpenTurn, OwedCall, RecoveryPlan, RecoveryResult, ScanReport
from journal.results import Dispatch, PendingCall, PutResult, ToolStats
from journal.sessions import SessionTotals
from journal.tools import Idempotent, Landed, NeverArrived, Queryable, Tool, ToolContext, ToolRegistry, Unsafe
from journal.turns import Turn, TurnState

__all__ = [
    "AlreadyDispatched",
    "AnsweredBeforeApproval",
    "ApprovedAfterDispatch",
    "BoundaryOutOfRange",
    "CallState",
    "Claim",
    "CorruptJournal",
    "CountMismatch",
    "Decision",
    "DecisionAction",
    "Disagreement",
    "DiskFull",
    "Dispatch",
    "Durability",
    "EffectAction",
    "EffectKind",
    "EffectRecovery",
    "Event",
    "EventType",
    "Idempotent",
    "IndeterminateCall",
    "IndeterminateReason",
    "InvalidArgument",
    "InvalidBoundary",
    "InvalidEvent",
    "InvalidRange",
    "Journal",
    "JournalBusy",
    "JournalClosed",
    "JournalError",
    "JournalIOError",
    "Landed",
    "LeaseLost",
    "Message",
    "MissingEffectClass",
    "MissingResult",
    "NeverArrived",
    "NoOpenTurn",
    "NotAJournal",
    "NotIndeterminate",
    "OpenTurn",
    "OpenTurnError",
    "OperatorOutcome",
    "OwedCall",
    "PendingCall",
    "Phase",
    "Preview",
    "ProviderView",
    "PurgeResult",
    "PutResult",
    "Queryable",
    "RecoveryPlan",
    "RecoveryResult",
    "Repair",
    "ResultExists",
    "ResumeMode",
    "Risk",
    "ScanReport",
    "SchemaTooNew",
    "SchemaViolation",
    "Session",
    "SessionExists",
    "SessionHasForks",
    "SessionNotFound",
    "SessionTotals",
    "StaleReason",
    "StepOutcome",
    "StopReason",
    "Submission",
    "SubmissionExists",
    "SubmissionInfo",
    "SubmissionNotFound",
    "SubmissionState",
    "Tool",
    "ToolContext",
    "ToolNodeNotFound",
    "ToolRegistry",
    "ToolStats",
    "Turn",
    "TurnEndReason",
    "TurnHeld",
    "TurnState",
    "UnansweredCalls",
    "UnknownToolCall",
    "UnregisteredTool",
    "Unsafe",
    "WriteOutcome",
    "WrongLoop",
    "open",
]


def __getattr__(name: str) -> object:
    # ``journal.aio`` (the async face) is imported when first used: the sync API and the command
    # line do not pay for asyncio.
    if name == "aio":
        import journal.aio

        return journal.aio
    raise AttributeError(f"module 'journal' has no attribute {name!r}")
