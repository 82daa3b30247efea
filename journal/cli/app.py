"""The ``journal`` group, and the rule that every failure is one line on stderr (DESIGN §10).

The command modules register themselves on ``main``; this module imports none of them, so
``journal/cli/__init__.py`` can import it first and the commands after, with no cycle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from journal.cli.render import echo
from journal.errors import JournalError
from journal.store.target import redact


def _fail(message: str, code: int) -> click.exceptions.Exit:
    """Print one escaped ``journal: ...`` line on stderr, any DSN's password hidden (a usage
    error quotes the --db it was given); the caller raises what this returns."""
    echo(redact(f"journal: {message}"), err=True)
    return click.exceptions.Exit(code)


@contextlib.contextmanager
def _one_line_failures() -> Iterator[None]:
    """Turn every failure into one line on stderr and an exit status: 1, or 2 for usage."""
    try:
        yield
    except click.exceptions.Exit:
        raise
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: a bare `journal` shows its help
            raise
        command = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        raise _fail(f"{exc.format_message()}{command}", exc.exit_code) from None
    except click.ClickException as exc:
        raise _fail(exc.format_message(), exc.exit_code) from None
    except click.Abort:
        raise _fail("aborted", 1) from None
    except JournalError as exc:
        raise _fail(str(exc), 1) from None
    except UnicodeEncodeError as exc:  # an argument that was not UTF-8 (Python keeps its bytes as surrogates)
        raise _fail(f"{exc.encoding} cannot encode {exc.object[exc.start : exc.end]!r} in {exc.object!r}", 1) from None
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename is not None else ""
        raise _fail(f"{exc.strerror or exc}{where}", 1) from None
    except Exception as exc:  # the contract: one line, never a traceback, even for a bug
        raise _fail(f"unexpected {type(exc).__name__}: {exc}", 1) from None


class _Group(click.Group):
    """A group whose parsing and commands fail in one line (usage errors included)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        with _one_line_failures():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _one_line_failures():
            return super().invoke(ctx)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agent-journal")
def main() -> None:
    """An AI agent's sessions in one crash-safe SQLite file."""
