"""Live following's one probe: a thread that watches the journal for commits and wakes the
streams whose session's count changed.

Every ``poll_s`` the thread reads the journal's change token (``Previews.change_token``: SQLite's
``data_version``, PostgreSQL's snapshot horizon; no table is read) on a journal of its own. Only
when it differs does it count the followed sessions' events (``Journal.count``), and only a
stream whose session's count changed is woken (``loop.call_soon_threadsafe``). An idle stream
costs nothing in the event loop and reads no event; however many streams follow, the probe is
one thread waking every ``poll_s``, and it sleeps while nobody follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator

from journal import Journal, JournalError, SessionNotFound

GONE = -1  # the count of a session that no longer exists (purged while followed)


class Subscription:
    """One stream's view of its session: ``count`` as last probed, ``woken`` set when it changed."""

    def __init__(self, session_id: str, count: int, loop: asyncio.AbstractEventLoop) -> None:
        self.session_id = session_id
        self.count = count
        self.loop = loop
        self.woken = asyncio.Event()

    def _wake(self) -> None:
        self.loop.call_soon_threadsafe(self.woken.set)


class Watcher:
    """Counts the followed sessions every ``poll_s`` with a journal from ``borrow``."""

    def __init__(self, open_journal: Callable[[], Journal], *, poll_s: float, stopping: threading.Event) -> None:
        self._open = open_journal
        self._poll_s = poll_s
        self._stopping = stopping
        self._lock = threading.Lock()
        self._followed: dict[str, list[Subscription]] = {}
        self._thread: threading.Thread | None = None
        self._anyone = threading.Condition(self._lock)
        self._recount = False

    @contextlib.contextmanager
    def follow(self, session_id: str, count: int) -> Iterator[Subscription]:
        """A subscription to ``session_id``'s count, known to be ``count`` now."""
        sub = Subscription(session_id, count, asyncio.get_running_loop())
        with self._lock:
            self._followed.setdefault(session_id, []).append(sub)
            self._recount = True  # its count was read before it subscribed: count once more
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="journal-serve-watch", daemon=True)
                self._thread.start()
            self._anyone.notify()
        try:
            yield sub
        finally:
            with self._lock:
                subs = self._followed.get(session_id, [])
                if sub in subs:
                    subs.remove(sub)
                if not subs:
                    self._followed.pop(session_id, None)

    def stop(self) -> None:
        """Wake every stream (they see the viewer stopping) and the probe thread."""
        with self._lock:
            for subs in self._followed.values():
                for sub in subs:
                    sub._wake()
            self._anyone.notify()

    def _run(self) -> None:
        j: Journal | None = None
        token: object = None
        try:
            while not self._stopping.is_set():
                with self._lock:
                    while not self._followed and not self._stopping.is_set():
                        self._anyone.wait()  # nobody follows: sleep until someone does
                if self._stopping.wait(self._poll_s):
                    break
                try:
                    if j is None:
                        j = self._open()  # its own: the token compares reads of one connection
                    now = j._change_token()  # the journal's own, compared on one connection
                    with self._lock:
                        recount, self._recount = self._recount, False
                    if now == token and not recount:
                        continue  # nothing committed since the last probe
                    token = now
                    self._count(j)
                except JournalError:
                    if j is not None:  # the file or the server is failing for now: again next time
                        j.close()
                    j, token = None, None
        finally:
            if j is not None:
                j.close()
            self.stop()

    def _count(self, j: Journal) -> None:
        with self._lock:
            sessions = list(self._followed)
        counts: dict[str, int] = {}
        for session_id in sessions:
            try:
                counts[session_id] = j.count(session_id)
            except SessionNotFound:
                counts[session_id] = GONE
        with self._lock:
            for session_id, count in counts.items():
                for sub in self._followed.get(session_id, []):
                    if sub.count != count:
                        sub.count = count
                        sub._wake()


__all__ = ["GONE", "Subscription", "Watcher"]
