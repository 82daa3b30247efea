"""Test support for the journal and for agents built on it: crash points, a side-effect ledger,
a scripted agent workload, the kill harness and the fault-injecting VFS (DESIGN §9)."""

from journal.crash import POINTS as CRASH_POINTS
from journal.crash import arm, die, disarm, reached
from journal.testing.ledger import Ledger

__all__ = ["CRASH_POINTS", "Ledger", "arm", "die", "disarm", "reached"]
