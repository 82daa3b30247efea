"""What the async face stands on (DESIGN §13): opening, closing, the one loop, how a call runs.

``journal.aio.AsyncJournal`` writes its twins out on top of this class; each runs
``self._call(Journal.<method>, ...)``, which sends it, as its method's declared kind says
(``engine.KINDS``), to a reader connection or through the writer thread (``journal.aio_writer``).
The guarantees (one loop, no error for a committed write, cancellation, ``close()`` draining)
are said once, in ``journal.aio``'s docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable, Generator
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from journal import engine
from journal.aio_writer import _Item, _Readers, _Writer
from journal.engine import ALONE, KINDS, READ, SYNCED, Journal
from journal.errors import JournalClosed, WrongLoop
from journal.model import Durability
from journal.store.target import redact

READERS = 2
P = ParamSpec("P")
R = TypeVar("R")
AJ = TypeVar("AJ", bound="_AsyncBase")  # the face itself: awaiting or entering it gives it back


class _AsyncBase:
    """An async journal without its twins: its connections, the loop that opened it, ``_call``."""

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

    async def _open(self: AJ) -> AJ:
        if self._opened:
            self._owned("open")
        else:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._committed = asyncio.Event()
            self._opened = True
            await self._writer.start(self._loop, self._committed.set)
        return self

    def __await__(self: AJ) -> Generator[Any, None, AJ]:
        return self._open().__await__()

    async def __aenter__(self: AJ) -> AJ:
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
    def durability(self) -> Durability:
        if self._writer.journal is None:
            raise JournalClosed(opened=self._opened or self._closed)
        return self._writer.journal.durability

    @property
    def readonly(self) -> bool:
        """Whether the journal was opened read-only (every write is refused)."""
        if self._writer.journal is None:
            raise JournalClosed(opened=self._opened or self._closed)
        return self._writer.journal.readonly

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
        self,
        call: Callable[[Journal], R],
        *,
        operation: str = "write",
        alone: bool = False,
        synced: bool = False,
        plain: tuple[str, str, dict[str, Any]] | None = None,
    ) -> R:
        self._owned(operation)
        if self._closed or not self._opened:
            raise JournalClosed(opened=self._opened or self._closed)
        assert self._loop is not None
        item = _Item(call, self._loop, operation=operation, alone=alone, synced=synced, plain=plain)
        self._writer.put(item)
        try:
            return cast(R, await item.future)  # the future holds what ``call`` returned
        except asyncio.CancelledError:
            if not self._writer.withdraw(item):  # taken: it completes anyway
                # Wait for its fate before the task sees the cancellation, so that a read after
                # it shows the outcome; a second cancellation is raised once it is known too.
                while not item.finished.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.shield(item.finished)
            raise

    async def _read(self, call: Callable[[Journal], R], *, operation: str = "read") -> R:
        self._owned(operation)
        if self._closed or not self._opened:
            raise JournalClosed(opened=self._opened or self._closed)
        return cast(R, await self._readers.run(call))

    async def _call(self, method: Callable[Concatenate[Journal, P], R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run ``method`` (``Journal.append``, ...) with these arguments as its declared kind
        says: a read on a reader connection, anything else through the writer thread."""
        operation = method.__name__
        kind = KINDS[operation]

        def call(j: Journal) -> R:
            bound: Callable[P, R] = getattr(j, operation)  # the journal's own bound method: no descriptor on the way
            return bound(*args, **kwargs)

        if kind is READ:
            return await self._read(call, operation=operation)
        return await self._write(call, operation=operation, alone=kind is ALONE, synced=kind is SYNCED)
