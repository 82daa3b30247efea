"""The journal as the adapters call it from a coroutine, sync ``Journal`` or ``AsyncJournal`` alike.

``Calls(target)("append", session_id, ...)`` awaits an ``AsyncJournal``'s method, or runs a sync
``Journal``'s in a worker thread (a ``Journal`` may be shared by threads), so the event loop never
waits on the file. ``Direct(target)`` calls a sync ``Journal`` right here: a coroutine whose calls
are all ``Direct`` never suspends, and ``drive`` runs it to its end, so an adapter's sync
``repair`` is the very code of its ``arepair``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import journal
from journal.aio import AsyncJournal

R = TypeVar("R")

__all__ = ["Calls", "Direct", "drive"]


class Calls:
    """Calls a journal method without blocking the loop (see the module's docstring)."""

    def __init__(self, target: journal.Journal | AsyncJournal) -> None:
        self.target = target
        self._async = isinstance(target, AsyncJournal)

    async def __call__(self, method_name: str, /, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.target, method_name)
        if self._async:
            return await method(*args, **kwargs)
        return await asyncio.to_thread(functools.partial(method, *args, **kwargs))

    async def run(self, routine: Callable[[Calls], Coroutine[Any, Any, R]]) -> R:
        """Run ``routine(calls)``, a few journal calls in a row, in one worker-thread hop for a
        sync ``Journal`` (each hop costs a thread switch) or awaited as is on an ``AsyncJournal``."""
        if self._async:
            return await routine(self)
        direct = Direct(self.target)
        return await asyncio.to_thread(lambda: drive(routine(direct)))


class Direct(Calls):
    """Calls a sync ``Journal``'s method right here: the coroutine never suspends (``drive``)."""

    async def __call__(self, method_name: str, /, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.target, method_name)(*args, **kwargs)

    async def run(self, routine: Callable[[Calls], Coroutine[Any, Any, R]]) -> R:
        return await routine(self)


def drive(coro: Coroutine[Any, Any, R]) -> R:
    """Run a coroutine that never suspends (its journal calls are ``Direct``) to its end."""
    try:
        coro.send(None)
    except StopIteration as stop:
        done: R = stop.value  # what the coroutine returned
        return done
    coro.close()  # pragma: no cover - a Direct call never suspends
    raise RuntimeError("a synchronous journal call suspended")  # pragma: no cover
