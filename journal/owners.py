"""Owners of leases and turns: ``host:pid:process-start-time``, and whether one is gone.

A process on this host that no longer exists (or whose pid now belongs to a process started
later) is gone at once; another host's process is never declared gone from here.
"""

from __future__ import annotations

import functools
import os
import socket


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or ``None`` if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


@functools.lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname()


def lease_owner() -> str:
    """This process's lease owner: ``host:pid:process-start-time``."""
    pid = os.getpid()
    return f"{_host()}:{pid}:{_start_time(pid) or '?'}"


def owner_is_dead(owner: str | None) -> bool:
    """Whether ``owner`` names a process of this host that no longer exists (or whose pid was
    reused by a process started later). Another host's process is never declared dead."""
    parts = (owner or "").rsplit(":", 2)
    if len(parts) != 3 or parts[0] != _host():
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    started = _start_time(pid)
    if started is not None:
        return parts[2] != "?" and started != parts[2]
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
