"""The async face (DESIGN §13): ``journal.aio.open(path, ...)`` gives an ``AsyncJournal``.

Every public method of ``Journal`` has an awaitable twin here with the same name, arguments,
return values and errors; context managers become ``async with`` (``aj.turn(s)``,
``turn.step()``, ``turn.dispatch(call_id)``, a claim), and ``follow`` is an async iterator.

How it runs. One **writer thread** owns the write connection. A write awaited on the loop is
queued; the writer takes everything queued, runs each write inside ONE transaction (each in a
savepoint of its own, so a refused write fails alone: G2), commits once, and wakes each waiting
coroutine with its own result or error. A write has returned only when that commit has (G1).
Long maintenance calls (recover, reconcile, effect recovery, purge, checkpoint) run alone, with
their own transactions, between batches. Reads run on reader connections in a small thread
pool. The loop thread never waits on the database: it only queues and is woken.

One loop. An ``AsyncJournal`` belongs to the event loop that opened it. Any call on it or on
its handles (a turn, a dispatch, a claim, ``follow``, ``close``) made from another loop, another
thread's loop or no loop is refused with ``WrongLoop`` before anything is queued: nothing is
written, so the caller may retry it on the right loop (from another thread:
``asyncio.run_coroutine_threadsafe(aj.append(...), loop)``).

No error for a committed write. A write that raises was not written, unless the error says
otherwise: when a round's COMMIT fails, each write of it raises its own ``JournalIOError``
whose ``outcome`` is re-read to decide (``present`` if the round's events are in the file,
else ``unknown``: DESIGN §4), and an error from the store that is not the library's is given
the same way, never raw.

Cancellation. A write still queued when its task is cancelled is withdrawn: nothing is written.
One the writer has taken runs to its end whatever happens to the task, which sees
``CancelledError`` once that end is known (committed or failed): a read after it shows which.
``close()`` drains: every write queued before it is committed or fails with a typed error, and
later ones raise ``JournalClosed`` (nothing of them is written).

Tools run on the loop, never inside a transaction::

    async with journal.aio.open("agent.db") as aj:
        async with aj.turn(session) as turn:
            async with turn.step():
                await turn.assistant("", tool_calls=[call])
                async with turn.dispatch(call["id"]) as dispatched:   # durable before the tool
                    await dispatched.result(await tool(**dispatched.arguments))

Callbacks given to ``recover``, ``recover_effects`` and ``reconcile`` (a tool registry, an
operator callback, ``on_progress``) are called in the writer thread, as the sync calls call
them in the caller's thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from journal import engine
from journal.claims import Claim
from journal.engine import Journal
from journal.errors import (
    InvalidArgument,
    JournalBusy,
    JournalClosed,
    JournalError,
    JournalIOError,
    LeaseLost,
    NoOpenTurn,
    SchemaViolation,
    WrongLoop,
)
from journal.model import Event, WriteOutcome
from journal.queue import DEFAULT_LEASE_MS
from journal.results import Dispatch, PutResult
from journal.store.target import redact
from journal.turns import Turn

__all__ = ["AsyncClaim", "AsyncDispatch", "AsyncJournal", "AsyncTurn", "open"]

# The writer's batch: its crash points are writer.before_commit and writer.after_commit.
WRITER = "writer"
# At most this many writes share a commit (the rest ride the next one).
MAX_BATCH = 1024
READERS = 2

# The twins, by how they run. Writes share the writer's batches; the calls that commit in
# steps of their own (and may run tools or callbacks) run alone between batches; reads run on
# the reader connections.
_WRITES = (
    "create_session", "append", "append_many", "fork", "turn_start", "step_start", "step_end",
    "provider_started", "record_assistant", "turn_end", "save_chunk", "dispatch", "put_result",
    "submit", "renew", "requeue", "claim", "fail", "compact", "resolve", "set_state", "retract",
)  # fmt: skip
_ALONE = ("recover", "recover_effects", "reconcile", "purge", "checkpoint")
_READS = (
    "session", "sessions", "session_totals", "events", "count", "stream_chunks", "turn_state",
    "submission", "submissions", "scan", "open_turns", "interrupted", "plan", "plan_recovery",
    "indeterminate", "messages", "provider_view", "check", "integrity_check", "state", "size_bytes",
    "previews",
)  # fmt: skip
# Writes whose commit must survive power loss even under durability="normal" (G6).
_SYNCED = frozenset({"dispatch"})


class _Item:
    """One queued write: the call to make on the writer's ``Journal``, then its fate."""

    __slots__ = ("alone", "call", "error", "finished", "future", "loop", "operation", "result", "synced", "taken")

    def __init__(
        self,
        call: Callable[[Journal], Any],
        loop: asyncio.AbstractEventLoop,
        *,
        operation: str,
        alone: bool,
        synced: bool,
    ) -> None:
        self.call = call
        self.operation = operation  # the call's name, for the error a failed round gives it
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()  # the awaiting task's
        self.finished: asyncio.Future[None] = loop.create_future()  # set once its fate is known
        self.alone = alone
        self.synced = synced
        self.taken = False  # handed to the writer: it runs to its end whatever the task does
        self.result: Any = None
        self.error: BaseException | None = None


class _Writer:
    """The thread that owns the write connection and commits what is queued, in batches."""

    def __init__(self, opener: Callable[[], Journal]) -> None:
        self._opener = opener
        self._cond = threading.Condition(threading.Lock())
        self._queue: collections.deque[_Item] = collections.deque()
        self._closing = False
        self._finished = False  # the thread has ended
        self.journal: Journal | None = None
        self.commits = 0  # batches committed (for the benchmarks: fsyncs under "full")
        self._started: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        self._stopped: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        self._on_commit: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)

    def start(self, loop: asyncio.AbstractEventLoop, on_commit: Callable[[], None]) -> asyncio.Future[None]:
        future = loop.create_future()
        self._started = (loop, future)
        self._on_commit = on_commit
        self._thread.start()
        return future

    def put(self, item: _Item) -> None:
        with self._cond:
            if self._closing:
                raise JournalClosed()
            self._queue.append(item)
            self._cond.notify()

    def withdraw(self, item: _Item) -> bool:
        """Take a write back if the writer has not taken it yet; whether it was."""
        with self._cond:
            if item.taken:
                return False
            self._queue.remove(item)
            return True

    def stop(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """Refuse new writes, commit the queued ones, close the connection; done when it is."""
        future = loop.create_future()
        with self._cond:
            if self._finished:  # the thread is gone (its journal never opened): nothing to wait for
                future.set_result(None)
                return future
            self._stopped = (loop, future)
            self._closing = True
            self._cond.notify()
        return future

    # -- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        assert self._started is not None
        try:
            self.journal = self._opener()
        except BaseException as exc:
            self._fail_queued()  # writes queued while it opened never ran: nothing was written
            _call_soon(self._started[0], _settle_future, self._started[1], None, exc)
            self._finish(None)
            return
        _call_soon(self._started[0], _settle_future, self._started[1], None, None)
        error: BaseException | None = None
        try:
            while True:
                batch = self._take()
                if not batch:
                    break
                if batch[0].alone:
                    self._run_alone(batch[0])
                else:
                    self._run_batch(batch)
                self._wake(batch)
        finally:
            try:
                self.journal.close()
            except BaseException as exc:
                error = exc
            self._fail_queued()  # only if the loop above died: fail them rather than drop them
            self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        """The thread ends: settle ``close()``'s wait, now or (``stop`` after it) at once."""
        with self._cond:
            self._finished = True
            stopped = self._stopped
        if stopped is not None:
            _call_soon(stopped[0], _settle_future, stopped[1], None, error)

    def _fail_queued(self) -> None:
        """Refuse new writes, and fail every queued one with ``JournalClosed`` (none of them ran)."""
        with self._cond:
            self._closing = True
            left = list(self._queue)
            self._queue.clear()
            for item in left:
                item.taken = True  # its fate is decided here: a cancelled task waits for it
        for item in left:
            item.error = JournalClosed()
        self._wake(left)

    def _take(self) -> list[_Item]:
        """The next round: a call that runs alone, or every queued write up to ``MAX_BATCH``;
        empty once closing with nothing left."""
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            if not self._queue:
                return []
            first = self._queue.popleft()
            first.taken = True
            batch = [first]
            if not first.alone:
                while self._queue and not self._queue[0].alone and len(batch) < MAX_BATCH:
                    item = self._queue.popleft()
                    item.taken = True
                    batch.append(item)
            return batch

    def _run_alone(self, item: _Item) -> None:
        assert self.journal is not None
        try:
            item.result = item.call(self.journal)
        except BaseException as exc:
            item.error = exc

    def _run_batch(self, batch: list[_Item]) -> None:
        journal = self.journal
        assert journal is not None
        store = journal._store
        ran = 0  # the writes that ran (a broken round stops early: the rest never did)
        committing = False  # past the writes: an error now is the COMMIT's (or the store's)
        try:
            with store.batch(WRITER, synced=any(item.synced for item in batch)) as shared:
                for item in batch:
                    ran += 1
                    try:
                        item.result = item.call(journal)
                    except BaseException as exc:
                        item.result, item.error = None, exc
                    if shared.broken:
                        break  # SQLite rolled everything back: the batch fails as a whole
                committing = True
            self.commits += 1
        except BaseException as exc:
            kept = [item for item in batch[:ran] if item.error is None]
            outcome = _round_outcome(journal, exc, kept) if committing else WriteOutcome.ABSENT
            for item in batch:
                if item.error is None:
                    gone = outcome if item in kept else WriteOutcome.ABSENT
                    item.result, item.error = None, _member_error(exc, item.operation, gone)

    def _wake(self, items: list[_Item]) -> None:
        """Hand each write's fate to its loop: one wake-up per loop, not one per write."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Item]] = {}
        for item in items:
            by_loop.setdefault(item.loop, []).append(item)
        for loop, mine in by_loop.items():
            _call_soon(loop, self._settle, mine)

    def _settle(self, items: list[_Item]) -> None:
        for item in items:
            _settle_future(item.future, item.result, item.error)
            _settle_future(item.finished, None, None)
        if self._on_commit is not None:
            self._on_commit()


# A round's transaction that fails with one of these was rolled back whole: nothing of it stays.
_REFUSED = (JournalBusy, JournalClosed, SchemaViolation, InvalidArgument)


def _round_outcome(journal: Journal, exc: BaseException, kept: list[_Item]) -> WriteOutcome:
    """What is known of a round whose COMMIT (or the store around it) raised ``exc``.

    A round is one transaction: all its writes are in the file or none is. An error that says
    nothing was written (a broken round, a busy COMMIT) is taken at its word. Otherwise (DESIGN
    §4: the commit may have landed, say before a failing checkpoint) the writes' own events are
    looked for: one found means the round is there (``present``); none found says nothing, since
    a commit whose fsync failed can reappear after a crash (``unknown``)."""
    if isinstance(exc, _REFUSED):
        return WriteOutcome.ABSENT  # the round was refused and rolled back: nothing was written
    if isinstance(exc, JournalIOError) and exc.outcome != WriteOutcome.UNKNOWN:
        return WriteOutcome(exc.outcome)
    try:
        for item in kept:
            for event in _witnesses(item.result):
                found = journal.events(event.session_id, since=event.seq, limit=1)
                if found and found[0] == event:
                    return WriteOutcome.PRESENT
    except Exception:
        return WriteOutcome.UNKNOWN
    return WriteOutcome.UNKNOWN


def _witnesses(result: Any) -> list[Event]:
    """The events a write's result says it wrote in its round (not those it found stored)."""
    if isinstance(result, Event):
        return [] if result.existing else [result]
    if isinstance(result, list):
        return [e for e in result if isinstance(e, Event) and not e.existing]
    if isinstance(result, PutResult):
        return [result.event] if result.won else [] if result.late is None else [result.late]
    if isinstance(result, Dispatch):
        return [result.event]
    return []


def _member_error(exc: BaseException, operation: str, outcome: WriteOutcome) -> BaseException:
    """The error one write of a failed round raises in its own task: its own copy (each task
    raises and chains it separately), saying what is known of it. An error that is not the
    library's becomes a ``JournalIOError`` with the outcome: never an untyped error for a write
    that may be in the file."""
    if isinstance(exc, JournalIOError):
        own: BaseException = type(exc)(operation, outcome, exc.detail)
    elif isinstance(exc, JournalError) and outcome is WriteOutcome.ABSENT:
        own = copy.copy(exc)
    else:
        own = JournalIOError(operation, outcome, f"{type(exc).__name__}: {exc}")
    own.__cause__ = exc
    return own


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass  # the loop is closed: nobody is waiting any more


def _settle_future(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the task was cancelled while its write ran
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Readers:
    """Reader connections, one per thread of a small pool, opened when first needed."""

    def __init__(self, opener: Callable[[], Journal], size: int) -> None:
        self._opener = opener
        self._local = threading.local()
        self._opened: list[Journal] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="journal-reader")

    def journal(self) -> Journal:
        j = getattr(self._local, "journal", None)
        if j is None:
            j = self._local.journal = self._opener()
            with self._lock:
                self._opened.append(j)
        return j

    async def run(self, call: Callable[[Journal], Any]) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: call(self.journal()))

    def close(self) -> None:
        """Wait for the reads in flight, then close every reader connection (off the loop)."""
        self._pool.shutdown(wait=True)
        with self._lock:
            opened, self._opened = self._opened, []
        for j in opened:
            j.close()


class AsyncJournal:
    """An open journal for asyncio: ``async with journal.aio.open(path) as aj`` (or ``aj =
    await journal.aio.open(path)`` and ``await aj.close()``). Bound to the loop that opened it."""

    def __init__(self, path: Any, options: dict[str, Any], readers: int = READERS) -> None:
        self._path = path
        self._options = options
        self._writer = _Writer(functools.partial(engine.open, path, **options))
        read_options = {k: v for k, v in options.items() if k in ("busy_timeout_ms", "max_event_bytes", "vfs")}
        self._readers = _Readers(functools.partial(engine.open, path, readonly=True, **read_options), readers)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None  # the thread that runs ``_loop``
        self._opened = False
        self._closed = False
        self._committed: asyncio.Event | None = None  # set after each batch: followers look again

    # -- opening and closing ---------------------------------------------------------------------

    async def _open(self) -> AsyncJournal:
        if self._opened:
            self._owned("open")
        else:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._committed = asyncio.Event()
            self._opened = True
            await self._writer.start(self._loop, self._committed.set)
        return self

    def __await__(self) -> Generator[Any, None, AsyncJournal]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncJournal:
        return await self._open()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Commit every write queued before now, then close the connections. Writes after it
        raise ``JournalClosed``; closing twice does nothing. Refused (``WrongLoop``) outside the
        journal's own loop, as every call is: the writes it drains belong to that loop."""
        if self._opened:
            self._owned("close")
        if self._closed or not self._opened:
            self._closed = True
            return
        self._closed = True
        assert self._loop is not None
        try:
            await self._writer.stop(self._loop)
        finally:
            await self._loop.run_in_executor(None, self._readers.close)

    @property
    def path(self) -> str:
        return redact(str(self._writer.journal.path if self._writer.journal is not None else self._path))

    @property
    def durability(self) -> Any:
        if self._writer.journal is None:
            raise JournalClosed()
        return self._writer.journal.durability

    @property
    def commits(self) -> int:
        """How many batches the writer has committed (each one fsync under ``"full"``)."""
        return self._writer.commits

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._opened else "not opened"
        return f"<AsyncJournal {self.path!r} {state}>"

    # -- how a twin runs ---------------------------------------------------------------------------

    def _owned(self, operation: str) -> None:
        """Refuse a call made outside the loop that opened this journal, before it touches
        anything: its futures and its wake-ups belong to that loop, so a write queued from
        another would be committed while its caller saw a loop error (and retried it)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            raise WrongLoop(operation, "no running event loop") from None
        if self._loop is not None and running is not self._loop:
            here = threading.get_ident() == self._loop_thread
            raise WrongLoop(operation, "another event loop" if here else "an event loop of another thread")

    async def _write(
        self, call: Callable[[Journal], Any], *, operation: str = "write", alone: bool = False, synced: bool = False
    ) -> Any:
        self._owned(operation)
        if self._closed or not self._opened:
            raise JournalClosed()
        assert self._loop is not None
        item = _Item(call, self._loop, operation=operation, alone=alone, synced=synced)
        self._writer.put(item)
        try:
            return await item.future
        except asyncio.CancelledError:
            if not self._writer.withdraw(item):  # taken: it completes anyway
                # Wait for its fate before the task sees the cancellation, so that a read after
                # it shows the outcome; a second cancellation is raised once it is known too.
                while not item.finished.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.shield(item.finished)
            raise

    async def _read(self, call: Callable[[Journal], Any], *, operation: str = "read") -> Any:
        self._owned(operation)
        if self._closed or not self._opened:
            raise JournalClosed()
        return await self._readers.run(call)

    # -- the twins with handles --------------------------------------------------------------------

    async def turn_start(self, session_id: str) -> AsyncTurn:
        turn = await self._write(lambda j: j.turn_start(session_id), operation="turn_start")
        return AsyncTurn(self, turn)

    async def take_over(self, session_id: str) -> AsyncTurn:
        turn = await self._write(lambda j: j.take_over(session_id), operation="take_over")
        return AsyncTurn(self, turn)

    def turn(self, session_id: str, *, resume: bool = False) -> _TurnScope:
        """``async with aj.turn(s) as turn``: ``turn_end`` (complete) on a normal exit unless
        the body ended it; left OPEN if the body raises, for recovery to close honestly.
        ``resume=True`` continues the session's open turn (``take_over``) if it has one."""
        return _TurnScope(self, session_id, resume)

    def dispatch(
        self,
        session_id: str,
        call_id: str,
        *,
        turn: Turn | AsyncTurn | None = None,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        effect: str | None = None,
    ) -> _Dispatching:
        """``await`` it, or ``async with`` it: the dispatch is committed (synced, G6) before
        either returns, so the tool runs only on a durable record."""
        sync_turn = turn.handle if isinstance(turn, AsyncTurn) else turn

        def call(j: Journal) -> Dispatch:
            return j.dispatch(
                session_id,
                call_id,
                turn=sync_turn,
                idempotency_key=idempotency_key,
                request_id=request_id,
                effect=effect,
            )

        return _Dispatching(self, call)

    async def claim(
        self,
        *,
        session_id: str | None = None,
        owner: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        now_ms: int | None = None,
    ) -> AsyncClaim | None:
        claim = await self._write(
            lambda j: j.claim(session_id=session_id, owner=owner, lease_ms=lease_ms, now_ms=now_ms), operation="claim"
        )
        return None if claim is None else AsyncClaim(self, claim)

    async def follow(self, session_id: str, *, since: int = 0, interval: float = 0.1) -> AsyncIterator[Event]:
        """The session's events from ``since`` on, then each new one as it is appended (by this
        journal, another ``Journal`` or another process), until the iteration is stopped.
        Appends through this journal wake it at once; others are seen within ``interval``
        seconds."""
        self._owned("follow")
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or not interval > 0:
            raise InvalidArgument("interval", f"must be a number of seconds > 0, not {interval!r}")
        assert self._committed is not None
        while True:
            self._committed.clear()
            events = await self._read(lambda j: j.events(session_id, since=since), operation="follow")
            for event in events:
                yield event
                since = event.seq + 1
            if not events:
                try:
                    await asyncio.wait_for(self._committed.wait(), interval)
                except asyncio.TimeoutError:
                    pass


def _unwrap(value: Any) -> Any:
    """The sync handle behind an async one (a turn or a claim given as an argument)."""
    return value.handle if isinstance(value, (AsyncTurn, AsyncClaim)) else value


def _twin(name: str, kind: str) -> Callable[..., Any]:
    sync = getattr(Journal, name)

    async def twin(self: AsyncJournal, *args: Any, **kwargs: Any) -> Any:
        args = tuple(_unwrap(a) for a in args)
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}

        def call(j: Journal) -> Any:
            return getattr(j, name)(*args, **kwargs)

        if kind == "read":
            return await self._read(call, operation=name)
        return await self._write(call, operation=name, alone=kind == "alone", synced=name in _SYNCED)

    twin.__name__ = twin.__qualname__ = name
    twin.__doc__ = sync.__doc__
    twin.__signature__ = inspect.signature(sync)  # type: ignore[attr-defined]
    return twin


for _name in _WRITES:
    if _name not in AsyncJournal.__dict__:
        setattr(AsyncJournal, _name, _twin(_name, "write"))
for _name in _ALONE:
    setattr(AsyncJournal, _name, _twin(_name, "alone"))
for _name in _READS:
    if hasattr(Journal, _name):  # (``previews`` arrives with journal.preview)
        setattr(AsyncJournal, _name, _twin(_name, "read"))


class AsyncTurn:
    """An open turn (``Turn``'s twin): each call is a write of the async face."""

    def __init__(self, aj: AsyncJournal, handle: Turn) -> None:
        self._aj = aj
        self.handle = handle  # the sync handle, owned by the writer thread

    session_id = property(lambda self: self.handle.session_id)
    start_seq = property(lambda self: self.handle.start_seq)
    turn = property(lambda self: self.handle.turn)
    attempt = property(lambda self: self.handle.attempt)
    step_number = property(lambda self: self.handle.step_number)
    submission_id = property(lambda self: self.handle.submission_id)
    stream_key = property(lambda self: self.handle.stream_key)
    closed = property(lambda self: self.handle.closed)

    async def step_start(self) -> Event:
        return await self._aj._write(lambda j: self.handle.step_start(), operation="step_start")

    async def step_end(self, *, outcome: str = "ok") -> Event:
        return await self._aj._write(lambda j: self.handle.step_end(outcome=outcome), operation="step_end")

    def step(self) -> _StepScope:
        """``async with turn.step()``: ``step_start`` now; ``step_end`` on exit (``outcome:
        "error"`` if the body raises)."""
        return _StepScope(self)

    async def provider_started(self, *, stream_key: str | None = None) -> None:
        await self._aj._write(
            lambda j: self.handle.provider_started(stream_key=stream_key), operation="provider_started"
        )

    async def save_chunk(self, index: int, content: str) -> bool:
        return await self._aj._write(lambda j: self.handle.save_chunk(index, content), operation="save_chunk")

    async def assistant(self, content: Any, **fields: Any) -> Event:
        return await self._aj._write(lambda j: self.handle.assistant(content, **fields), operation="assistant")

    def dispatch(self, call_id: str, **fields: Any) -> _Dispatching:
        return self._aj.dispatch(self.session_id, call_id, turn=self, **fields)

    async def put_result(self, call_id: str, content: Any, **fields: Any) -> PutResult:
        return await self._aj._write(
            lambda j: self.handle.put_result(call_id, content, **fields), operation="put_result"
        )

    async def complete(self) -> Event:
        return await self._aj._write(lambda j: self.handle.complete(), operation="complete")

    async def reject(self) -> Event:
        return await self._aj._write(lambda j: self.handle.reject(), operation="reject")

    def __repr__(self) -> str:
        return f"Async{self.handle!r}"


class _TurnScope:
    def __init__(self, aj: AsyncJournal, session_id: str, resume: bool) -> None:
        self._aj = aj
        self._session_id = session_id
        self._resume = resume
        self._turn: AsyncTurn | None = None

    async def __aenter__(self) -> AsyncTurn:
        if self._resume:
            if not isinstance(self._resume, bool):
                raise InvalidArgument("resume", f"must be True or False, not {self._resume!r}")
            try:  # as the sync turn(resume=True): take over the open turn, else open one
                self._turn = await self._aj.take_over(self._session_id)
            except NoOpenTurn:
                self._turn = await self._aj.turn_start(self._session_id)
        else:
            self._turn = await self._aj.turn_start(self._session_id)
        return self._turn

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._turn is not None
        if exc_type is None and not self._turn.closed:
            await self._turn.complete()


class _StepScope:
    def __init__(self, turn: AsyncTurn) -> None:
        self._turn = turn

    async def __aenter__(self) -> AsyncTurn:
        await self._turn.step_start()
        return self._turn

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._turn.step_number is None:
            return
        if exc_type is None:
            await self._turn.step_end()
            return
        try:
            await self._turn.step_end(outcome="error")
        except LeaseLost:
            pass


class AsyncDispatch:
    """A committed dispatch (``Dispatch``'s twin): the ``tool_call`` event, and ``result``."""

    def __init__(self, aj: AsyncJournal, handle: Dispatch) -> None:
        self._aj = aj
        self.handle = handle

    event = property(lambda self: self.handle.event)
    call_id = property(lambda self: self.handle.call_id)
    arguments = property(lambda self: self.handle.arguments)
    outcome = property(lambda self: self.handle.outcome)

    async def result(self, content: Any, **fields: Any) -> PutResult:
        return await self._aj._write(lambda j: self.handle.result(content, **fields), operation="put_result")

    async def __aenter__(self) -> AsyncDispatch:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # A tool that raised leaves its call dispatched without a result: the honest record.
        return None


class _Dispatching:
    """What ``dispatch`` returns: awaitable, or entered with ``async with``."""

    def __init__(self, aj: AsyncJournal, call: Callable[[Journal], Dispatch]) -> None:
        self._aj = aj
        self._call = call
        self._done: AsyncDispatch | None = None

    async def _run(self) -> AsyncDispatch:
        if self._done is None:
            self._done = AsyncDispatch(self._aj, await self._aj._write(self._call, operation="dispatch", synced=True))
        return self._done

    def __await__(self) -> Generator[Any, None, AsyncDispatch]:
        return self._run().__await__()

    async def __aenter__(self) -> AsyncDispatch:
        return await self._run()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        return None


class AsyncClaim:
    """A worker's hold on a running submission (``Claim``'s twin). ``async with`` it: a normal
    exit completes its turn unless the body ended it; an exception leaves the turn open (the
    lease runs out, and the reconciler decides), as ``aj.turn`` does."""

    def __init__(self, aj: AsyncJournal, handle: Claim) -> None:
        self._aj = aj
        self.handle = handle
        self.turn = AsyncTurn(aj, handle.turn)

    submission = property(lambda self: self.handle.submission)
    owner = property(lambda self: self.handle.owner)
    resume = property(lambda self: self.handle.resume)
    attempt = property(lambda self: self.handle.attempt)

    async def complete(self) -> Event:
        return await self.turn.complete()

    async def reject(self) -> Event:
        return await self.turn.reject()

    async def fail(self, reason: str) -> None:
        await self._aj._write(lambda j: self.handle.fail(reason), operation="fail")

    async def requeue(self) -> None:
        await self._aj._write(lambda j: self.handle.requeue(), operation="requeue")

    async def renew(self, *, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        await self._aj._write(lambda j: self.handle.renew(lease_ms=lease_ms), operation="renew")

    async def __aenter__(self) -> AsyncClaim:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and not self.turn.closed:
            await self.complete()


def open(path: Any, **options: Any) -> AsyncJournal:
    """An ``AsyncJournal`` on the journal at ``path``, with the options of ``journal.open``:
    ``async with journal.aio.open(path) as aj``, or ``aj = await journal.aio.open(path)``.
    The file is opened (and a bad option refused) in the writer thread when it is awaited."""
    return AsyncJournal(path, options)
