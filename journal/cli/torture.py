"""``journal torture``: run a crash campaign (``journal.testing.torture``) and print its verdict."""

from __future__ import annotations

import os
import sys

import click

from journal.cli.app import main
from journal.cli.output import output


@main.command()
@click.option("--trials", type=click.IntRange(min=1), default=200, show_default=True, help="How many trials.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the trials' random draws.")
@click.option("--durability", type=click.Choice(["full", "normal"]), default="full", show_default=True)
@click.option("--jobs", type=click.IntRange(min=1), default=lambda: min(os.cpu_count() or 1, 4),
              show_default="CPU count, at most 4", help="Worker processes.")  # fmt: skip
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Where the trials' files go (default: the temporary directory).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def torture(trials: int, seed: int, durability: str, jobs: int, workdir: str | None, as_json: bool) -> None:
    """Run a crash campaign: kills at every crash point and at random, power loss, torn writes,
    I/O errors and a full disk, each followed by recovery and a resumed run; exit 1 unless every
    counter is zero."""
    # Imported here: the campaign's machinery (fault VFS, harness, process pool) is not worth
    # loading for every other command.
    from journal.testing import torture as crash_campaign

    if workdir is not None:
        os.makedirs(workdir, exist_ok=True)
    with click.progressbar(length=trials, label=f"torture ({durability})", file=sys.stderr) as bar:
        report = crash_campaign.campaign(
            trials, seed=seed, durability=durability, jobs=jobs, workdir=workdir, progress=bar.update
        )
    output(report, [report], crash_campaign.report_lines(report), as_json=as_json, as_nl=False)
    if not report["ok"]:
        raise click.exceptions.Exit(1)
