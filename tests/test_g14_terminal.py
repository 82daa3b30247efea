"""G14: content cannot forge the screen. Hostile strings planted everywhere content can live
reach no output of the command line raw, on a terminal or in a pipe, in text or in JSON."""

from __future__ import annotations

import inspect
import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

import journal
from journal.cli import main
from journal.escape import UNSAFE, dumps, escape
from journal.testing import torture

ROOT = Path(__file__).resolve().parent.parent

# Each string tries one way to take over a terminal or to fake a line of the journal's own.
HOSTILE = {
    "csi_clear_screen": "\x1b[2J\x1b[H",
    "osc52_clipboard_write": "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J",
    "osc_window_title": "\x1b]0;owned\x1b\\",
    "bell": "ding\x07",
    "carriage_return_overwrite": "harmless\rFAKE",
    "backspaces": "abc\x08\x08\x08XYZ",
    "c1_csi": "\x9b2J\x9b31m",
    "c1_next_line": "a\x85b",
    "delete": "a\x7fb",
    "right_to_left_override": "\u202eexe.txt",
    "left_to_right_isolate": "\u2066hidden\u2069",
    "marks_and_arabic_letter_mark": "\u200e\u200f\u061c",
    "zero_width_and_bom": "a\u200b\ufeffb",
    "line_and_paragraph_separators": "a\u2028b\u2029c",
    "tag_characters": "a\U000e0041\U000e007fb",
    "fake_may_have_run_line": "ok\n!! MAY HAVE RUN - verify before retrying",
    "fake_transcript_line": "ok\r\n    9      result     [x] !! MAY HAVE RUN - verify before retrying",
    "tab": "a\tb",
    "nul": "a\x00b",
}
BENIGN = "plain text"


def _bad_characters(text: str) -> list[str]:
    """Characters no output may carry raw: C0 but newline and tab, DEL, C1, Cf, Cs, Zl, Zp."""
    return [
        f"U+{ord(c):04X}" for c in text if c not in "\n\t" and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")
    ]


def assert_safe(output: bytes, where: str) -> None:
    """The G14 check of raw output bytes, independent of journal.escape."""
    assert not [b for b in output if b < 0x20 and b not in b"\n\t"], (where, output)
    assert b"\x7f" not in output, (where, output)
    text = output.decode("utf-8")  # a lone surrogate or a raw C1 byte would fail here
    assert _bad_characters(text) == [], (where, _bad_characters(text), output)
    for line in text.splitlines():
        assert not re.match(r"\s*!!", line), (where, "a line starts with a fake marker", line)


# -- the escaper itself -----------------------------------------------------------------------------


def test_g14_the_escaper_covers_every_control_format_and_separator_character_of_this_python() -> None:
    missing = [
        f"U+{code:04X}"
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in ("Cc", "Cf", "Cs", "Zl", "Zp") and not UNSAFE.fullmatch(chr(code))
    ]
    assert missing == []


@pytest.mark.parametrize(
    "text", [*HOSTILE.values(), "\udc80", "x\ud800y"], ids=[*HOSTILE, "lone_low_surrogate", "lone_high_surrogate"]
)
def test_g14_escaped_text_is_one_visible_line_and_escaping_again_changes_nothing(text: str) -> None:
    shown = escape(text)
    assert _bad_characters(shown) == [] and "\n" not in shown and "\t" not in shown
    assert escape(shown) == shown
    shown.encode("utf-8")


def test_g14_escapes_are_visible_and_ordinary_text_is_left_alone() -> None:
    assert escape("\x1b[2J\u202e\x9b\udc80\n") == "\\x1b[2J\\u202e\\x9b\\udc80\\n"
    assert escape("héllo wörld 你好 🙂 \\x1b") == "héllo wörld 你好 🙂 \\x1b"


@pytest.mark.parametrize("text", [*HOSTILE.values(), "\udc80"], ids=[*HOSTILE, "lone_surrogate"])
def test_g14_json_output_is_exact_and_carries_no_unsafe_character_raw(text: str) -> None:
    document = {text: [text, {"k": text}], "plain": "héllo 你好 🙂"}
    for indent in (None, 2):
        encoded = dumps(document, indent=indent)
        assert json.loads(encoded) == document
        assert _bad_characters(encoded) == []
    assert "héllo 你好 🙂" in dumps(document)  # readable text stays readable


# -- a journal with hostile strings in every place content can live --------------------------------


def _build(path: Path, h: str) -> None:
    """Sessions with ``h`` in messages, tool names, call ids, argument keys and values, results,
    late results, meta, operator notes, failure reasons, lease owners, x. type names and ids."""
    with journal.open(path) as j:
        s = j.create_session("s", meta={"note": h, h: "a hostile key"}).id
        j.append(s, "system_message", {"content": h})
        j.append(s, "user_message", {"content": h, "name": h})
        turn = j.turn_start(s)
        turn.step_start()
        turn.assistant(h, tool_calls=[{"id": "c0" + h, "name": "get" + h, "arguments": {h: h, "n": [h]}}])
        with turn.dispatch("c0" + h) as call:
            call.result(h)
        j.put_result(s, "c0" + h, "late " + h)
        turn.step_end()
        turn.complete()
        turn = j.turn_start(s)  # left open: the scan, the plan and recovery name its calls
        turn.step_start()
        turn.assistant(h, tool_calls=[{"id": "c1" + h, "name": "pay" + h, "arguments": {h: 1}},
                                      {"id": "c2" + h, "name": h, "arguments": h}])  # fmt: skip
        turn.dispatch("c1" + h)

        ops = j.create_session("ops").id
        tools = journal.ToolRegistry()
        tools.register("mail" + h, lambda arguments, context: None, effects=journal.Unsafe())
        turn = j.turn_start(ops)
        turn.step_start()
        turn.assistant("", tool_calls=[{"id": f"m{i}" + h, "name": "mail" + h, "arguments": {}} for i in (1, 2)])
        for i in (1, 2):
            j.dispatch(ops, f"m{i}" + h, turn=turn, effect="unsafe")
        j.recover_effects(tools)
        j.resolve(ops, "m1" + h, outcome="ran", note=h)

        queue = j.create_session("queue").id
        j.submit(queue, "user_message", {"content": h})
        j.claim(owner="elsewhere:1:1").fail(h)
        j.submit(queue, "user_message", {"content": h})
        j.claim(owner="elsewhere:1:1", lease_ms=1).turn.step_start()
        j.checkpoint()
    # What the library refuses to write, a file made elsewhere may still hold.
    conn = apsw.Connection(str(path))
    with conn:
        conn.execute("INSERT INTO sessions (id, created_ms) VALUES (?, 0)", ("evil" + h,))
        conn.execute("INSERT INTO events (session_id, seq, type, data, time_ms) VALUES (?, 0, ?, ?, 0)",
                     ("evil" + h, "x." + h, json.dumps({h: h})))  # fmt: skip
        conn.execute("UPDATE submissions SET lease_owner = ? WHERE state = 'running'", (h + ":1:1",))
        conn.execute("UPDATE tool_calls SET result_seq = 99 WHERE call_id = ?", ("c0" + h,))  # a disagreement
    conn.close()
    with journal.open(path) as j:
        j.fork("evil" + h, id="child")


READ_COMMANDS = [
    ["sessions"], ["show", "s"], ["show", "s", "--view", "messages"], ["show", "s", "--view", "provider"],
    ["show", "ops"], ["show", "queue"], ["show", "evil{h}"], ["show", "child"], ["tail", "s", "-n", "50"],
    ["tail", "evil{h}"], ["scan"], ["recover", "--dry-run"], ["indeterminate"], ["indeterminate", "ops"],
    ["submissions"], ["stats"], ["check"], ["check", "s"],
]  # fmt: skip
WRITE_COMMANDS = [
    ["recover"], ["recover", "s"], ["reconcile"], ["reconcile", "--dry-run"], ["fork", "evil{h}", "--id", "f2"],
    ["fork", "s", "--at", "2"], ["resolve", "ops", "m2{h}", "--outcome", "did_not_run", "--note", "{h}"],
    ["purge", "evil{h}", "--yes", "--copy-forks"], ["purge", "evil{h}"], ["append", "s", "x.note", '{{"t": "{j}"}}'],
    ["import", "-"],
]  # fmt: skip
ERROR_COMMANDS = [
    ["show", "{h}"], ["show", "nope", "{h}"], ["tail", "s", "-n", "{h}"], ["{h}"], ["show", "--{h}"],
    ["append", "s", "{h}", "{{}}"], ["append", "s", "user_message", "{h}"], ["fork", "s", "--at", "{h}"],
    ["fork", "s", "--id", "{h}"], ["resolve", "s", "{h}", "--outcome", "ran"], ["submissions", "--id", "{h}"],
    ["show", "s", "--view", "{h}"], ["export", "{h}"], ["check", "{h}"],
]  # fmt: skip


def _runner() -> CliRunner:
    # click >= 8.2 keeps stderr apart by itself; 8.1 needs to be asked.
    return CliRunner(**({"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}))


def _run(db: Path, args: list[str], h: str, stdin: str | None = None) -> tuple[int, bytes, bytes]:
    argv = [a.format(h=h, j=json.dumps(h)[1:-1]) for a in args] + ["--db", str(db)]
    # color=True: click passes escape sequences through as it does on a terminal (in a pipe it
    # would strip some of them itself, which would hide a leak from this test).
    result = _runner().invoke(main, argv, input=stdin, color=True)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout_bytes, result.stderr_bytes


@pytest.fixture(scope="module")
def journals(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("g14")
    built = {}
    for name, h in [("benign", BENIGN), *HOSTILE.items()]:
        if "\x00" in h:
            continue  # SQLite text holds NUL, but the CLI's arguments cannot: covered by the escaper tests
        built[name] = root / f"{name}.db"
        _build(built[name], h)
    return built


def _copy(src: Path, directory: Path) -> Path:
    """A copy of a journal to write to, in a directory of its own."""
    directory.mkdir()
    dst = directory / src.name
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")
    return dst


@pytest.mark.parametrize("name", [n for n in HOSTILE if n != "nul"])
def test_g14_every_text_command_shows_planted_content_escaped(name: str, journals, tmp_path: Path) -> None:
    h = HOSTILE[name]
    export = _runner().invoke(main, ["export", "--db", str(journals[name])]).stdout
    for index, args in enumerate(READ_COMMANDS + WRITE_COMMANDS):
        outputs = []
        for kind, value in (("hostile", h), ("benign", BENIGN)):
            db = _copy(journals[name if kind == "hostile" else "benign"], tmp_path / f"{kind}-{index}")
            stdin = "n\n"  # purge's question
            if args[0] == "import":
                db = db.parent / "imported.db"
                stdin = export.replace(json.dumps(h)[1:-1], json.dumps(value)[1:-1])
            code, out, err = _run(db, args, value, stdin)
            assert_safe(out + err, f"{name}: journal {' '.join(args)}")
            outputs.append((code, out.count(b"\n"), err.count(b"\n")))
        # Content can neither add a line nor take one away: the same as with plain text.
        assert outputs[0] == outputs[1], (args, outputs)


@pytest.mark.parametrize("name", [n for n in HOSTILE if n != "nul"])
def test_g14_json_and_json_lines_carry_planted_content_exactly_and_nothing_raw(name: str, journals) -> None:
    h = HOSTILE[name]
    db = journals[name]
    code, out, err = _run(db, ["show", "s", "--json"], h)
    assert code == 0
    assert_safe(out + err, "show --json")
    items = json.loads(out)["items"]
    assert items[1]["data"] == {"content": h, "name": h}
    for args in (["sessions", "--json"], ["sessions", "--nl"], ["scan", "--json"], ["scan", "--nl"],
                 ["tail", "s", "--nl"], ["indeterminate", "--json"], ["submissions", "--nl"], ["check", "--json"],
                 ["show", "evil{h}", "--nl"],
                 ["recover", "--dry-run", "--json"], ["export"]):  # fmt: skip
        code, out, err = _run(db, args, h)
        assert_safe(out + err, f"journal {' '.join(args)}")
        for line in out.decode().splitlines() if "--json" not in args else [out.decode()]:
            json.loads(line)
    sessions = json.loads(_run(db, ["sessions", "--json"], h)[1])["sessions"]
    assert {"evil" + h, "s"} <= {s["id"] for s in sessions}
    assert next(s for s in sessions if s["id"] == "s")["meta"] == {"note": h, h: "a hostile key"}


@pytest.mark.parametrize("name", [n for n in HOSTILE if n != "nul"])
def test_g14_error_messages_echo_user_arguments_escaped_on_one_line(name: str, journals) -> None:
    h = HOSTILE[name]
    for args in ERROR_COMMANDS:
        code, out, err = _run(journals[name], args, h)
        assert code in (1, 2), (args, err)
        assert_safe(out + err, f"journal {' '.join(args)}")
        assert err.count(b"\n") == 1 and err.startswith(b"journal: "), (args, err)
    missing = journals[name].parent / f"no{h}such.db"
    result = _runner().invoke(main, ["sessions", "--db", str(missing)], color=True)
    assert result.exit_code == 1 and result.stderr_bytes.count(b"\n") == 1
    assert_safe(result.stdout_bytes + result.stderr_bytes, "no such journal")


def test_g14_torture_report_lines_escape_what_they_quote() -> None:
    report = {
        "durability": "full", "seed": 1, "elapsed_s": 1.0, "trials": 1, "by_kind": {}, "kill_trials": 0, "killed": 0,
        "crash_points_covered": [], "crash_points_reached": [], "crash_points_not_reached": [],
        "failures": [
            {"index": 0, "trial": HOSTILE["osc52_clipboard_write"], "problems": [HOSTILE["fake_may_have_run_line"]]},
        ],
        "workdir": "/tmp/" + HOSTILE["right_to_left_override"], "ok": False,
        **{key: 0 for key, _label in torture.FAILURES},
    }  # fmt: skip
    text = torture.render(report)
    assert_safe(text.encode(), "torture render")
    assert "\\x1b]52" in text and "\\u202e" in text


# -- long stored strings: cut like content, so soft wrap cannot forge a line ------------------------

# A terminal wraps a long line onto its next row: a tool name of 300 spaces and then a marker
# would show the marker at the start of a row, as if it were a line of its own. Each string is
# planted in every place _build puts content (names, call ids, argument keys and values,
# session ids, notes, reasons, lease owners, meta, x. type names).
MARKER = "!! MAY HAVE RUN - verify before retrying"
LONG = {  # (at most 252 characters: "evil" + one of them is a session id, which the schema bounds)
    "padded_with_spaces": " " * 200 + MARKER,
    "padded_with_tabs": "\t" * 150 + MARKER,
    "one_long_word": "y" * 200 + MARKER,
    "padding_between_words": ("pad" + " " * 40) * 4 + MARKER,
}
# No line of the text output may be longer than this, however long what is stored: every
# stored string a line shows is cut (a line shows at most a few of them).
LINE_LIMIT = 600


@pytest.fixture(scope="module")
def long_journals(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("g14-long")
    built = {}
    for name, h in LONG.items():
        built[name] = root / f"{name}.db"
        _build(built[name], h)
    return built


@pytest.mark.parametrize("name", list(LONG))
def test_g14_long_names_ids_and_arguments_are_cut_so_no_line_is_unbounded_or_forged(
    name: str, long_journals, tmp_path: Path
) -> None:
    h = LONG[name]
    for index, args in enumerate(READ_COMMANDS + WRITE_COMMANDS):
        if args[0] in ("import", "append"):
            continue  # one count line; the event as stored, in JSON (exact, by contract)
        db = _copy(long_journals[name], tmp_path / f"run-{index}")
        code, out, err = _run(db, args, h, "n\n")
        assert code in (0, 1), (args, err)
        assert_safe(out + err, f"{name}: journal {' '.join(args)}")
        for line in (out + err).decode().splitlines():
            assert len(line) <= LINE_LIMIT, (args, len(line), line[:200])
            assert not line.lstrip(" ").startswith(("!!", "MAY HAVE RUN")), (args, line)
            # Padding is shown as one space, and tabs as visible escapes: no blank run from the
            # file pushes the marker along a row, to where the terminal wraps it to a row's start.
            assert " " * 12 + "!!" not in line and "\t" not in line, (args, line[:200])
        if args in (["show", "s"], ["scan"], ["indeterminate"], ["recover", "--dry-run"]):
            assert "…" in out.decode(), (args, "the long strings are cut")


def test_g14_a_real_marker_survives_the_cut() -> None:
    from journal.cli import render

    assert render.risk_marker("tool_outcome_unknown") == MARKER
    assert render.cut(" " * 300 + "x") == " x" and render.cut("y" * 300, 10) == "y" * 9 + "…"
    assert render.cut("\x1b[2J" + " " * 50 + "tail", 8) == "\\x1b[2J…"  # the width counts what is shown


# -- real processes: a pipe and a terminal ---------------------------------------------------------


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "journal.cli", *args]


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), **extra)


def test_g14_through_a_pipe_in_a_real_process(journals) -> None:
    h = HOSTILE["osc52_clipboard_write"] + HOSTILE["c1_csi"] + HOSTILE["right_to_left_override"]
    db = journals["osc52_clipboard_write"]
    for args in (
        ["show", "s"],
        ["tail", "s"],
        ["sessions"],
        ["scan"],
        ["show", "evil" + HOSTILE["osc52_clipboard_write"]],
    ):
        done = subprocess.run(_command(*args, "--db", str(db)), capture_output=True, env=_env(), timeout=60)
        assert done.returncode == 0, done.stderr
        assert_safe(done.stdout + done.stderr, " ".join(args))
        assert b"\\x1b]52;c;" in done.stdout or args[0] in ("sessions", "scan")
    assert h  # the strings above are the ones planted


def test_g14_non_utf8_arguments_and_environment_are_shown_escaped(journals, tmp_path: Path) -> None:
    db = os.fsencode(journals["benign"])
    cases = [
        [b"show", b"s\xff\x1b[2J", b"--db", db],
        [b"sessions", b"--db", os.fsencode(tmp_path) + b"/no\xff\x9b\x1b[2J.db"],
        [b"tail", b"s", b"-n", b"\xff\x1b]0;t\x07"],
    ]
    for args in cases:
        done = subprocess.run([os.fsencode(sys.executable), b"-m", b"journal.cli", *args], capture_output=True,
                              env=_env(JOURNAL_DB=str(journals["benign"])), timeout=60)  # fmt: skip
        assert done.returncode in (1, 2), done.stderr
        assert_safe(done.stdout + done.stderr, repr(args))
        assert done.stderr.count(b"\n") == 1 and b"Traceback" not in done.stderr
    bad_env = subprocess.run(_command("sessions", "--db", str(journals["benign"])), capture_output=True, timeout=60,
                             env=_env(JOURNAL_CRASH_AT="x:\x1b]52;c;AAAA\x07\u202e"))  # fmt: skip
    assert bad_env.returncode == 0 and bad_env.stderr.count(b"\n") == 1 and b"JOURNAL_CRASH_AT" in bad_env.stderr
    assert_safe(bad_env.stdout + bad_env.stderr, "JOURNAL_CRASH_AT")


def _on_a_terminal(args: list[str], *, seconds: float) -> bytes:
    """What a command writes to a terminal (a pty), read for up to ``seconds``."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(_command(*args), stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=_env())
    os.close(follower)
    chunks, deadline = [], time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            elif proc.poll() is not None:
                break
    finally:
        proc.kill()
        proc.wait()
        os.close(leader)
    return b"".join(chunks).replace(b"\r\n", b"\n")  # the terminal's own line discipline


def test_g14_on_a_terminal_show_and_tail_follow_stay_escaped(journals) -> None:
    db = str(journals["osc52_clipboard_write"])
    shown = _on_a_terminal(["show", "s", "--db", db], seconds=30)
    assert b"\\x1b]52;c;" in shown
    assert_safe(shown, "show on a terminal")
    followed = _on_a_terminal(["tail", "-f", "s", "-n", "50", "--db", db, "--interval", "0.05"], seconds=3)
    assert b"\\x1b]52;c;" in followed
    assert_safe(followed, "tail -f on a terminal")


def test_g14_the_demo_with_a_hostile_path_prints_it_escaped(tmp_path: Path) -> None:
    db = tmp_path / "demo\x1b]0;t\x07\u202e.db"
    done = subprocess.run(_command("demo", "--db", str(db)), capture_output=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert_safe(done.stdout + done.stderr, "demo")
    assert b"demo\\x1b]0;t\\x07\\u202e.db" in done.stdout
    assert b"!! MAY HAVE RUN" in done.stdout  # the journal's own marker, mid-line
