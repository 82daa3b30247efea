"""The library's errors: one root, one subclass per decision a caller makes.

Every error keeps its structured arguments as attributes, builds its own message and pickles
(the arguments are passed to ``Exception.__init__`` so ``__reduce__`` can rebuild it).
"""

from __future__ import annotations

from journal.escape import escape
from journal.model import WriteOutcome

_SHOWN = 120  # characters of one id a message quotes; the error's attribute keeps all of it
_LISTED = 5  # ids of a list a message names; it counts the rest


def _q(value: object) -> str:
    """A value as a message quotes it: ``repr`` (so control and bidi characters show escaped,
    G14) and cut in the middle beyond ``_SHOWN`` characters (an id may be long and is untrusted)."""
    text = repr(value)
    if len(text) <= _SHOWN:
        return text
    half = (_SHOWN - 1) // 2
    return f"{text[:half]}…{text[-half:]}"


def _p(path: str) -> str:
    """A path (or a redacted DSN) as a message shows it: escaped (G14) and cut like an id."""
    text = escape(path)
    if len(text) <= _SHOWN:
        return text
    half = (_SHOWN - 1) // 2
    return f"{text[:half]}…{text[-half:]}"


def _is_dsn_text(path: str) -> bool:
    """Whether a journal's name is a PostgreSQL DSN (as ``journal.open`` takes one), not a file."""
    from journal.store.target import is_dsn  # (here: the store's package imports this module)

    return is_dsn(path)


def _listed(values: tuple[object, ...]) -> str:
    """The first ``_LISTED`` of ``values`` quoted, and how many more there are."""
    shown = ", ".join(_q(v) for v in values[:_LISTED])
    return shown if len(values) <= _LISTED else f"{shown} and {len(values) - _LISTED} more"


class JournalError(Exception):
    """The root of every error the library raises."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)

    def __str__(self) -> str:
        return self.message()

    def message(self) -> str:
        return " ".join(str(a) for a in self.args) or type(self).__name__


class NotAJournal(JournalError):
    """The file exists but is not a journal (another SQLite database, or not SQLite at all)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason

    def message(self) -> str:
        kept = "database" if _is_dsn_text(self.path) else "file"
        return f"{_p(self.path)} is not a journal: {self.reason} (the {kept} was left untouched)"


class SchemaTooNew(JournalError):
    """The file was written by a newer version of the library; it is never downgraded."""

    def __init__(self, path: str, version: int, supported: int) -> None:
        super().__init__(path, version, supported)
        self.path, self.version, self.supported = path, version, supported

    def message(self) -> str:
        return (
            f"{_p(self.path)} has schema version {self.version}; this library reads up to "
            f"{self.supported} (upgrade agent-journal; the {'database' if _is_dsn_text(self.path) else 'file'} "
            "was left untouched)"
        )


class JournalBusy(JournalError):
    """Another connection held the write lock for longer than the busy timeout."""

    def __init__(self, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.timeout_ms = timeout_ms

    def message(self) -> str:
        return f"the journal stayed locked by another writer for more than {self.timeout_ms} ms"


class JournalIOError(JournalError, OSError):
    """The disk failed under a write.

    ``outcome`` (a ``WriteOutcome``, equal to its string) says what is known of the write:
    ``"absent"`` (known not written), ``"present"`` (known written) or ``"unknown"`` (a COMMIT
    raised; re-read before retrying).
    """

    def __init__(self, operation: str, outcome: str | WriteOutcome, detail: str = "") -> None:
        super().__init__(operation, str(outcome), detail)
        known = outcome in WriteOutcome._value2member_map_
        self.operation, self.detail = operation, detail
        self.outcome: WriteOutcome | str = WriteOutcome(outcome) if known else outcome

    def message(self) -> str:
        tail = f": {self.detail}" if self.detail else ""
        return f"I/O error during {self.operation} (write {self.outcome}){tail}"


class DiskFull(JournalIOError):
    """The disk (or the file's size limit) is full."""


class CorruptJournal(JournalError):
    """SQLite reports the file as damaged."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(path, detail)
        self.path, self.detail = path, detail

    def message(self) -> str:
        return f"{_p(self.path)} is damaged: {self.detail}"


class JournalClosed(JournalError):
    """The journal was used after ``close()`` (or, an ``AsyncJournal``, before it was opened:
    ``opened`` is then False)."""

    def __init__(self, *, opened: bool = True) -> None:
        super().__init__()
        self.opened = opened

    def message(self) -> str:
        if not self.opened:
            return "the journal is not open yet: await journal.aio.open(...), or use it in `async with`"
        return "the journal is closed"


class WrongLoop(JournalError, RuntimeError):
    """An ``AsyncJournal`` (or one of its handles) was used outside the event loop that opened
    it: refused before anything was queued, so nothing was written. From another thread, run
    the call on the journal's own loop (``asyncio.run_coroutine_threadsafe``)."""

    def __init__(self, operation: str, where: str) -> None:
        super().__init__(operation, where)
        self.operation, self.where = operation, where

    def message(self) -> str:
        return (
            f"{self.operation} was refused: an AsyncJournal belongs to the event loop that opened it, and this "
            f"call came from {self.where} (nothing was queued or written)"
        )


class InvalidArgument(JournalError, ValueError):
    """An argument other than event data is out of its domain."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(name, problem)
        self.name, self.problem = name, problem

    def message(self) -> str:
        return f"{self.name}: {self.problem}"


class InvalidEvent(JournalError, ValueError):
    """An event was refused before anything was written; ``field`` names the problem's place."""

    def __init__(self, field: str, problem: str, index: int | None = None) -> None:
        super().__init__(field, problem, index)
        self.field, self.problem, self.index = field, problem, index

    def message(self) -> str:
        where = f"item {self.index}: " if self.index is not None else ""
        return f"invalid event: {where}{self.field}: {self.problem}"


class SessionNotFound(JournalError, LookupError):
    """No session has this id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.session_id = session_id

    def message(self) -> str:
        return f"no session {_q(self.session_id)}"


class SessionExists(JournalError):
    """A session with this id already exists."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.session_id = session_id

    def message(self) -> str:
        return f"a session {_q(self.session_id)} already exists"


class InvalidBoundary(JournalError, ValueError):
    """A fork boundary that is neither a non-negative integer nor ``"last"``."""

    def __init__(self, boundary: object) -> None:
        super().__init__(boundary)
        self.boundary = boundary

    def message(self) -> str:
        return f"invalid fork boundary {_q(self.boundary)}: give a seq (an int >= 0) or 'last'"


class BoundaryOutOfRange(JournalError, IndexError):
    """A fork boundary past the end of the session."""

    def __init__(self, boundary: int, count: int) -> None:
        super().__init__(boundary, count)
        self.boundary, self.count = boundary, count

    def message(self) -> str:
        return f"fork boundary {self.boundary} is past the end (the session has {self.count} events)"


class OpenTurnError(JournalError):
    """A turn is open where none may be: a fork boundary inside a turn, or a nested turn."""

    def __init__(self, seq: int, detail: str = "") -> None:
        super().__init__(seq, detail)
        self.seq, self.detail = seq, detail

    def message(self) -> str:
        tail = f": {self.detail}" if self.detail else ""
        return f"the turn opened at seq {self.seq} is still open{tail}"


class NoOpenTurn(JournalError):
    """A step, a dispatch or a turn end was asked for while no turn (or step) is open."""

    def __init__(self, session_id: str, what: str) -> None:
        super().__init__(session_id, what)
        self.session_id, self.what = session_id, what

    def message(self) -> str:
        return f"session {_q(self.session_id)}: {self.what}"


class LeaseLost(JournalError):
    """The caller's attempt was taken over (or its turn closed); nothing was written."""

    def __init__(self, session_id: str, attempt: int, detail: str = "") -> None:
        super().__init__(session_id, attempt, detail)
        self.session_id, self.attempt, self.detail = session_id, attempt, detail

    def message(self) -> str:
        tail = f": {self.detail}" if self.detail else ""
        return f"session {_q(self.session_id)}: attempt {self.attempt} no longer holds the turn{tail}"


class UnknownToolCall(JournalError, LookupError):
    """A dispatch or result names a call that no assistant message of the session requested."""

    def __init__(self, session_id: str, call_id: str) -> None:
        super().__init__(session_id, call_id)
        self.session_id, self.call_id = session_id, call_id

    def message(self) -> str:
        return f"session {_q(self.session_id)}: no assistant message requested tool call {_q(self.call_id)}"


class AlreadyDispatched(JournalError):
    """The tool call was dispatched before; it must not run twice."""

    def __init__(self, session_id: str, call_id: str, seq: int) -> None:
        super().__init__(session_id, call_id, seq)
        self.session_id, self.call_id, self.seq = session_id, call_id, seq

    def message(self) -> str:
        return (
            f"session {_q(self.session_id)}: tool call {_q(self.call_id)} was already dispatched "
            f"(seq {self.seq}); it must not run twice"
        )


class ApprovedAfterDispatch(AlreadyDispatched):
    """A tool approved by a human was dispatched before, by the run that asked for the approval:
    its body asked for it (pydantic-ai's ``ApprovalRequired`` raised inside the tool) after the
    dispatch was recorded. What that body did before it asked is unknown, so it does not run
    again; declare the tool with ``requires_approval=True`` (asked before it is dispatched)."""

    def __init__(self, session_id: str, call_id: str, seq: int, tool: str) -> None:
        JournalError.__init__(self, session_id, call_id, seq, tool)
        self.session_id, self.call_id, self.seq, self.tool = session_id, call_id, seq, tool

    def message(self) -> str:
        return (
            f"session {_q(self.session_id)}: tool call {_q(self.call_id)} of {_q(self.tool)} was dispatched "
            f"(seq {self.seq}) before its body asked for approval, so it does not run again; "
            "declare the tool with requires_approval=True to be asked before it is dispatched"
        )


class ResultExists(JournalError):
    """A plain append of a second result for a call; use ``put_result`` to keep it as evidence."""

    def __init__(self, session_id: str, call_id: str) -> None:
        super().__init__(session_id, call_id)
        self.session_id, self.call_id = session_id, call_id

    def message(self) -> str:
        return (
            f"session {_q(self.session_id)}: tool call {_q(self.call_id)} already has a result "
            "(put_result keeps a later one as tool_result_late)"
        )


class AnsweredBeforeApproval(ResultExists):
    """A tool a human approved already has a result: a recovery took the run that paused for the
    approval for a crash (its process ended or was killed) and answered the call ("did not
    run"), so the approved resume does not run it. Start a new run of the session: its items
    show the call answered, and the model may ask again."""

    def message(self) -> str:
        return (
            f"session {_q(self.session_id)}: tool call {_q(self.call_id)} was approved after a recovery answered it: "
            "the run that paused for the approval was taken for a crash (its process ended), so the approved call "
            "does not run; start a new run on the session (its items show the call answered)"
        )


class SubmissionNotFound(JournalError, LookupError):
    """No submission has this id."""

    def __init__(self, submission_id: str) -> None:
        super().__init__(submission_id)
        self.submission_id = submission_id

    def message(self) -> str:
        return f"no submission {_q(self.submission_id)}"


class SubmissionExists(JournalError):
    """``submit`` was given the id of a submission queued before (say, a retried submit that
    had landed); nothing was written."""

    def __init__(self, submission_id: str) -> None:
        super().__init__(submission_id)
        self.submission_id = submission_id

    def message(self) -> str:
        return f"a submission {_q(self.submission_id)} already exists (nothing was written)"


class UnregisteredTool(JournalError, LookupError):
    """A tool name that the registry does not know."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def message(self) -> str:
        return f"no tool {_q(self.name)} is registered"


class MissingEffectClass(JournalError, TypeError):
    """A tool registered without a declared effect class."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def message(self) -> str:
        return (
            f"tool {_q(self.name)} declares no effect class: pass effects=Idempotent(key=...), "
            "Queryable(lookup=...) or Unsafe()"
        )


class NotIndeterminate(JournalError):
    """An operator resolution for a call that is not awaiting one."""

    def __init__(self, session_id: str, call_id: str) -> None:
        super().__init__(session_id, call_id)
        self.session_id, self.call_id = session_id, call_id

    def message(self) -> str:
        return f"session {_q(self.session_id)}: tool call {_q(self.call_id)} is not awaiting an operator"


class SchemaViolation(JournalError):
    """The schema refused a write that the library's own checks let through (a bug, or raw SQL)."""

    def __init__(self, operation: str, detail: str) -> None:
        super().__init__(operation, detail)
        self.operation, self.detail = operation, detail

    def message(self) -> str:
        return f"the schema refused {self.operation}: {self.detail}"


class InvalidRange(JournalError, ValueError):
    """A compaction range that is reversed or outside the transcript's message positions."""

    def __init__(self, start: object, stop: object, count: int) -> None:
        super().__init__(start, stop, count)
        self.start, self.stop, self.count = start, stop, count

    def message(self) -> str:
        return (
            f"invalid message range {_q(self.start)}..{_q(self.stop)}: the transcript has {self.count} "
            "messages (give 0 <= start <= stop < count)"
        )


class SessionHasForks(JournalError):
    """A purge of a session that forks still read through (ask for ``copy_forks=True``)."""

    def __init__(self, session_id: str, fork_ids: tuple[str, ...]) -> None:
        super().__init__(session_id, tuple(fork_ids))
        self.session_id, self.fork_ids = session_id, tuple(fork_ids)

    def message(self) -> str:
        forks = _listed(self.fork_ids)
        return (
            f"session {_q(self.session_id)} is read through by its forks {forks}; purge it with "
            "copy_forks=True to give them their own copy first"
        )


class UnansweredCalls(JournalError):
    """A provider transcript was asked for while tool calls still lack a result (recover first)."""

    def __init__(self, session_id: str, call_ids: tuple[str, ...]) -> None:
        super().__init__(session_id, tuple(call_ids))
        self.session_id, self.call_ids = session_id, tuple(call_ids)

    def message(self) -> str:
        calls = _listed(self.call_ids)
        return (
            f"session {_q(self.session_id)}: tool calls {calls} have no result; a provider would refuse "
            "this transcript (run recover() first, or use provider_view() to see them)"
        )


class CountMismatch(JournalError):
    """A conditional append (``expected_count=``) found the session holding another number of
    events: someone appended first. Nothing was written."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        super().__init__(session_id, expected, actual)
        self.session_id, self.expected, self.actual = session_id, expected, actual

    def message(self) -> str:
        return (
            f"session {_q(self.session_id)} holds {self.actual} events, not the {self.expected} expected "
            "(another writer appended first; nothing was written)"
        )


class TurnHeld(JournalError):
    """A turn could not be taken over: the process that opened it may still be driving it."""

    def __init__(self, session_id: str, start_seq: int, owner: str | None, detail: str) -> None:
        super().__init__(session_id, start_seq, owner, detail)
        self.session_id, self.start_seq, self.owner, self.detail = session_id, start_seq, owner, detail

    def message(self) -> str:
        held = f"the turn at seq {self.start_seq} is held by {_q(self.owner)}"
        return f"session {_q(self.session_id)}: {held}: {self.detail}"


class ToolNodeNotFound(JournalError, LookupError):
    """The LangGraph adapter's ``repair`` could not tell which node of the graph runs the tools:
    none is a ``ToolNode`` or several are (``candidates``), or ``named`` is not a node. Nothing
    was written to the graph's state; pass ``tools_node=`` naming one of ``nodes``."""

    def __init__(self, nodes: tuple[str, ...], candidates: tuple[str, ...], named: str | None = None) -> None:
        super().__init__(tuple(nodes), tuple(candidates), named)
        self.nodes, self.candidates, self.named = tuple(nodes), tuple(candidates), named

    def message(self) -> str:
        nodes = _listed(self.nodes)
        if self.named is not None:
            return f"the graph has no node {_q(self.named)} (its nodes: {nodes})"
        if self.candidates:
            found = _listed(self.candidates)
            return f"the graph has several tool nodes ({found}): pass tools_node= naming the one to repair as"
        return f"no node of the graph is a ToolNode (its nodes: {nodes}): pass tools_node= naming the tool node"
