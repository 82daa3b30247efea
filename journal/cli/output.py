"""The one way a command prints its result: text for people, ``--json`` or ``--nl`` for machines.

The JSON documents and lines are a stable contract (docs/cli.md). JSON goes through
``journal.escape.dumps`` and text through ``render.echo``, so stored content never reaches the
terminal raw (G14).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import click

from journal.cli.render import echo
from journal.escape import dumps


def output_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` and ``--nl``, shared by every read command (passed as ``as_json``, ``as_nl``)."""
    fn = click.option("--nl", "as_nl", is_flag=True, help="One JSON object a line.")(fn)
    fn = click.option("--json", "as_json", is_flag=True, help="One JSON document.")(fn)
    return fn


def output(document: Any, items: Iterable[Any], lines: Iterable[object], *, as_json: bool, as_nl: bool) -> None:
    """Print ``document`` (``--json``), or each of ``items`` on its own line (``--nl``), or ``lines``.

    Only the chosen form is consumed, so a caller passes generators for work it need not do."""
    if as_json:
        print_json(document)
    elif as_nl:
        for item in items:
            click.echo(dumps(item))
    else:
        echo(*lines)


def print_json(document: Any) -> None:
    """``document`` as one indented JSON document (what ``--json`` prints)."""
    click.echo(dumps(document, indent=2))
