"""Test support for the journal and for agents built on it: crash points, a side-effect ledger,
a scripted agent workload, the kill harness and the fault-injecting VFS (DESIGN §9), and replay:
a recorded session as a deterministic test and a crash campaign (DESIGN §18; the harness's
workload is ``journal.testing.replay_torture.replay``)."""

from journal.crash import POINTS as CRASH_POINTS
from journal.crash import TOOL_POINTS, arm, die, disarm, reached
from journal.testing.faultvfs import FaultVFS
from journal.testing.harness import Harness
from journal.testing.ledger import Ledger
from journal.testing.replay import Divergence, RecordedCrash, Recording, ReplayVerdict
from journal.testing.replay_models import ReplayTools, ScriptedModel
from journal.testing.verdict import WORKLOAD, Verdict, judge
from journal.testing.witness import CommitWitness

__all__ = [
    "CRASH_POINTS",
    "TOOL_POINTS",
    "WORKLOAD",
    "CommitWitness",
    "Divergence",
    "FaultVFS",
    "Harness",
    "Ledger",
    "RecordedCrash",
    "Recording",
    "ReplayTools",
    "ReplayVerdict",
    "ScriptedModel",
    "Verdict",
    "arm",
    "die",
    "disarm",
    "judge",
    "reached",
]
