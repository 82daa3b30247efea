"""The timeline in a real browser: Debian's headless Chromium, driven by Playwright.

The demo's crashed session (``journal demo``, killed mid-tool-call and recovered) draws one bar
per tool call of its log with the right ``data-risk``, the call that may have run marked; focus
shows a bar's event as text, and a bar opens its event in the log. SVG payloads in the session
id, tool names, call ids and arguments run nothing (no dialog, no script element, no ``on*``
attribute from content) and show literally. A screenshot of the timeline is written. Skipped,
with the reason, when Playwright or chromium is missing (as tests/test_serve_browser.py).
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import journal
from journal.serve.app import Viewer
from journal.serve.screenshot import demo_journal, screenshot
from tests import test_serve_browser as _browser_tests  # skips this module too without Playwright or chromium
from tests.test_serve import serving
from tests.test_serve_timeline import HOSTILE_ARGS, HOSTILE_CALL, HOSTILE_SESSION, HOSTILE_TOOL, build_hostile

browser, page = _browser_tests.browser, _browser_tests.page  # the same fixtures


def timeline_at(viewer: Viewer, session_id: str) -> str:
    return f"{viewer.url}sessions/{urllib.parse.quote(session_id, safe='')}/timeline"


# What content could have added to the page: script elements other than the viewer's one, and
# any on* attribute on any element (inline handlers), found by the browser's own DOM.
FOREIGN = """() => {
  const scripts = [...document.querySelectorAll("script")].map((s) => s.getAttribute("src"));
  const handlers = [];
  for (const el of document.querySelectorAll("*")) {
    for (const a of el.attributes) if (a.name.toLowerCase().startsWith("on")) handlers.push(el.tagName + " " + a.name);
  }
  const links = [...document.querySelectorAll("a")].map((a) => a.getAttribute("href"));
  return {scripts, handlers, links};
}"""


def test_the_demo_crash_timeline_has_one_bar_per_tool_call_with_its_risk(tmp_path: Path, page: Any) -> None:
    db, session_id = demo_journal(str(tmp_path))
    with journal.open(db, readonly=True) as j:
        in_log = set()
        for e in j.events(session_id):
            if e.type == "assistant_message":
                in_log.update(c["id"] for c in e.data.get("tool_calls") or [])
            elif e.type == "tool_call":
                in_log.add(e.data["id"])
    with serving(Path(db)) as viewer:
        page.goto(f"{viewer.url}sessions/{urllib.parse.quote(session_id, safe='')}")
        page.click("nav.tabs >> text=Timeline")
        page.wait_for_selector("svg.timeline")
        bars = page.locator("svg.timeline a[data-call-id]")
        drawn = {
            bars.nth(i).get_attribute("data-call-id"): bars.nth(i).get_attribute("data-risk")
            for i in range(bars.count())
        }
        assert bars.count() == len(in_log) and set(drawn) == in_log  # one bar per tool call of the log
        assert drawn["t1-rm"] == "tool_outcome_unknown"  # delete_file: dispatched, then the kill
        assert drawn["t1-log"] == "tool_not_started"  # append_note: never dispatched
        assert {drawn[c] for c in in_log - {"t1-rm", "t1-log"}} == {"none"}
        risky = page.locator('svg.timeline a[data-call-id="t1-rm"]')
        assert "risk-unknown" in (risky.get_attribute("class") or "")
        assert "MAY HAVE RUN" in (risky.locator("text").text_content() or "")
        assert page.locator("svg.timeline a.mark.crash").count() == 1
        # focus shows the bar's event in the page (the served script copies its title, as text)
        risky.focus()
        detail = page.locator("#tl-detail")
        page.locator("#tl-detail").filter(has_text="t1-rm").wait_for()  # not wait_for_function: the CSP has no eval
        assert "MAY HAVE RUN — verify before retrying" in detail.inner_text()
        # and the bar opens its event on the log page
        risky.click()
        page.wait_for_url("**/sessions/*?since=*#e*")
        seq = page.url.rsplit("#e", 1)[1]
        assert page.locator(f"#e{seq} .call").inner_text() == "t1-rm"
    assert page.problems == []


def test_g14_svg_payloads_stay_text_and_run_nothing(db_path: Path, page: Any) -> None:
    with journal.open(db_path) as j:
        build_hostile(j)
    with serving(db_path) as viewer:
        page.goto(timeline_at(viewer, HOSTILE_SESSION))
        page.wait_for_selector("svg.timeline")
        for bar in range(page.locator("svg.timeline a").count()):  # hover and focus every element drawn
            element = page.locator("svg.timeline a").nth(bar)
            element.hover(force=True)  # force: a crash gap lies under the bars drawn on it
            element.focus()
        found = page.evaluate(FOREIGN)
        assert found["scripts"] == ["/static/live.js"]
        assert found["handlers"] == []
        assert all(link.startswith("/") and not link.startswith("//") for link in found["links"]), found["links"]
        assert page.locator("svg.timeline foreignObject, svg.timeline script, main img").count() == 0
        titles = page.eval_on_selector_all("svg.timeline title", "(ts) => ts.map((t) => t.textContent).join('\\n')")
        for payload in (HOSTILE_TOOL, HOSTILE_CALL, HOSTILE_ARGS["x"], "javascript:alert(1)"):
            assert payload in titles, payload
        ids = page.eval_on_selector_all("svg.timeline a[data-call-id]", "(xs) => xs.map((a) => a.dataset.callId)")
        assert HOSTILE_CALL in ids and "]]>" in ids
        labels = page.eval_on_selector_all("svg.timeline .bar-label", "(xs) => xs.map((t) => t.textContent)")
        assert any(label.startswith("<svg onload=alert(1)>") for label in labels)
        page.locator(f'svg.timeline a[data-call-id="{HOSTILE_CALL.replace(chr(34), chr(92) + chr(34))}"]').first.focus()
        assert HOSTILE_TOOL in page.locator("#tl-detail").inner_text()
        assert HOSTILE_SESSION in page.locator("h1").inner_text()
    assert page.problems == []


def test_a_screenshot_of_the_timeline(tmp_path: Path, browser: Any) -> None:
    db, session_id = demo_journal(str(tmp_path))
    out = screenshot(db, session_id, str(tmp_path / "timeline.png"), browser=browser, timeline=True)
    data = Path(out).read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
