"""A picture of the viewer: ``python -m journal.serve.screenshot [--timeline] OUT.png``.

Runs ``journal demo`` (a real agent session killed mid-tool-call, then recovered) into a
temporary directory, forks the session at the crashed turn's end, serves the file on a free
loopback port and has headless Chromium (through Playwright, with the system ``chromium``) take
a full-page screenshot of the session page (with ``--timeline``, of its timeline).
``tests/test_serve_browser.py`` and ``tests/test_serve_timeline_browser.py`` call ``screenshot``;
the pictures of the docs (docs/serve.png, docs/serve-timeline.png) are made by this module's
command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from typing import Any

import journal
from journal.serve.app import run


def browser_executable() -> str:
    """The system Chromium, or an ImportError/RuntimeError that says what is missing."""
    import playwright.sync_api  # noqa: F401 - fails early, with the name of what to install

    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise RuntimeError("no chromium on PATH (Debian: apt-get install chromium)")
    return found


def screenshot(
    db: str, session_id: str, out: str, *, browser: Any = None, width: int = 1280, timeline: bool = False
) -> str:
    """Serve ``db`` and write a full-page PNG of ``session_id``'s page (or its timeline) to ``out``.

    ``browser``: a Playwright ``Browser`` to use (a caller that already runs Playwright, such as
    a test, must pass its own: there is one sync Playwright per thread); else one is launched."""
    viewer = run(db, host="127.0.0.1", port=0)
    path = f"sessions/{urllib.parse.quote(session_id, safe='')}" + ("/timeline" if timeline else "")
    ready = "svg.timeline" if timeline else ".ev"
    try:
        if browser is not None:
            _take(browser, viewer.url + path, out, width, ready)
            return out
        from playwright.sync_api import sync_playwright

        executable = browser_executable()
        with sync_playwright() as p:
            launched = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            try:
                _take(launched, viewer.url + path, out, width, ready)
            finally:
                launched.close()
    finally:
        viewer.shutdown()
        viewer.server_close()
    return out


def _take(browser: Any, address: str, out: str, width: int, ready: str) -> None:
    page = browser.new_page(viewport={"width": width, "height": 800})
    try:
        page.goto(address)
        page.wait_for_selector(ready)
        page.screenshot(path=out, full_page=True)
    finally:
        page.close()


def demo_journal(directory: str) -> tuple[str, str]:
    """``journal demo`` into ``directory`` (in a child process, as a user runs it), plus a fork
    of its session at the end of the crashed turn; returns ``(db, session id)``."""
    db = os.path.join(directory, "demo.db")
    subprocess.run(
        [sys.executable, "-m", "journal.cli", "demo", "--db", db], check=True, capture_output=True, timeout=120
    )
    with journal.open(db) as j:
        (session,) = j.sessions()
        crashed_turn_end = next(e.seq for e in j.events(session.id) if e.type == "turn_end")
        j.fork(session.id, crashed_turn_end, id=f"{session.id}-retry")
    return db, session.id


def main(argv: list[str]) -> int:
    timeline = argv[:1] == ["--timeline"]
    args = argv[1:] if timeline else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m journal.serve.screenshot [--timeline] OUT.png", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="journal-screenshot-") as directory:
        db, session_id = demo_journal(directory)
        print(screenshot(db, session_id, args[0], timeline=timeline))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
