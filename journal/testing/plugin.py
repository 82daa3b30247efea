"""A pytest plugin for testing agents built on the journal: kill them and judge what is left.

Installed with ``agent-journal``, pytest loads it by itself (the ``pytest11`` entry point
``journal``; ``-p no:journal`` turns it off). Where the entry point is not installed, load it
with ``-p journal.testing.plugin`` or ``pytest_plugins = ["journal.testing.plugin"]`` in your
top-level ``conftest.py`` (not both: pytest refuses a plugin registered under two names).

Fixtures:

- ``crash_harness``: a ``journal.testing.harness.Harness`` working in the test's ``tmp_path``.
  ``kill_at(point, n=1)``, ``kill_after(seconds)`` and ``run()`` each run the workload in a
  child process, stop it, restart (scan, recover, resume) and return a ``Verdict``;
  ``points()`` lists the crash points a clean run reaches.
- ``fault_vfs``: a fresh ``journal.testing.faultvfs.FaultVFS``, registered for the test and
  removed after it. Open a journal through it with ``journal.open(path, vfs=fault_vfs.name)``.

An agent author's test (``my_agent/testing.py`` holds ``run(journal, session_id, ledger)``, whose
tools call ``ledger.record(session=session_id, call=call_id, ...)`` as their side effect)::

    import pytest

    AGENT = "my_agent.testing:run"

    @pytest.mark.parametrize("point", ["dispatch.after_commit", "tool.after_run", "put_result.before_commit"])
    def test_my_agent_survives_a_kill(crash_harness, point):
        verdict = crash_harness.kill_at(point, workload=AGENT)
        assert verdict.killed, f"{point} was never reached"
        assert verdict.ok, verdict.problems

    def test_my_agent_survives_a_kill_at_a_random_moment(crash_harness):
        verdict = crash_harness.kill_after(0.02, workload=AGENT)
        assert verdict.ok, verdict.problems

Set a default for every test of a module with ``crash_harness.workload = AGENT``.

A production session exported with ``journal export --session`` is a workload too: the kills then
hit your agent replaying it (``journal.testing.replay_torture.replay``; the session is the
recording's)::

    from journal.testing.replay_torture import replay

    def test_my_agent_survives_the_recorded_session(crash_harness):
        verdict = crash_harness.kill_at("tool.after_run", workload=replay("tests/cases/c7.jsonl", "my_agent:agent"))
        assert verdict.killed and verdict.ok, verdict.problems
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from journal.testing.faultvfs import FaultVFS
from journal.testing.harness import Harness


@pytest.fixture
def crash_harness(tmp_path: Path) -> Harness:
    """A kill harness whose trials live in the test's temporary directory."""
    return Harness(tmp_path / "crash-harness")


@pytest.fixture
def fault_vfs() -> Iterator[FaultVFS]:
    """A fault-injecting VFS registered under a unique name for the length of the test."""
    with FaultVFS(f"journal-fault-vfs-{uuid.uuid4().hex}") as vfs:
        yield vfs
