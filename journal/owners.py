"""Owners of leases and turns: ``host:pid:process-start-time``, and whether one is gone.

A process on this host that no longer exists (or whose pid now belongs to a process started
later, or that ended and waits to be reaped by its parent: a zombie) is gone at once; another
host's process is never declared gone from here.
"""

from __future__ import annotations

import functools
import os
import socket


def _stat(pid: int) -> tuple[str, str] | None:
    """The process's state letter and start time in clock ticks since boot (Linux), or ``None``
    if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return (fields[0].decode(), fields[19].decode()) if len(fields) > 19 else None


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or ``None`` if unknown."""
    stat = _stat(pid)
    return stat[1] if stat is not None else None


def _ended(pid: int, state: str) -> bool:
    """Whether the process ended and only its entry is left (a zombie its parent has not reaped:
    killed, say, and not yet waited for). Its first thread alone may have ended while others run
    on: then the process is alive."""
    if state not in ("Z", "X"):
        return False
    try:
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


@functools.lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname()


def lease_owner() -> str:
    """This process's lease owner: ``host:pid:process-start-time``."""
    pid = os.getpid()
    return f"{_host()}:{pid}:{_start_time(pid) or '?'}"


def owner_is_dead(owner: str | None) -> bool:
    """Whether ``owner`` names a process of this host that no longer exists (or whose pid was
    reused by a process started later, or that ended and is not yet reaped). Another host's
    process is never declared dead."""
    parts = (owner or "").rsplit(":", 2)
    if len(parts) != 3 or parts[0] != _host():
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    stat = _stat(pid)
    if stat is not None:
        state, started = stat
        return (parts[2] != "?" and started != parts[2]) or _ended(pid, state)
    if os.path.isdir("/proc/self"):
        return True  # Linux: no /proc entry means no such process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def held_elsewhere(owner: str | None) -> bool:
    """Whether ``owner`` is another process that may still be running: not this process, and
    not one this host can show is gone. ``None`` (an owner never recorded) holds nothing."""
    return owner is not None and owner != lease_owner() and not owner_is_dead(owner)
