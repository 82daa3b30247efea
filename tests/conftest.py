from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import journal

ROOT = Path(__file__).resolve().parent.parent


def _cache_bytecode_outside_the_tree() -> None:
    """Where ``PYTHONDONTWRITEBYTECODE`` is set, keep bytecode in a cache under the temporary
    directory (``PYTHONPYCACHEPREFIX``) for this run and the processes it starts.

    Without it every child process of the crash tests compiles the library again (about 0.3 s of
    CPU each, and the suite starts hundreds) and every worker rewrites the test modules again.
    Nothing is written in the repository either way (tests write only under temporary folders).
    """
    import tempfile

    if not sys.flags.dont_write_bytecode or sys.pycache_prefix or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    prefix = os.path.join(tempfile.gettempdir(), "journal-pycache")
    sys.pycache_prefix, sys.dont_write_bytecode = prefix, False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = prefix


_cache_bytecode_outside_the_tree()


# The contract suite (DESIGN §16): the tests under tests/contract/ that take `db_path` (or `j`, `fresh`)
# run on both backends, SQLite and PostgreSQL, unless marked `sqlite_only` with the reason.
BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames or ".contract." not in f".{metafunc.module.__name__}.":
        return
    if metafunc.definition.get_closest_marker("sqlite_only") is not None:
        return
    metafunc.parametrize("backend", BACKENDS, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The backend the test's journal is on: ``sqlite`` unless the contract suite asks both."""
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def pg_server():
    """One throwaway PostgreSQL server for the whole run (``journal.testing.pgserver``); its
    fsync is off: power loss is the SQLite fault VFS's to test, a crash of the server is not."""
    from journal.testing.pgserver import PgServer, PgUnavailable

    try:
        server = PgServer(fsync=False)
    except PgUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL is not installed here: {exc}")
    try:
        server.create_database("contract")
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_dsn(pg_server) -> str:
    """A DSN naming a new, empty schema (its own journal) in the server's ``contract`` database."""
    import uuid

    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    base = pg_server.dsn("contract")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{base}&options=-csearch_path%3D{schema}"


@pytest.fixture
def db_path(tmp_path: Path, backend: str, request: pytest.FixtureRequest):
    """Where the test's journal is: a file under ``tmp_path``, or on PostgreSQL a DSN."""
    if backend == "postgresql":
        return request.getfixturevalue("pg_dsn")
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


def release_together(racers: list[subprocess.Popen[str]], go: Path) -> None:
    """Wait until every racer (``python_child``) has printed ``ready`` -- its journal open, about
    to wait for ``go`` -- then create ``go``: the race starts together however slowly each
    process started, and no sooner."""
    for racer in racers:
        assert racer.stdout is not None and racer.stderr is not None
        line = racer.stdout.readline()
        assert line.strip() == "ready", (line, racer.stderr.read() if not line else "")
    go.touch()


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


def slow_wanted(config: pytest.Config) -> bool:
    """Whether the run asked for the long campaigns: ``-m slow`` (an expression naming ``slow``,
    not ``not slow``) or ``JOURNAL_SLOW=1`` in the environment."""
    expression = config.getoption("markexpr") or ""
    return os.environ.get("JOURNAL_SLOW") == "1" or ("slow" in expression and "not slow" not in expression)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The tests marked long run first (a stable sort: the same order on every worker): with -n the
    # workers start them side by side and share the short ones after, instead of one worker
    # finishing a long campaign alone at the end of the run.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    # The default run keeps a bounded case of every campaign; the cases marked slow repeat a path
    # a default case already takes (another occurrence, another pairing), so they are skipped --
    # not deselected: the summary says how to run them -- unless the run asks for them.
    if slow_wanted(config):
        return
    skip = pytest.mark.skip(reason="the long version of a campaign: run it with -m slow or JOURNAL_SLOW=1")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


@pytest.fixture
def vfs(fault_vfs):
    """The shipped plugin's fault VFS (``journal.testing.plugin``), under a short name."""
    return fault_vfs
