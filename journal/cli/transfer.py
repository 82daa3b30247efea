"""Sessions in and out as JSON lines: ``export``, ``import``."""

from __future__ import annotations

from typing import IO

import click

from journal import transfer
from journal.cli.app import main
from journal.cli.options import db_option, open_journal
from journal.cli.render import echo


@main.command()
@db_option
@click.argument("sessions_", metavar="[SESSION]...", nargs=-1)
@click.option("-o", "--output", default="-", type=click.Path(dir_okay=False, allow_dash=True),
              help="Where to write (default stdout); created 0600; never over a journal.")  # fmt: skip
def export(db: str, sessions_: tuple[str, ...], output: str) -> None:
    """Write sessions as JSON lines: a {"session": ...} line, then one {"event": ...} per event."""
    with open_journal(db, readonly=True) as j:
        ids = list(sessions_) or None
        if output != "-":
            transfer.export_file(j, output, ids)
            return
        for line in transfer.export_lines(j, ids):
            click.echo(line)  # already escaped JSON (journal.escape.dumps)


@main.command(name="import")
@db_option
@click.argument("source", type=click.File("rb"))
def import_(db: str, source: IO[bytes]) -> None:
    """Read sessions written by ``journal export``: one transaction, all of them or none."""
    with open_journal(db, create=True) as j:
        imported = transfer.import_file(j, source)
    echo(f"imported {imported} session(s)")
