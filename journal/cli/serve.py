"""``journal serve``: the read-only web viewer (DESIGN §15; docs/serve.md)."""

from __future__ import annotations

import webbrowser

import click

from journal.cli.app import main
from journal.cli.options import db_option, open_journal
from journal.cli.render import echo
from journal.store.target import redact


@main.command()
@db_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on. Anything but loopback is warned about: "
                   "the viewer has no login.")  # fmt: skip
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="The port (0: any free one).")  # fmt: skip
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Another name the viewer answers to (its Host header), besides the bound one "
                   "and localhost. Repeatable.")  # fmt: skip
@click.option("--open", "open_browser", is_flag=True, help="Open the viewer in a web browser.")
def serve(db: str, host: str, port: int, allow_hosts: tuple[str, ...], open_browser: bool) -> None:
    """Serve a read-only web viewer of the journal: sessions, transcripts, the scan, live following."""
    try:
        from journal.serve.app import Viewer  # here: the other commands need not load the viewer
    except ImportError as exc:
        raise click.ClickException(
            f"journal serve needs Starlette and uvicorn: python -m pip install 'agent-journal[serve]' ({exc})"
        ) from None

    open_journal(db, readonly=True).close()  # a missing path: `no such journal`, nothing created
    viewer = Viewer(db, host=host, port=port, allow_hosts=allow_hosts, log=lambda line: click.echo(line, err=True))
    try:
        if not viewer.loopback:
            echo(
                f"journal: warning: serving on {host}, not loopback: anyone who can reach it can read every "
                "session of this journal (the viewer has no login)",
                err=True,
            )
        echo(f"journal serve: {viewer.url} (read-only; {redact(db)}); Ctrl-C stops it")
        if open_browser:
            webbrowser.open(viewer.url)
        try:
            viewer.serve_forever()
        except KeyboardInterrupt:
            pass
    finally:
        viewer.server_close()
