from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import journal

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "journal.db"


@pytest.fixture
def j(db_path: Path):
    with journal.open(db_path) as opened:
        yield opened


@pytest.fixture
def fresh(db_path: Path):
    """Open the same file again through a new connection (durability is checked this way)."""
    opened: list[journal.Journal] = []

    def _open(**kwargs) -> journal.Journal:
        handle = journal.open(db_path, **kwargs)
        opened.append(handle)
        return handle

    yield _open
    for handle in opened:
        handle.close()


def python_child(code: str, *args: str, **popen_kwargs) -> subprocess.Popen:
    """Start ``code`` in a fresh Python process (the library importable, nothing inherited)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(popen_kwargs.pop("env", {}))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen_kwargs,
    )


def run_child(code: str, *args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    proc = python_child(code, *args, **kwargs)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def pytest_configure(config) -> None:
    # Hypothesis keeps a cache directory; keep it out of the repository (tests write only under
    # temporary directories).
    import tempfile

    from hypothesis import configuration

    configuration.set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "journal-hypothesis"))


@pytest.fixture
def vfs(fault_vfs):
    """The shipped plugin's fault VFS (``journal.testing.plugin``), under a short name."""
    return fault_vfs
