"""Building many small objects at once, without the cyclic collector in the way.

A restart scan of 50,000 open turns makes some 250,000 small objects (the open turns, the calls
they owe, the pending calls), a read of a 100,000-event session some 400,000 (the events and their
decoded JSON), all alive until they are returned. While they are made, CPython's cyclic collector
runs every few hundred allocations and each of its older generations walks every live object:
a third of a big scan and two fifths of a big read went to collections that find nothing, and the
cost per object grew with their number. None of those objects can form a cycle (frozen records
of plain values, JSON decoded from text), so the collector is paused while they are made and put
back as it was at once, whatever happens in between. Only around code of the library's own: never
while a caller's code runs.
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
