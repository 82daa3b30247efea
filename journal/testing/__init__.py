"""Test support for the journal and for agents built on it: crash points, a side-effect ledger,
a scripted agent workload, the kill harness and the fault-injecting VFS (DESIGN §9)."""

from journal.crash import POINTS as CRASH_POINTS
from journal.crash import TOOL_POINTS, arm, die, disarm, reached
from journal.testing.faultvfs import FaultVFS
from journal.testing.harness import Harness
from journal.testing.ledger import Ledger
from journal.testing.verdict import WORKLOAD, Verdict, judge
from journal.testing.witness import CommitWitness

__all__ = [
    "CRASH_POINTS",
    "TOOL_POINTS",
    "WORKLOAD",
    "CommitWitness",
    "FaultVFS",
    "Harness",
    "Ledger",
    "Verdict",
    "arm",
    "die",
    "disarm",
    "judge",
    "reached",
]
