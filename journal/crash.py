"""Named crash points: places in the engine where a test can make the process die.

A point is armed with ``arm(name, n)`` or the environment variable ``JOURNAL_CRASH_AT=name[:n]``
(read at import; a malformed value is ignored with a one-line warning on stderr, and a name that
is no known point is armed with one); the n-th time the engine reaches it, the process kills
itself with SIGKILL: no cleanup, no flush, no ``finally`` blocks, exactly as ``kill -9`` would.
Unarmed, a point costs one global lookup.

Every write transaction of the engine passes two points, ``<operation>.before_commit`` and
``<operation>.after_commit``; ``POINTS`` lists the operations.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator

from journal.escape import escape

# The operations whose commits are crash points (DESIGN §9). Each gives two points.
OPERATIONS = (
    "create_schema",
    "migrate_schema",
    "create_session",
    "append",
    "append_many",
    "fork",
    "turn_start",
    "step_start",
    "provider_started",
    "save_chunk",
    "assistant",
    "dispatch",
    "put_result",
    "step_end",
    "turn_end",
    "recover",
    "submit",
    "claim",
    "renew",
    "fail",
    "requeue",
    "reconcile",
    "effect_recovery",
    "notify",
    "resolve",
    "purge",
    "import",
    "writer",
    "set_state",
    "retract",
    "take_over",
)
POINTS = tuple(f"{op}.{when}" for op in OPERATIONS for when in ("before_commit", "after_commit"))
# Points around a tool's side effect, reached by tools that call ``reached`` (as the workload of
# ``journal.testing`` does): not inside the engine, but named here so they are documented.
TOOL_POINTS = ("tool.before_run", "tool.after_run")

_armed: dict[str, int] | None = None
_observers: list[Callable[[str], None]] = []


def arm(name: str, n: int = 1) -> None:
    """Die the ``n``-th time ``name`` is reached from now on."""
    global _armed
    if n < 1:
        raise ValueError("n must be >= 1")
    _armed = dict(_armed or {}, **{name: n})


def disarm() -> None:
    global _armed
    _armed = None


def armed() -> bool:
    """Whether any point is armed or observed (lets the engine skip naming its points when not)."""
    return _armed is not None or bool(_observers)


@contextlib.contextmanager
def observing(observer: Callable[[str], None]) -> Iterator[None]:
    """Call ``observer(name)`` at every crash point reached (before an armed one fires)."""
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)


def reached(name: str) -> None:
    """Called by the engine at a crash point."""
    for observer in _observers:
        observer(name)
    if _armed is None or name not in _armed:
        return
    _armed[name] -= 1
    if _armed[name] <= 0:
        die()


def die() -> None:
    """Kill this process at once, as SIGKILL does (no cleanup of any kind)."""
    os.kill(os.getpid(), signal.SIGKILL)


def _from_environment() -> None:
    """Arm the point ``JOURNAL_CRASH_AT`` names; a malformed value only warns.

    It is read at import, so raising would break every program that imports the library, the
    ``journal`` command included, over a variable meant for tests."""
    spec = os.environ.get("JOURNAL_CRASH_AT", "").strip()
    if not spec:
        return
    name, _, count = spec.partition(":")
    if name and (not count or (count.isascii() and count.isdigit() and int(count) >= 1)):
        arm(name, int(count) if count else 1)
        if name not in POINTS and name not in TOOL_POINTS:
            # Armed all the same: a tool of the caller's may reach a point of its own. But a
            # misspelt point would otherwise never fire, and a crash test would pass unkilled.
            sys.stderr.write(
                f"journal: JOURNAL_CRASH_AT names no known crash point ({escape(repr(name))}); it is armed, but "
                "only a tool reaching it itself can fire it (the known points: journal.crash.POINTS and "
                "journal.crash.TOOL_POINTS, listed in docs/crash-points.md)\n"
            )
        return
    shown = escape(repr(spec))
    sys.stderr.write(f"journal: ignoring JOURNAL_CRASH_AT={shown}: expected POINT or POINT:N with N >= 1\n")


_from_environment()
