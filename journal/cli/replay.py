"""``journal replay``: run an agent against a recorded session (``journal.testing.replay``), and
with ``--torture N`` kill it at every crash point it reaches (``journal.testing.replay_torture``)."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from journal.cli.app import main
from journal.cli.options import open_journal
from journal.cli.output import print_json
from journal.cli.render import echo
from journal.errors import JournalError


class _BadInput(click.ClickException):
    """Input the replay cannot start from (an unknown session, a damaged case, an agent that
    does not import): one line, exit status 2, nothing written."""

    exit_code = 2


def _policy(default: str, per_tool: tuple[str, ...]) -> str | dict[str, str]:
    if not per_tool:
        return default
    policy: dict[str, str] = {}
    for spec in per_tool:
        name, sep, mode = spec.partition("=")
        if not sep or not name or mode not in ("recorded", "real"):
            raise click.BadParameter(f"expected NAME=recorded or NAME=real, not {spec!r}", param_hint="--tool")
        policy[name] = mode
    if default != "recorded":
        raise click.BadParameter("give --tools real or --tool NAME=MODE, not both", param_hint="--tool")
    return policy


@main.command()
@click.argument("session", required=False)
@click.option("--db", envvar="JOURNAL_DB", type=click.Path(dir_okay=False), default=None,
              help="The journal holding the recorded session (or set JOURNAL_DB); read only.")  # fmt: skip
@click.option("--from", "case", type=click.Path(dir_okay=False), default=None,
              help="Replay the session of a `journal export --session` file instead of a journal's.")  # fmt: skip
@click.option("--agent", "agent_spec", required=True, metavar="MODULE:FUNCTION",
              help="The agent: agent(journal, session_id, inputs, model, tools) (see docs/cli.md).")  # fmt: skip
@click.option("--into", type=click.Path(dir_okay=False), default=None,
              help="Replay onto this new journal, a path or DSN (default: a temporary one, removed "
                   "after).")  # fmt: skip
@click.option("--tools", "tools_mode", type=click.Choice(["recorded", "real"]), default="recorded", show_default=True,
              help="Answer tool calls from the recording, or run them for real.")  # fmt: skip
@click.option("--tool", "per_tool", multiple=True, metavar="NAME=MODE",
              help="Per tool: NAME=recorded or NAME=real (repeatable; other tools: recorded).")  # fmt: skip
@click.option("--turns", type=click.IntRange(min=1), default=None, help="Replay the first N turns only.")
@click.option("--torture", "trials", type=click.IntRange(min=1), default=None, metavar="N",
              help="Kill the replayed agent N times: at every crash point it reaches, at random, "
                   "in recovery.")  # fmt: skip
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of --torture's random draws.")
@click.option("--jobs", type=click.IntRange(min=1), default=lambda: min(os.cpu_count() or 1, 4),
              show_default="CPU count, at most 4", help="Worker processes for --torture.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def replay(
    session: str | None, db: str | None, case: str | None, agent_spec: str, into: str | None, tools_mode: str,
    per_tool: tuple[str, ...], turns: int | None, trials: int | None, seed: int, jobs: int, as_json: bool,
) -> None:  # fmt: skip
    """Run an agent against a recorded session and print the verdict: matched, or diverged at
    turn N step M with the diff of what was recorded and what the agent sent. Exit 1 when it
    diverged.

    The session comes from --db (read only) or from a --from case file; the agent runs on a fresh
    journal with the recording's scripted model, its tool calls answered from the recording
    unless --tools/--tool say to run them. With --torture N the agent is then killed N times
    (SIGKILLed child processes) at every crash point it reaches, restarted with recover() and the
    turns still to play, and judged by journal torture's counters: exit 1 unless all are zero."""
    from journal.testing import replay as replaying

    if (db is None) == (case is None):
        raise click.UsageError("give the recording with --db (and SESSION) or with --from FILE")
    if db is not None and session is None:
        raise click.UsageError("--db needs the SESSION to replay")
    if into is not None and trials is not None:
        raise click.UsageError("--into and --torture: the campaign makes a journal per trial")
    policy = _policy(tools_mode, per_tool)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # an agent module beside the caller imports, as with python -m
    try:
        agent = replaying.load_agent(agent_spec)
        recording = _recording(replaying, db, case, session, turns)
    except JournalError as exc:
        raise _BadInput(str(exc).splitlines()[0]) from exc
    if into is not None and os.path.lexists(into):
        raise _BadInput(f"--into {into} exists: the replay writes a fresh journal")
    verdict = replaying.run_replay(recording, agent, into=into, tools=policy)
    if trials is None or not verdict.matched:
        if as_json:
            print_json(verdict.to_dict())
        else:
            echo(*verdict.lines())
        if not verdict.matched:
            raise click.exceptions.Exit(1)
        return
    _torture(recording, agent_spec, policy, trials, seed=seed, jobs=jobs, as_json=as_json, verdict=verdict.to_dict(),
             case=case)  # fmt: skip


def _recording(replaying: Any, db: str | None, case: str | None, session: str | None, turns: int | None) -> Any:
    if case is not None:
        found = replaying.Recording.from_export(case, session)
        return found if turns is None else replaying.Recording.from_events(found.session_id, found.events, turns=turns)
    assert db is not None and session is not None
    try:
        opened = open_journal(db, readonly=True)
    except click.ClickException as exc:
        raise _BadInput(exc.format_message()) from exc
    with opened as j:
        return replaying.Recording.load(j, session, turns=turns)


def _torture(
    recording: Any, agent: str, policy: Any, trials: int, *, seed: int, jobs: int, as_json: bool,
    verdict: dict[str, Any], case: str | None,
) -> None:  # fmt: skip
    from journal.testing import replay_torture

    workload = replay_torture.replay(recording, agent, tools=policy)
    with click.progressbar(length=trials, label=f"replay --torture ({recording.session_id})", file=sys.stderr) as bar:
        report = replay_torture.campaign(workload, trials, seed=seed, jobs=jobs, progress=bar.update)
    report["replay"]["case"] = case  # not the temporary copy the children read, removed on exit
    if as_json:
        print_json({**report, "verdict": verdict})
    else:
        echo(*replay_torture.report_text(report))
    if not report["ok"]:
        raise click.exceptions.Exit(1)
