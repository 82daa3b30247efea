"""``Journal``: the public handle on one journal file, and ``open()``."""

from __future__ import annotations

import enum
import functools
import os
import types
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from journal.audit import Audit
from journal.claims import Claims
from journal.codec import DEFAULT_MAX_EVENT_BYTES, Codec
from journal.effects import Effects
from journal.errors import InvalidArgument, JournalError
from journal.log import Log
from journal.model import Durability
from journal.preview import Previews
from journal.purge import Purge
from journal.queue import Queue
from journal.reads import Reads
from journal.reconcile import Reconciler
from journal.recovery import Recovery
from journal.results import Results
from journal.sessions import Sessions
from journal.store import DEFAULT_BUSY_TIMEOUT_MS, SqliteStore, Store
from journal.store.groupcommit import GroupCommit
from journal.store.target import is_dsn, malformed_dsn, redact
from journal.streams import Streams
from journal.transcript import Transcript
from journal.turns import Turns

P = ParamSpec("P")
R = TypeVar("R")


class Kind(enum.Enum):
    """How a public method of ``Journal`` runs, declared once beside it (DESIGN §12, §13).

    The async face (``journal.aio``) reads it to run each twin: a ``READ`` on a reader
    connection, a ``WRITE`` in a batch of the writer thread (a savepoint of the round's one
    transaction), a ``SYNCED`` write likewise but its round's commit survives power loss even
    under ``durability="normal"`` (G6), and an ``ALONE`` call (it commits in steps of its own
    and may run tools or callbacks) alone between the writer's batches."""

    READ = "read"
    WRITE = "write"
    SYNCED = "synced"
    ALONE = "alone"


READ, WRITE, SYNCED, ALONE = Kind.READ, Kind.WRITE, Kind.SYNCED, Kind.ALONE
_KIND = "__journal_kind__"  # where a method written on ``Journal`` itself keeps its kind


class _Delegate:
    """A public method of ``Journal`` that is a part's method: ``j.append`` is ``j._log.append``.

    It is bound once per journal, on first use, so the facade adds no call to the hot path."""

    def __init__(self, part: str, method: Callable[..., Any], kind: Kind) -> None:
        functools.update_wrapper(self, method)
        self._part = part
        self._method = method.__name__
        self.kind = kind

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = self.__name__ = name
        self.__qualname__ = f"{owner.__name__}.{name}"

    def __get__(self, journal: Journal | None, owner: type | None = None) -> Any:
        if journal is None:
            return self
        bound = getattr(journal.__dict__[self._part], self._method)
        journal.__dict__[self._name] = bound
        return bound

    def __call__(self, journal: Journal, *args: Any, **kwargs: Any) -> Any:
        """``Journal.append(j, ...)``, called through the class."""
        return self.__get__(journal)(*args, **kwargs)


def _delegate(part: str, method: Callable[Concatenate[Any, P], R], kind: Kind) -> Callable[Concatenate[Journal, P], R]:
    return _Delegate(part, method, kind)  # type: ignore[return-value]  # a descriptor typed as the method it binds


def _declared(kind: Kind) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """The kind of a public method written on ``Journal`` itself (not a part's)."""

    def declare(method: Callable[P, R]) -> Callable[P, R]:
        setattr(method, _KIND, kind)
        return method

    return declare


class Journal:
    """An open journal file. Use it as a context manager, or call ``close()``.

    One ``Journal`` may be shared by the threads of a process; each public write is one
    ``BEGIN IMMEDIATE`` transaction (a lone append: one autocommit ``INSERT``), durable when the
    call returns (G1). It is a facade over its parts, each built here with the parts it uses.
    """

    def __init__(self, store: Store, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._store = store
        # The journal's limits: every part encodes events through this one codec.
        self._codec = Codec(max_event_bytes)
        self._appends = GroupCommit(store, "append")
        self._log = Log(store, self._codec, self._appends)
        self._sessions = Sessions(store)
        self._reads = Reads(store)
        self._streams = Streams(store)
        self._queue = Queue(store, self._log)
        self._turns = Turns(self, store, self._log, self._queue)
        self._claims = Claims(self, store, self._log, self._queue, self._turns)
        self._results = Results(self, store, self._log)
        self._effects = Effects(store, self._log, self._results)
        self._recovery = Recovery(store, self._log, self._queue, self._effects)
        self._reconciler = Reconciler(store, self._log, self._turns, self._queue, self._recovery, self._effects)
        self._transcript = Transcript(store, self._log)
        self._purge = Purge(
            store, self._log, (self._turns, self._streams, self._results, self._effects, self._queue, self._transcript)
        )
        self._audit = Audit(store, self._sessions)
        self._previews = Previews(store)

    # -- sessions and the log (journal.log) ----------------------------------------------------
    create_session = _delegate("_log", Log.create_session, WRITE)
    session = _delegate("_sessions", Sessions.session, READ)  # looking up and listing (journal.sessions)
    sessions = _delegate("_sessions", Sessions.sessions, READ)
    session_totals = _delegate("_sessions", Sessions.session_totals, READ)
    append = _delegate("_log", Log.append, WRITE)
    append_many = _delegate("_log", Log.append_many, WRITE)
    set_state = _delegate("_log", Log.set_state, WRITE)
    state = _delegate("_reads", Reads.state, READ)  # reads through the fork chain (journal.reads)
    events = _delegate("_reads", Reads.events, READ)
    count = _delegate("_reads", Reads.count, READ)
    fork = _delegate("_log", Log.fork, WRITE)
    previews = _delegate("_previews", Previews.previews, READ)  # pages of events cut in SQL (journal.preview)
    _change_token = _delegate("_previews", Previews.change_token, READ)  # for journal.serve (live following)
    _import_sessions = _delegate("_log", Log.import_sessions, WRITE)  # for journal.transfer
    _state_history = _delegate("_reads", Reads.state_history, READ)  # for journal.transfer

    # -- turns, steps and streams (journal.turns) ------------------------------------------------
    turn_start = _delegate("_turns", Turns.turn_start, WRITE)
    turn = _delegate("_turns", Turns.turn, WRITE)
    take_over = _delegate("_turns", Turns.take_over, WRITE)
    step_start = _delegate("_turns", Turns.step_start, WRITE)
    step_end = _delegate("_turns", Turns.step_end, WRITE)
    provider_started = _delegate("_turns", Turns.provider_started, WRITE)
    record_assistant = _delegate("_turns", Turns.record_assistant, WRITE)
    turn_end = _delegate("_turns", Turns.turn_end, WRITE)
    save_chunk = _delegate("_streams", Streams.save_chunk, WRITE)  # a streamed answer's segments (journal.streams)
    stream_chunks = _delegate("_streams", Streams.stream_chunks, READ)
    turn_state = _delegate("_turns", Turns.turn_state, READ)

    # -- dispatch and results (journal.results) --------------------------------------------------
    dispatch = _delegate("_results", Results.dispatch, SYNCED)
    put_result = _delegate("_results", Results.put_result, WRITE)
    _requested_call = _delegate("_results", Results.requested_call, READ)
    tool_stats = _delegate("_results", Results.tool_stats, READ)

    # -- the input queue (journal.queue, journal.claims) -----------------------------------------
    submit = _delegate("_queue", Queue.submit, WRITE)
    submission = _delegate("_queue", Queue.submission, READ)
    submissions = _delegate("_queue", Queue.submissions, READ)
    renew = _delegate("_queue", Queue.renew, WRITE)
    requeue = _delegate("_queue", Queue.requeue, WRITE)
    claim = _delegate("_claims", Claims.claim, WRITE)
    fail = _delegate("_claims", Claims.fail, WRITE)

    # -- restart: scan, recovery, the reconciler (journal.recovery, journal.reconcile) -----------
    scan = _delegate("_recovery", Recovery.scan, READ)
    open_turns = _delegate("_recovery", Recovery.open_turns, READ)
    interrupted = _delegate("_recovery", Recovery.interrupted, READ)
    plan = _delegate("_recovery", Recovery.plan, READ)
    plan_recovery = _delegate("_recovery", Recovery.plan_recovery, READ)
    recover = _delegate("_recovery", Recovery.recover, ALONE)
    reconcile = _delegate("_reconciler", Reconciler.reconcile, ALONE)

    # -- effect classes and the operator path (journal.effects) ----------------------------------
    recover_effects = _delegate("_effects", Effects.recover_effects, ALONE)
    indeterminate = _delegate("_effects", Effects.indeterminate, READ)
    resolve = _delegate("_effects", Effects.resolve, WRITE)

    # -- the messages view (journal.transcript) --------------------------------------------------
    messages = _delegate("_transcript", Transcript.messages, READ)
    provider_view = _delegate("_transcript", Transcript.provider_view, READ)
    compact = _delegate("_transcript", Transcript.compact, WRITE)
    retract = _delegate("_transcript", Transcript.retract, WRITE)

    # -- erasing, checking (journal.purge, journal.audit) -----------------------------------------
    purge = _delegate("_purge", Purge.purge, ALONE)
    check = _delegate("_audit", Audit.check, READ)
    integrity_check = _delegate("_audit", Audit.integrity_check, READ)

    # -- the file ----------------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._store.path

    @property
    def durability(self) -> Durability:
        return self._store.durability

    @property
    def readonly(self) -> bool:
        """Whether this journal was opened read-only (every write is refused)."""
        return self._store.readonly

    @_declared(READ)
    def size_bytes(self) -> int:
        """What the journal takes on disk: the file and its WAL, or on a server its tables and
        indexes."""
        return self._store.size_bytes()

    @_declared(ALONE)
    def checkpoint(self) -> None:
        """Copy the write-ahead log into the main file now (bounds what ``normal`` can lose)."""
        self._store.checkpoint()

    def close(self) -> None:
        """Close the file. Everything already returned is on disk; closing adds nothing to that."""
        self._store.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except JournalError:
            pass  # the error already on its way out says more than a failed close after it

    def __repr__(self) -> str:
        state = "closed" if self._store.closed else self.durability.value
        return f"<Journal {self.path!r} {state}>"


def _kinds() -> Mapping[str, Kind]:
    kinds: dict[str, Kind] = {}
    for name, value in vars(Journal).items():
        kind = value.kind if isinstance(value, _Delegate) else getattr(value, _KIND, None)
        if kind is not None and not name.startswith("_"):
            kinds[name] = kind
    return types.MappingProxyType(kinds)


# Every public method of ``Journal`` and its kind, read from the declarations above: the one
# table the async face and its tests read (``path``, ``durability``, ``readonly`` and ``close`` are the file's).
KINDS: Mapping[str, Kind] = _kinds()


def open(
    path: str | os.PathLike[str],
    *,
    durability: str | Durability = "full",
    readonly: bool = False,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    checkpoint_pages: int | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    vfs: str | None = None,
) -> Journal:
    """Open (or create) the journal at ``path``: a file, or a PostgreSQL database named by a
    ``postgresql://`` DSN or libpq's keyword form (``host=... dbname=...``; DESIGN §16; the
    ``postgres`` extra installs its driver). A text that starts like a DSN but is not one is
    refused (``InvalidArgument``), never taken for a file; ``Journal.path`` and every message show
    a DSN without its password.

    ``durability="full"`` (the default) makes every returned write survive power loss;
    ``"normal"`` survives a process crash, and a power cut may drop the commits since the last
    checkpoint (bound it with ``checkpoint_pages``). A file that is not a journal raises
    ``NotAJournal`` and one written by a newer version ``SchemaTooNew``; neither is touched.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument("path", f"must be a str or os.PathLike, not {type(path).__name__}")
    path = os.fspath(path)
    if not isinstance(path, str) or not path or "\0" in path:
        raise InvalidArgument("path", f"must be a non-empty text path without NUL characters, not {redact(path)!r}")
    problem = malformed_dsn(path)
    if problem is not None:
        raise InvalidArgument("path", problem)
    try:
        level = Durability(durability)
    except ValueError:
        raise InvalidArgument("durability", f'must be "full" or "normal", not {durability!r}') from None
    for name, value in (("busy_timeout_ms", busy_timeout_ms), ("max_event_bytes", max_event_bytes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgument(name, f"must be an int >= 0, not {value!r}")
    if checkpoint_pages is not None and (not isinstance(checkpoint_pages, int) or checkpoint_pages < 0):
        raise InvalidArgument("checkpoint_pages", f"must be an int >= 0, not {checkpoint_pages!r}")
    store: Store
    if is_dsn(path):
        if vfs is not None or checkpoint_pages is not None:
            name = "vfs" if vfs is not None else "checkpoint_pages"
            raise InvalidArgument(name, "applies to an SQLite file, not a PostgreSQL database")
        try:
            from journal.store.postgres import PostgresStore  # psycopg is needed only here
        except ImportError as exc:
            raise ImportError(
                "a postgresql:// journal needs psycopg 3: install it with "
                " python -m pip install 'agent-journal[postgres]'"
            ) from exc

        store = PostgresStore(path, durability=level, readonly=readonly, busy_timeout_ms=busy_timeout_ms)
        return Journal(store, max_event_bytes=max_event_bytes)
    store = SqliteStore(
        path,
        durability=level,
        readonly=readonly,
        vfs=vfs,
        busy_timeout_ms=busy_timeout_ms,
        checkpoint_pages=checkpoint_pages,
    )
    return Journal(store, max_event_bytes=max_event_bytes)
