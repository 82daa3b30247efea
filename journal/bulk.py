"""Building many small objects at once, without the cyclic collector in the way.

A restart scan of 50,000 open turns makes some 250,000 small objects (the open turns, the calls
they owe, the pending calls) that all stay alive until the report is returned. While they are
made, CPython's cyclic collector runs every few hundred allocations and each of its older
generations walks every live object: a scan of 50,000 turns then spends a third of its time in
collections that find nothing, and its cost per turn grows with the number of turns. None of
those objects can form a cycle (frozen records of plain values), so the collector is paused while
they are built, as msgpack's and the json module's users do for a large document, and resumed
after, at once, whatever happens in between.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_collector() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector for the block (reference counting still frees
    what the block drops). If the collector was already off (the caller's choice), it stays off;
    a thread that enters while another is inside finds it off and leaves it to that one to turn
    back on."""
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
