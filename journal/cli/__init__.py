"""The ``journal`` command: a thin shell over the library (DESIGN §10).

Every read command takes ``--json`` (one JSON document) or ``--nl`` (one JSON object a line);
their fields are documented in docs/cli.md and are a stable contract. Logs and progress go to
stderr. Every failure is one line, ``journal: ...`` on stderr, with exit status 1 (2 for a usage
error), never a traceback. Text for people goes through ``render.echo`` and JSON through
``journal.escape.dumps`` (both in ``output``), so stored content never reaches the terminal
raw (G14).

``app`` defines the group and imports no command module; each command module registers its
commands on the group when imported, so there is no import cycle.
"""

# Importing a command module registers its commands on ``main``.
from journal.cli import demo, log, operator, queue, recovery, replay, serve, sessions, torture, transfer  # noqa: F401
from journal.cli.app import main

__all__ = ["main"]
