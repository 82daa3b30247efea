"""The viewer's one stylesheet and one script, served from ``/static/`` (CSP: ``'self'`` only).

Kept as strings in a module, so they ship with the package whatever the install. The script
follows a session live (it opens the page's server-sent event stream and appends each row the
server rendered, escaped there like the rest of the page) and, on a timeline, copies the focused
bar's title into the page as text. No page depends on it.
"""

from __future__ import annotations

STYLE = """\
:root { color-scheme: light dark; --warn: #b45309; --risk: #b91c1c; --ok: #15803d; --muted: #6b7280;
        --line: #d1d5db; --bg2: rgba(127,127,127,.08); }
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; }
header { display: flex; gap: 1.5em; align-items: baseline; padding: .6em 1.2em; border-bottom: 1px solid var(--line); }
header nav a { margin-right: 1em; font-weight: 600; }
header nav a[aria-current] { text-decoration: none; border-bottom: 2px solid currentColor; }
.file { color: var(--muted); font-family: ui-monospace, monospace; font-size: 12px; }
main { padding: .6em 1.2em 3em; }
h1 { font-size: 1.3em; margin: .4em 0; } h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
.id, .call, .seq, .args, time, .meta, code { font-family: ui-monospace, monospace; font-size: 12.5px; }
.content, .args, .meta, .body { white-space: pre-wrap; overflow-wrap: anywhere; }
table.sessions { border-collapse: collapse; width: 100%; }
table.sessions th, table.sessions td { text-align: left; padding: .25em .6em; border-bottom: 1px solid var(--line);
                                       vertical-align: top; }
td.num { text-align: right; }
.pager { margin: .6em 0; color: var(--muted); } .pager a { margin-left: .8em; }
.tabs { margin: .8em 0; border-bottom: 1px solid var(--line); }
.tabs a { display: inline-block; padding: .3em .9em; margin-bottom: -1px; border: 1px solid transparent; }
.tabs a[aria-current] { border-color: var(--line); border-bottom-color: Canvas; font-weight: 600;
                        text-decoration: none; }
.ev, .msg { display: grid; grid-template-columns: 4.5em 7.5em 1fr auto; gap: .6em; padding: .2em .3em;
            border-bottom: 1px solid var(--bg2); align-items: baseline; }
.ev .seq, .msg .seq { text-align: right; color: var(--muted); text-decoration: none; }
.ev time { color: var(--muted); font-size: 11px; }
.label { font-weight: 600; }
.ev.d1 .label { padding-left: 1.2em; } .ev.d2 .label { padding-left: 2.4em; }
.ev.d1 .body { padding-left: 1.2em; } .ev.d2 .body { padding-left: 2.4em; }
.k-turn { background: var(--bg2); } .k-turn .label { color: var(--muted); }
.k-step .label, .k-step .body { color: var(--muted); }
.k-user .label { color: #1d4ed8; } .k-assistant .label { color: #7c3aed; }
.k-dispatch .label { color: #0e7490; } .k-late { background: rgba(180,83,9,.08); }
.k-compaction, .k-retract { background: rgba(124,58,237,.07); }
.ev:target, .msg:target { outline: 2px solid #2563eb; }
ul.calls { margin: .2em 0; padding-left: 1.2em; }
.tool { font-weight: 600; }
.status { color: var(--muted); margin-left: .4em; }
.marker { display: inline-block; padding: 0 .45em; border-radius: 3px; color: #fff; margin: 0 .3em; font-size: 12px; }
svg.bar { vertical-align: middle; margin-left: .4em; } .bar-calls { fill: var(--ok); } .bar-time { fill: var(--warn); }
td.risk { color: var(--risk); font-weight: 600; }
.marker.risk-unknown { background: var(--risk); } .marker.risk-not-started { background: var(--muted); }
.result.risk-unknown, .k-result.risk-unknown { background: rgba(185,28,28,.10); }
.warn { color: var(--warn); } .ok { color: var(--ok); } .error { color: var(--risk); }
.synthetic, .notes { color: var(--muted); }
.live { color: var(--muted); font-style: italic; }
.indeterminate { border: 1px solid var(--risk); border-radius: 4px; padding: .5em .7em; margin: .5em 0; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 0 1em; margin: .4em 0 0; }
dt { color: var(--muted); } dd { margin: 0; font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
.filter { margin: .6em 0; }
.fork-tree ul.tree, .fork-tree ul.tree ul { list-style: none; margin: .1em 0; padding-left: 1.3em; }
.fork-tree ul.tree { padding-left: 0; } .fork-tree li::before { content: "└ "; color: var(--muted); }
.fork-tree ul.tree > li::before { content: ""; } .fork-tree .here { font-weight: 600; }
.tl-summary, .tl-detail { color: var(--muted); }
.tl-detail { font-family: ui-monospace, monospace; font-size: 12px; white-space: pre-wrap; overflow-wrap: anywhere;
             min-height: 3em; border-top: 1px solid var(--line); padding-top: .4em; }
.tl-scroll { overflow-x: auto; }
.tl-key .key { display: inline-block; margin-right: 1em; font-size: 12px; }
.tl-key .key::before { content: ""; display: inline-block; width: 1.4em; height: .7em; margin-right: .35em;
  vertical-align: middle; background: #0e7490; }
.tl-key .key-step::before { background: #cbd5e1; } .tl-key .key-model::before { background: #7c3aed; }
.tl-key .key-error::before { background: var(--warn); } .tl-key .key-risk-unknown::before { background: var(--risk); }
.tl-key .key-risk-not-started::before { background: transparent; border: 1px dashed var(--muted); }
.tl-key .key-no-result::before { background: transparent; border: 2px dashed var(--risk); }
.tl-key .key-indeterminate::before { border: 2px solid #111827; background: var(--risk); }
.tl-key .key-crash::before { background: repeating-linear-gradient(45deg, var(--risk) 0 3px, transparent 3px 6px); }
.tl-key .key-late::before { background: var(--warn); width: .7em; transform: rotate(45deg); }
.tl-key .key-compaction::before { background: #a855f7; width: .7em; }
svg.timeline { display: block; font: 11px system-ui, sans-serif; }
svg.timeline text { fill: currentColor; } svg.timeline .axis { fill: var(--muted); font-size: 10px; }
svg.timeline .tick { stroke: var(--line); }
svg.timeline .lane-bg { fill: transparent; } svg.timeline .lane-bg.odd { fill: var(--bg2); }
svg.timeline .lane-label text { font-weight: 600; } svg.timeline .warn { fill: var(--warn); }
svg.timeline .bar.step .r { fill: #cbd5e1; } svg.timeline .bar.step-error .r { fill: var(--warn); }
svg.timeline .bar.step-open .r { fill: #fcd34d; }
svg.timeline .bar.model .r { fill: #7c3aed; }
svg.timeline .bar.tool .r { fill: #0e7490; } svg.timeline .bar.tool.st-error .r { fill: var(--warn); }
svg.timeline .bar.tool.risk-unknown .r { fill: var(--risk); }
svg.timeline .bar.tool.risk-not-started .r, svg.timeline .bar.tool.risk-other .r { fill: transparent;
  stroke: var(--muted); stroke-dasharray: 3 2; }
svg.timeline .bar.tool.st-no_result .r { fill: transparent; stroke: var(--risk); stroke-width: 2;
  stroke-dasharray: 4 2; }
svg.timeline .bar.tool.state-indeterminate .r { stroke: #111827; stroke-width: 2.5; }
svg.timeline .bar.tool.state-resolved .r { stroke: var(--ok); stroke-width: 2; }
svg.timeline .bar-label { font-size: 10px; } svg.timeline .bar-label.risk { fill: var(--risk); font-weight: 700; }
svg.timeline .bar.tool.risk-not-started .bar-label { fill: var(--muted); }
svg.timeline .bar.group .r { fill: #64748b; } svg.timeline .bar.group.has-risk .r { fill: #94a3b8; }
svg.timeline .hatch { fill: var(--risk); } svg.timeline .crash-gap { opacity: .55; }
svg.timeline .mark.late .shape { fill: var(--warn); } svg.timeline .mark.compaction .shape { fill: #a855f7; }
svg.timeline .mark.resolution .shape { fill: var(--ok); }
svg.timeline a:focus { outline: none; }
svg.timeline a:focus .r, svg.timeline a:hover .r, svg.timeline a:focus .shape, svg.timeline a:hover .shape,
svg.timeline a:focus .crash-gap { stroke: #2563eb; stroke-width: 2.5; stroke-dasharray: none; }
"""

SCRIPT = """\
"use strict";
// Live following: the server renders (and escapes) each new row; this only places it.
(function () {
  const log = document.querySelector("[data-follow]");
  if (!log || !window.EventSource) return;
  const status = document.getElementById("live-status");
  const say = (words) => { if (status) status.textContent = words; };
  const source = new EventSource(log.dataset.follow);
  source.onopen = () => say("following live: new events appear here");
  source.onerror = () => say("connection lost; reconnecting\u2026");
  source.addEventListener("gone", () => { source.close(); say("the session is gone"); });
  source.onmessage = (message) => {
    const row = JSON.parse(message.data);
    if (document.getElementById("e" + row.seq)) return;  // already on the page
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
    const empty = log.querySelector(".empty");
    if (empty) empty.remove();
    log.insertAdjacentHTML("beforeend", row.html);
    if (row.call !== null && row.status) {
      for (const holder of document.querySelectorAll("[data-call]")) {
        const old = holder.dataset.call === row.call && holder.querySelector(".status");
        if (old) old.outerHTML = row.status;
      }
    }
    if (atBottom) window.scrollTo(0, document.body.scrollHeight);
  };
})();
// The timeline: the focused (or hovered) bar's title, copied as text into the line below it.
(function () {
  const detail = document.getElementById("tl-detail");
  if (!detail) return;
  const show = (event) => {
    const bar = event.target instanceof Element ? event.target.closest("[data-seq]") : null;
    const title = bar && bar.querySelector("title");
    if (title) detail.textContent = title.textContent;
  };
  document.addEventListener("focusin", show);
  document.addEventListener("mouseover", show);
})();
"""
