"""``journal torture``: run a crash campaign (``journal.testing.torture``) and print its verdict."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import click

from journal.cli.app import main
from journal.cli.output import output
from journal.store.target import is_dsn


@main.command()
@click.option("--trials", type=click.IntRange(min=1), default=200, show_default=True, help="How many trials.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the trials' random draws.")
@click.option("--durability", type=click.Choice(["full", "normal"]), default="full", show_default=True,
              help="The agent's journal.open(durability=): full survives power loss, normal a crash.")  # fmt: skip
@click.option("--jobs", type=click.IntRange(min=1), default=lambda: min(os.cpu_count() or 1, 4),
              show_default="CPU count, at most 4", help="Worker processes.")  # fmt: skip
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Where the trials' files go (default: the temporary directory).")  # fmt: skip
# Not JOURNAL_DB: that names the journal of the other commands, and a campaign never runs on it.
@click.option("--db", "database", metavar="DSN", default=None,
              help="Run on this PostgreSQL database (a DSN: postgresql://... or host=... dbname=...), each trial "
                   "in a new schema of its own: the client-kill kinds only.")  # fmt: skip
@click.option("--postgres", is_flag=True,
              help="Run on a throwaway PostgreSQL server of its own (fsync on), server crashes included.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def torture(
    trials: int, seed: int, durability: str, jobs: int, workdir: str | None, database: str | None, postgres: bool,
    as_json: bool,
) -> None:  # fmt: skip
    """Run a crash campaign: kills at every crash point and at random, power loss, torn writes,
    I/O errors and a full disk, each followed by recovery and a resumed run; exit 1 unless every
    counter is zero.

    With --db postgresql://... the kills (at every crash point, at random, during recovery) run
    against that database, each trial in a schema of its own (kept, and named, if the trial
    fails). With --postgres the campaign starts a throwaway server and also crashes it
    (pg_ctl stop -m immediate) while the agent runs. The storage faults need SQLite's fault VFS
    and do not run on PostgreSQL; the report lists the kinds that ran."""
    if database is not None and postgres:
        raise click.UsageError("--db and --postgres are two ways to choose the server: give one")
    if database is not None and not is_dsn(database):
        raise click.BadParameter(
            "takes a PostgreSQL DSN, postgresql://... or host=... dbname=... (the SQLite campaign makes its own files)",
            param_hint="--db",
        )
    # Imported here: the campaign's machinery (fault VFS, harness, process pool) is not worth
    # loading for every other command.
    from journal.testing import torture as crash_campaign

    if database is not None or postgres:
        _need_psycopg()
    if workdir is not None:
        os.makedirs(workdir, exist_ok=True)
    label = f"torture on PostgreSQL ({durability})" if database is not None or postgres else f"torture ({durability})"
    options: dict[str, Any] = {"seed": seed, "durability": durability, "jobs": jobs, "workdir": workdir}
    with click.progressbar(length=trials, label=label, file=sys.stderr) as bar:
        if postgres:
            from journal.testing.pgserver import PgUnavailable

            try:
                report = crash_campaign.postgres_campaign(trials, progress=bar.update, **options)
            except PgUnavailable as exc:
                raise click.ClickException(str(exc)) from exc
        else:
            report = crash_campaign.campaign(trials, progress=bar.update, database=database, **options)
    output(report, [report], crash_campaign.report_lines(report), as_json=as_json, as_nl=False)
    if not report["ok"]:
        raise click.exceptions.Exit(1)


def _need_psycopg() -> None:
    # Looked up, not imported: only the store imports the driver.
    if importlib.util.find_spec("psycopg") is None:
        raise click.ClickException("a PostgreSQL campaign needs psycopg: pip install 'agent-journal[postgres]'")
