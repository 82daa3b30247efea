"""``journal serve`` in a real browser: Debian's headless Chromium, driven by Playwright.

The demo's crashed session shows its risk on the right call; a page follows a session another
process appends to; hostile content stays text and runs no script (CSP and escaping both);
forks navigate both ways; and a screenshot of a session page is written. Skipped, with the
reason, when Playwright or chromium is missing.
"""

from __future__ import annotations

import re
import shutil
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.serve.app import Viewer
from journal.serve.screenshot import demo_journal, screenshot
from tests.conftest import python_child
from tests.test_serve import HOSTILE, HOSTILE_ID, build_story, serving

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no chromium on PATH (Debian: apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    opened = context.new_page()
    opened.set_default_timeout(15_000)  # a bound on waiting (a loaded machine), never a measure
    problems: list[str] = []
    opened.on("dialog", lambda dialog: (problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.problems = problems
    yield opened
    context.close()


def at(viewer: Viewer, session_id: str, **query: str) -> str:
    q = urllib.parse.urlencode(query)
    return f"{viewer.url}sessions/{urllib.parse.quote(session_id, safe='')}" + (f"?{q}" if q else "")


def test_the_demo_crash_shows_may_have_run_on_the_call_that_may_have_run(tmp_path: Path, page: Any) -> None:
    db, session_id = demo_journal(str(tmp_path))
    with serving(Path(db)) as viewer:
        page.goto(at(viewer, session_id))
        # delete_file [t1-rm] ran before the kill, its result lost: MAY HAVE RUN
        risky = page.locator(".ev.k-result.risk-unknown")
        assert risky.count() == 1
        assert risky.locator(".call").inner_text() == "t1-rm"
        assert "MAY HAVE RUN — verify before retrying" in risky.locator(".marker").inner_text()
        # append_note [t1-log] was never dispatched: did not run
        skipped = page.locator(".ev.k-result.risk-not-started")
        assert skipped.locator(".call").inner_text() == "t1-log"
        assert skipped.locator(".marker").inner_text() == "did not run"
        # and the assistant's request shows each call's fate beside it
        assert "MAY HAVE RUN" in page.locator('li[data-call="t1-rm"]').inner_text()
        assert "did not run" in page.locator('li[data-call="t1-log"]').inner_text()
        assert "MAY HAVE RUN" not in page.locator('li[data-call="t1-ls"]').inner_text()
        assert page.locator(".marker.risk-unknown").count() == 3  # the request, the dispatch, the result
    assert page.problems == []


APPENDER = """
import sys, journal
db, session_id = sys.argv[1:3]
with journal.open(db) as j:
    j.append(session_id, "user_message", {"content": "hello from another process"})
    print("appended", flush=True)
    j.append(session_id, "user_message", {"content": sys.argv[3]})
    print("appended", flush=True)
"""
LIVE_S = 15  # a bound on waiting for the page to show it, not a measure (bench/serve.py --pages times it)


def test_live_following_shows_events_another_process_appends(db_path: Path, page: Any) -> None:
    with journal.open(db_path) as j:
        j.create_session("live")
        j.append("live", "user_message", {"content": "first"})
    with serving(db_path) as viewer:
        page.goto(at(viewer, "live"))
        # A locator's wait, not wait_for_function: that one evaluates its text in the page, which
        # the viewer's CSP refuses (no 'unsafe-eval') whenever the first check is not yet true.
        page.locator("#live-status").filter(has_text=re.compile(r"^\s*following live")).wait_for(timeout=LIVE_S * 1000)
        child = python_child(APPENDER, str(db_path), "live", HOSTILE)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "appended"
        page.locator("#e1").filter(has_text="hello from another process").wait_for(timeout=LIVE_S * 1000)
        # a hostile event arriving live is text too, and runs nothing
        page.locator("#e2").wait_for(timeout=LIVE_S * 1000)
        assert "<script>window.pwned=1</script>" in page.locator("#e2").inner_text()
        assert page.evaluate("window.pwned") is None
        assert child.wait(timeout=30) == 0
    assert page.problems == []


def test_g14_hostile_content_renders_as_text_and_runs_no_script(db_path: Path, page: Any) -> None:
    build_story(db_path)
    with serving(db_path) as viewer:
        for url in (
            viewer.url,
            f"{viewer.url}scan",
            at(viewer, HOSTILE_ID),
            at(viewer, HOSTILE_ID, view="messages"),
            at(viewer, HOSTILE_ID, view="provider"),
        ):
            page.goto(url)
            page.wait_for_load_state("load")
            assert page.evaluate("window.pwned") is None, url
            assert page.locator("main img, main svg, main script, main a[href^='javascript']").count() == 0, url
        page.goto(at(viewer, HOSTILE_ID))
        shown = page.locator("#e1 .content").inner_text()
        assert shown == HOSTILE.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e").replace("\n", "\\n")
        assert HOSTILE_ID in page.locator("h1").inner_text()
        page.hover("text=<svg onload=window.pwned=1>")  # a tool name: hovering it does nothing either
        assert page.evaluate("window.pwned") is None
    assert page.problems == []


def test_forks_navigate_from_parent_to_child_and_back(db_path: Path, page: Any) -> None:
    build_story(db_path)
    with serving(db_path) as viewer:
        page.goto(at(viewer, "plain"))
        page.click("a.child")
        assert urllib.parse.urlsplit(page.url).path == "/sessions/plain-fork"
        assert "fork of plain" in page.locator("p.fork").inner_text()
        page.click("a.parent")
        assert urllib.parse.urlsplit(page.url).path == "/sessions/plain"
        assert page.locator("a.child").inner_text() == "plain-fork"
        fork_point = page.url.rsplit("#e", 1)[1]
        assert page.locator(f"#e{fork_point}").is_visible()  # the parent opens at the fork point


def test_a_screenshot_of_a_session_page(tmp_path: Path, browser: Any) -> None:
    db, session_id = demo_journal(str(tmp_path))
    out = screenshot(db, session_id, str(tmp_path / "session.png"), browser=browser)
    data = Path(out).read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
