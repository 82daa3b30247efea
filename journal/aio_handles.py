"""The async face's handles (DESIGN §13): ``AsyncTurn``, ``AsyncDispatch``, ``AsyncClaim``.

Each wraps the sync handle the writer thread's ``Journal`` returned (``.handle``) and runs its
calls as writes of the ``AsyncJournal`` that made it; the scopes make ``async with aj.turn(s)``,
``turn.step()`` and ``turn.dispatch(call_id)``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, overload

from journal.claims import Claim
from journal.errors import InvalidArgument, LeaseLost, NoOpenTurn
from journal.model import Event
from journal.queue import DEFAULT_LEASE_MS
from journal.results import Dispatch, PutResult
from journal.turns import Turn

if TYPE_CHECKING:
    from journal.aio import AsyncJournal
    from journal.pure.classify import ResumeMode
    from journal.queue import Submission


@overload
def _sync(handle: Turn | AsyncTurn) -> Turn: ...
@overload
def _sync(handle: Claim | AsyncClaim) -> Claim: ...
def _sync(handle: Turn | AsyncTurn | Claim | AsyncClaim) -> Turn | Claim:
    """The sync handle behind an async one (a turn or a claim given as an argument)."""
    return handle.handle if isinstance(handle, (AsyncTurn, AsyncClaim)) else handle


class AsyncTurn:
    """An open turn (``Turn``'s twin): each call is a write of the async face."""

    def __init__(self, aj: AsyncJournal, handle: Turn) -> None:
        self._aj = aj
        self.handle = handle  # the sync handle, owned by the writer thread

    @property
    def session_id(self) -> str:
        return self.handle.session_id

    @property
    def start_seq(self) -> int:
        return self.handle.start_seq

    @property
    def turn(self) -> int:
        return self.handle.turn

    @property
    def attempt(self) -> int:
        return self.handle.attempt

    @property
    def step_number(self) -> int | None:
        return self.handle.step_number

    @property
    def submission_id(self) -> str | None:
        return self.handle.submission_id

    @property
    def stream_key(self) -> str | None:
        return self.handle.stream_key

    @property
    def closed(self) -> bool:
        return self.handle.closed

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

    @property
    def event(self) -> Event:
        return self.handle.event

    @property
    def call_id(self) -> str:
        return self.handle.call_id

    @property
    def arguments(self) -> Any:
        return self.handle.arguments

    @property
    def outcome(self) -> PutResult | None:
        return self.handle.outcome

    async def result(self, content: Any, **fields: Any) -> PutResult:
        return await self._aj._write(lambda j: self.handle.result(content, **fields), operation="put_result")

    async def __aenter__(self) -> AsyncDispatch:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # A tool that raised leaves its call dispatched without a result: the honest record.
        return None


class _Dispatching:
    """What ``dispatch`` returns: awaitable, or entered with ``async with``."""

    def __init__(self, aj: AsyncJournal, call: Callable[[], Coroutine[Any, Any, Dispatch]]) -> None:
        self._aj = aj
        self._call = call  # the dispatch, run once (``Journal.dispatch``: a synced write)
        self._done: AsyncDispatch | None = None

    async def _run(self) -> AsyncDispatch:
        if self._done is None:
            self._done = AsyncDispatch(self._aj, await self._call())
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

    @property
    def submission(self) -> Submission:
        return self.handle.submission

    @property
    def owner(self) -> str:
        return self.handle.owner

    @property
    def resume(self) -> ResumeMode | None:
        return self.handle.resume

    @property
    def attempt(self) -> int:
        return self.handle.attempt

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
