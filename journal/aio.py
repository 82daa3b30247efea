"""The async face (DESIGN §13): ``journal.aio.open(path, ...)`` gives an ``AsyncJournal``.

Every public method of ``Journal`` has an awaitable twin here with the same name, arguments,
return values and errors, written out so that it is typed for users; context managers become
``async with`` (``aj.turn(s)``, ``turn.step()``, ``turn.dispatch(call_id)``, a claim), and
``follow`` is an async iterator. How a twin runs (a read, a write, a synced write, a call that
runs alone) is not said here: it is the kind its method declares in ``journal.engine``
(``engine.KINDS``), and ``_call`` (``journal.aio_base``) reads it. (``append`` without a key
or an expected count also tells the writer what it appends: see below.)

How it runs. One **writer thread** owns the write connection. A write awaited on the loop is
queued; the writer takes everything queued, runs each write inside ONE transaction (each in a
savepoint of its own, so a refused write fails alone: G2), commits once, and wakes each waiting
coroutine with its own result or error. A write has returned only when that commit has (G1).
Plain appends that follow one another in a round are one insert of their rows; a refused one
(a stale guess of a session's next seq) lets each of them run as ``append`` does, in its
place. A round of one write is that write's own transaction, as the sync call makes it.
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
import functools
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from journal.aio_base import READERS as READERS
from journal.aio_base import _AsyncBase
from journal.aio_handles import AsyncClaim, AsyncDispatch, AsyncTurn, _Dispatching, _sync, _TurnScope
from journal.claims import Claim
from journal.engine import KINDS, Journal
from journal.errors import InvalidArgument
from journal.model import Event
from journal.queue import DEFAULT_LEASE_MS
from journal.reconcile import DEFAULT_CONTEXT_WINDOW
from journal.results import TOOL_STATS_LIMIT, PutResult, ToolStats
from journal.turns import Turn

if TYPE_CHECKING:
    from journal.effects import EffectRecovery, IndeterminateCall
    from journal.model import OperatorOutcome, Session
    from journal.preview import Preview
    from journal.pure.check import Disagreement
    from journal.pure.plan import Repair
    from journal.pure.view import Message, ProviderView
    from journal.purge import PurgeResult
    from journal.queue import Submission
    from journal.reconcile import Decision
    from journal.recovery import ProgressCallback, RecoveryPlan, RecoveryResult, ScanReport
    from journal.sessions import SessionTotals
    from journal.tools import OperatorCallback, ToolRegistry
    from journal.turns import TurnState

__all__ = ["AsyncClaim", "AsyncDispatch", "AsyncJournal", "AsyncTurn", "open"]


class AsyncJournal(_AsyncBase):
    """An open journal for asyncio: ``async with journal.aio.open(path) as aj`` (or ``aj =
    await journal.aio.open(path)`` and ``await aj.close()``). Bound to the loop that opened it.

    Its twins are written out here; how each runs (the loop check, the writer's queue, the
    reader pool, ``close``) is ``journal.aio_base``'s."""

    # -- the twins with handles --------------------------------------------------------------------

    async def turn_start(self, session_id: str) -> AsyncTurn:
        return AsyncTurn(self, await self._call(Journal.turn_start, session_id))

    async def take_over(self, session_id: str) -> AsyncTurn:
        return AsyncTurn(self, await self._call(Journal.take_over, session_id))

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
        return _Dispatching(
            self,
            functools.partial(
                self._call,
                Journal.dispatch,
                session_id,
                call_id,
                turn=None if turn is None else _sync(turn),
                idempotency_key=idempotency_key,
                request_id=request_id,
                effect=effect,
            ),
        )

    async def claim(
        self,
        *,
        session_id: str | None = None,
        owner: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        now_ms: int | None = None,
    ) -> AsyncClaim | None:
        claim = await self._call(Journal.claim, session_id=session_id, owner=owner, lease_ms=lease_ms, now_ms=now_ms)
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
            events = await self._read(
                functools.partial(Journal.events, session_id=session_id, since=since), operation="follow"
            )
            for event in events:
                yield event
                since = event.seq + 1
            if not events:
                try:
                    await asyncio.wait_for(self._committed.wait(), interval)
                except asyncio.TimeoutError:
                    pass

    # -- sessions and the log (journal.log) --------------------------------------------------------

    async def create_session(self, id: str | None = None, *, meta: dict[str, Any] | None = None) -> Session:
        return await self._call(Journal.create_session, id, meta=meta)

    async def session(self, id: str) -> Session:
        return await self._call(Journal.session, id)

    async def sessions(
        self,
        *,
        limit: int | None = None,
        after: str | Session | None = None,
        meta: Mapping[str, Any] | None = None,
        prefix: str | None = None,
        parent_id: str | None = None,
    ) -> list[Session]:
        return await self._call(
            Journal.sessions, limit=limit, after=after, meta=meta, prefix=prefix, parent_id=parent_id
        )

    async def session_totals(self) -> SessionTotals:
        return await self._call(Journal.session_totals)

    async def tool_stats(self, session_id: str | None = None, *, limit: int = TOOL_STATS_LIMIT) -> list[ToolStats]:
        return await self._call(Journal.tool_stats, session_id, limit=limit)

    async def append(
        self,
        session_id: str,
        type: str,
        data: dict[str, Any],
        *,
        key: str | None = None,
        expected_count: int | None = None,
    ) -> Event:
        if key is None and expected_count is None:
            # A plain append: the writer may insert it with the round's other plain appends in
            # one statement (journal.aio_writer); else, or when that is refused, it is this call.
            return await self._write(
                lambda j: j.append(session_id, type, data), operation="append", plain=(session_id, type, data)
            )
        return await self._call(Journal.append, session_id, type, data, key=key, expected_count=expected_count)

    async def append_many(
        self,
        session_id: str,
        items: Iterable[tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str | None]],
        *,
        expected_count: int | None = None,
        state: Mapping[str, Any] | None = None,
        owned: bool = False,
    ) -> list[Event]:
        return await self._call(
            Journal.append_many, session_id, items, expected_count=expected_count, state=state, owned=owned
        )

    async def set_state(self, session_id: str, values: Mapping[str, Any]) -> None:
        return await self._call(Journal.set_state, session_id, values)

    async def state(
        self, session_id: str, *, keys: Iterable[str] | None = None, as_of: int | None = None
    ) -> dict[str, Any]:
        return await self._call(Journal.state, session_id, keys=keys, as_of=as_of)

    async def events(
        self,
        session_id: str,
        *,
        since: int | None = None,
        types: Iterable[str] | None = None,
        newest_first: bool = False,
        limit: int | None = None,
    ) -> list[Event]:
        return await self._call(
            Journal.events, session_id, since=since, types=types, newest_first=newest_first, limit=limit
        )

    async def count(self, session_id: str) -> int:
        return await self._call(Journal.count, session_id)

    async def fork(
        self, session_id: str, at: int | str = "last", *, id: str | None = None, meta: dict[str, Any] | None = None
    ) -> Session:
        return await self._call(Journal.fork, session_id, at, id=id, meta=meta)

    async def previews(
        self, session_id: str, *, since: int | None = None, tail: int | None = None, limit: int = 200, chars: int = 2000
    ) -> list[Preview]:
        return await self._call(Journal.previews, session_id, since=since, tail=tail, limit=limit, chars=chars)

    # -- turns, steps and streams (journal.turns; ``turn_start``, ``turn`` above) ------------------

    async def step_start(self, turn: Turn | AsyncTurn) -> Event:
        return await self._call(Journal.step_start, _sync(turn))

    async def step_end(self, turn: Turn | AsyncTurn, *, outcome: str = "ok") -> Event:
        return await self._call(Journal.step_end, _sync(turn), outcome=outcome)

    async def provider_started(self, turn: Turn | AsyncTurn, *, stream_key: str | None = None) -> None:
        return await self._call(Journal.provider_started, _sync(turn), stream_key=stream_key)

    async def record_assistant(self, turn: Turn | AsyncTurn, content: Any, **fields: Any) -> Event:
        return await self._call(Journal.record_assistant, _sync(turn), content, **fields)

    async def turn_end(self, turn: Turn | AsyncTurn, *, reason: str = "complete") -> Event:
        return await self._call(Journal.turn_end, _sync(turn), reason=reason)

    async def save_chunk(self, session_id: str, stream_key: str, index: int, content: str) -> bool:
        return await self._call(Journal.save_chunk, session_id, stream_key, index, content)

    async def stream_chunks(self, stream_key: str) -> list[str]:
        return await self._call(Journal.stream_chunks, stream_key)

    async def turn_state(self, session_id: str, start_seq: int | None = None) -> TurnState | None:
        return await self._call(Journal.turn_state, session_id, start_seq)

    # -- results (journal.results; ``dispatch`` above) ---------------------------------------------

    async def put_result(
        self,
        session_id: str,
        call_id: str,
        content: Any,
        *,
        is_error: bool = False,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> PutResult:
        return await self._call(
            Journal.put_result, session_id, call_id, content, is_error=is_error, name=name, metadata=metadata
        )

    # -- the input queue (journal.queue, journal.claims; ``claim`` above) --------------------------

    async def submit(
        self,
        session_id: str,
        type: str,
        data: dict[str, Any],
        *,
        max_attempts: int = 10,
        timeout_s: float = 3600,
        id: str | None = None,
    ) -> Submission:
        return await self._call(
            Journal.submit, session_id, type, data, max_attempts=max_attempts, timeout_s=timeout_s, id=id
        )

    async def submission(self, submission_id: str) -> Submission:
        return await self._call(Journal.submission, submission_id)

    async def submissions(self, session_id: str | None = None, *, state: str | None = None) -> list[Submission]:
        return await self._call(Journal.submissions, session_id, state=state)

    async def renew(self, claim: Claim | AsyncClaim, *, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        return await self._call(Journal.renew, _sync(claim), lease_ms=lease_ms)

    async def requeue(self, claim: Claim | AsyncClaim) -> None:
        return await self._call(Journal.requeue, _sync(claim))

    async def fail(self, claim: Claim | AsyncClaim, reason: str) -> None:
        return await self._call(Journal.fail, _sync(claim), reason)

    # -- restart: scan, recovery, the reconciler (journal.recovery, journal.reconcile) -------------

    async def scan(self) -> ScanReport:
        return await self._call(Journal.scan)

    async def open_turns(self, session_id: str) -> list[Event]:
        return await self._call(Journal.open_turns, session_id)

    async def interrupted(self, session_id: str) -> bool:
        return await self._call(Journal.interrupted, session_id)

    async def plan(self, session_id: str) -> list[Repair]:
        return await self._call(Journal.plan, session_id)

    async def plan_recovery(self, session_id: str | None = None, *, force: bool = False) -> list[RecoveryPlan]:
        return await self._call(Journal.plan_recovery, session_id, force=force)

    async def recover(
        self,
        session_id: str | None = None,
        *,
        policy: str = "close",
        registry: ToolRegistry | None = None,
        on_indeterminate: OperatorCallback | None = None,
        force: bool = False,
        on_progress: ProgressCallback | None = None,
    ) -> list[RecoveryResult]:
        return await self._call(
            Journal.recover,
            session_id,
            policy=policy,
            registry=registry,
            on_indeterminate=on_indeterminate,
            force=force,
            on_progress=on_progress,
        )

    async def reconcile(
        self,
        *,
        now: float | None = None,
        now_ms: int | None = None,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        registry: ToolRegistry | None = None,
        dry_run: bool = False,
    ) -> list[Decision]:
        return await self._call(
            Journal.reconcile, now=now, now_ms=now_ms, context_window=context_window, registry=registry, dry_run=dry_run
        )

    # -- effect classes and the operator path (journal.effects) ------------------------------------

    async def recover_effects(
        self, registry: ToolRegistry, *, session_id: str | None = None, on_indeterminate: OperatorCallback | None = None
    ) -> list[EffectRecovery]:
        return await self._call(
            Journal.recover_effects, registry, session_id=session_id, on_indeterminate=on_indeterminate
        )

    async def indeterminate(self, session_id: str | None = None) -> list[IndeterminateCall]:
        return await self._call(Journal.indeterminate, session_id)

    async def resolve(
        self, session_id: str, call_id: str, *, outcome: str | OperatorOutcome, note: str | None = None
    ) -> Event:
        return await self._call(Journal.resolve, session_id, call_id, outcome=outcome, note=note)

    # -- the messages view (journal.transcript) ----------------------------------------------------

    async def messages(
        self, session_id: str, *, provider: bool = False, tail: int | None = None, chars: int | None = None
    ) -> list[Message]:
        return await self._call(Journal.messages, session_id, provider=provider, tail=tail, chars=chars)

    async def provider_view(
        self, session_id: str, *, tail: int | None = None, chars: int | None = None
    ) -> ProviderView:
        return await self._call(Journal.provider_view, session_id, tail=tail, chars=chars)

    async def compact(
        self, session_id: str, start: int, stop: int, summary: Any, *, type: str = "user_message", **fields: Any
    ) -> Event:
        return await self._call(Journal.compact, session_id, start, stop, summary, type=type, **fields)

    async def retract(self, session_id: str, *, reason: str | None = None) -> Message | None:
        return await self._call(Journal.retract, session_id, reason=reason)

    # -- erasing, checking, the file (journal.purge, journal.audit) --------------------------------

    async def purge(self, session_id: str, *, copy_forks: bool = False) -> PurgeResult:
        return await self._call(Journal.purge, session_id, copy_forks=copy_forks)

    async def check(self, session_id: str | None = None) -> list[Disagreement]:
        return await self._call(Journal.check, session_id)

    async def integrity_check(self) -> list[str]:
        return await self._call(Journal.integrity_check)

    async def size_bytes(self) -> int:
        return await self._call(Journal.size_bytes)

    async def checkpoint(self) -> None:
        return await self._call(Journal.checkpoint)


for _name in KINDS:  # each twin says what its method says
    _twin = AsyncJournal.__dict__[_name]
    _twin.__doc__ = _twin.__doc__ or getattr(Journal, _name).__doc__


def open(path: Any, **options: Any) -> AsyncJournal:
    """An ``AsyncJournal`` on the journal at ``path``, with the options of ``journal.open``:
    ``async with journal.aio.open(path) as aj``, or ``aj = await journal.aio.open(path)``.
    The file is opened (and a bad option refused) in the writer thread when it is awaited."""
    return AsyncJournal(path, options)
