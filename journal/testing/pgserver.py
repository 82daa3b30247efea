"""A throwaway PostgreSQL server for tests, crash campaigns and benchmarks (DESIGN §16).

``PgServer()`` makes a cluster with the machine's own binaries (``pg_config --bindir``, or
``$JOURNAL_PG_BINDIR``) in a new temporary directory, starts it listening on a Unix socket in
that directory only (no TCP port), and removes it all on ``close()``. The server refuses to run
as root: when this process is root the binaries run as the ``postgres`` user (``runuser``).

``stop(mode="immediate")`` and ``start()`` let a campaign crash the server and bring it back
(an immediate stop is a crash: the next start replays the server's WAL).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path


class PgUnavailable(RuntimeError):
    """No PostgreSQL binaries on this machine (install ``postgresql``), or no user to run them."""


def bindir() -> Path:
    """Where the PostgreSQL server binaries are."""
    named = os.environ.get("JOURNAL_PG_BINDIR")
    if named:
        return Path(named)
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if found:
            return found[-1].parent
        raise PgUnavailable("no PostgreSQL binaries: pg_config is missing (install postgresql)") from exc
    path = Path(out.strip())
    if not (path / "initdb").exists():
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if found:
            return found[-1].parent
        raise PgUnavailable(f"no initdb in {path} (install the postgresql server package)")
    return path


class PgServer:
    """One private PostgreSQL cluster; ``dsn(database)`` names a database on it."""

    def __init__(self, *, fsync: bool = True) -> None:
        self._bin = bindir()
        self._as: list[str] = []
        self._user = pwd.getpwuid(os.geteuid()).pw_name
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PgUnavailable("running as root and there is no postgres user to run the server") from exc
            self._as = ["runuser", "-u", "postgres", "--"]
            self._user = "postgres"
        self.root = Path(tempfile.mkdtemp(prefix="journal-pg-"))
        self.data = self.root / "data"
        self.socket_dir = str(self.root)
        if self._as:
            shutil.chown(self.root, user="postgres")
        self._run(
            "initdb", "-D", str(self.data), "-U", self._user, "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"
        )
        settings = [
            "listen_addresses = ''",
            f"unix_socket_directories = '{self.socket_dir}'",
            "max_connections = 200",
            f"fsync = {'on' if fsync else 'off'}",
            "shared_buffers = 64MB",
            "log_min_messages = fatal",
            "logging_collector = off",
        ]
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n".join(settings) + "\n")
        self.start()

    def _run(self, tool: str, *args: str) -> str:
        proc = subprocess.run(
            [*self._as, str(self._bin / tool), *args], capture_output=True, text=True, cwd=self.root, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` cleanly, ``immediate`` as a crash (no checkpoint)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{self._user}@/{database}?host={self.socket_dir}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database (``createdb``, through the socket); its DSN."""
        name = name or "j_" + uuid.uuid4().hex[:16]
        self._run("createdb", "-h", self.socket_dir, "-U", self._user, name)
        return self.dsn(name)

    def drop_database(self, dsn: str) -> None:
        name = dsn.split("/")[-1].split("?")[0]
        self._run("dropdb", "-h", self.socket_dir, "-U", self._user, "--force", "--if-exists", name)

    def close(self) -> None:
        try:
            self.stop("immediate")
        except RuntimeError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
