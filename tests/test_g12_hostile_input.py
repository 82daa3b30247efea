"""G12 under hostile input: nothing that cannot be read back gets in, and a refusal writes nothing.

Each case is refused with a typed error (``InvalidEvent`` naming the place, or
``InvalidArgument`` naming the argument) before any write, and what is accepted at the limits
reads back exactly through every reader (``events``, ``messages``, ``check``).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from tests.raw import Raw
import pytest

import journal

_I64 = 2**63


def _nested(depth: int) -> dict:
    """A data object ``depth`` containers deep (the object itself is the first)."""
    value: object = "leaf"
    for _ in range(depth - 2):
        value = [value]
    return {"content": "deep", "metadata": {"v": value}}


def _fingerprint(path: Path) -> str:
    """Every row of every table, read through a fresh connection."""
    digest = hashlib.sha256()
    with Raw(path) as conn:
        for table in conn.tables():
            for row in sorted(repr(row) for row in conn.execute(f'SELECT * FROM "{table}"')):
                digest.update(row.encode("utf-8", "backslashreplace"))
    return digest.hexdigest()


@pytest.mark.parametrize(
    "data, field, words",
    [
        (_nested(101), "data.metadata.v" + "[0]" * 98, "deeper than the limit of 100"),
        ({"content": "x", "metadata": {"k": "\udc80"}}, "data.metadata.k", "lone surrogate"),
        ({"content": "\ud83d"}, "data.content", "lone surrogate"),
        ({"content": "x", "metadata": {"bad\udfffkey": 1}}, "data.metadata (a key)", "lone surrogate"),
        ({"content": ["ok", {"text": "a\udc00b"}]}, "data.content[1].text", "lone surrogate"),
        ({"content": "x", "metadata": {"n": _I64}}, "data.metadata.n", "64-bit"),
        ({"content": "x", "metadata": {"n": -_I64 - 1}}, "data.metadata.n", "64-bit"),
        ({"content": "x", "metadata": {"n": [10**5000]}}, "data.metadata.n[0]", "bits"),
    ],
    ids=["depth-101", "surrogate-value", "surrogate-content", "surrogate-key", "surrogate-in-blocks",
         "int-2**63", "int-below-min", "int-5000-digits"],  # fmt: skip
)
def test_g12_data_that_could_not_be_read_back_is_refused_naming_the_place(j, db_path, data, field, words) -> None:
    j.create_session("s")
    before = _fingerprint(db_path)
    with pytest.raises(journal.InvalidEvent) as info:
        j.append("s", "user_message", data)
    assert info.value.field == field and words in str(info.value)
    with pytest.raises(journal.InvalidEvent):
        j.append_many("s", [("user_message", {"content": "fine"}), ("user_message", data)])
    assert _fingerprint(db_path) == before


def test_g12_data_at_the_limits_is_accepted_and_every_reader_reads_it_back(j, fresh) -> None:
    j.create_session("s")
    limits = {"max": _I64 - 1, "min": -_I64, "astral": "\U0001f600", "nul": "a\0b"}
    j.append("s", "user_message", {"content": "limits", "metadata": limits})
    j.append("s", "x.app.thing-1", _nested(100))
    reader = fresh(readonly=True)
    events = reader.events("s")
    assert events[0].data["metadata"] == limits and events[1].data == _nested(100)
    assert reader.messages("s")[0].content == "limits"
    assert reader.check() == [] and reader.integrity_check() == ["ok"]


@pytest.mark.parametrize(
    "type_",
    ["x.", "x.a b", "x.\x1b[2J", "x.tab\there", "x.caf\u00e9", "x." + "a" * 255, "x.\udc80"],
    ids=["empty", "space", "escape", "tab", "non-ascii", "too-long", "surrogate"],
)
def test_g12_app_type_names_are_limited_like_session_ids(j, db_path, type_) -> None:
    j.create_session("s")
    before = _fingerprint(db_path)
    with pytest.raises(journal.InvalidEvent) as info:
        j.append("s", type_, {})
    assert info.value.field == "type"
    assert _fingerprint(db_path) == before
    assert j.append("s", "x." + "a" * 254, {}).type == "x." + "a" * 254  # 256 characters: the limit


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda j: j.events("s", since=-1), "since"),
        (lambda j: j.events("s", since=2**64), "since"),
        (lambda j: j.events("s", since=1.5), "since"),
        (lambda j: j.events("s", since=True), "since"),
        (lambda j: j.submit("s", "user_message", {"content": "x"}, max_attempts=0), "max_attempts"),
        (lambda j: j.submit("s", "user_message", {"content": "x"}, max_attempts=2**40), "max_attempts"),
        (lambda j: j.submit("s", "user_message", {"content": "x"}, timeout_s=math.nan), "timeout_s"),
        (lambda j: j.submit("s", "user_message", {"content": "x"}, timeout_s=math.inf), "timeout_s"),
        (lambda j: j.submit("s", "user_message", {"content": "x"}, timeout_s=10**400), "timeout_s"),
        (lambda j: j.claim(lease_ms=0), "lease_ms"),
        (lambda j: j.claim(lease_ms=2**70), "lease_ms"),
        (lambda j: j.claim(lease_ms=1.5), "lease_ms"),
        (lambda j: j.claim(now_ms=-1), "now_ms"),
        (lambda j: j.claim(now_ms=2**62), "now_ms"),
        (lambda j: j.reconcile(now_ms=2**64), "now_ms"),
        (lambda j: j.reconcile(now=math.nan), "now"),
        (lambda j: j.reconcile(now=-1.0), "now"),
        (lambda j: j.reconcile(context_window=0), "context_window"),
        (lambda j: j.submissions(state="bogus"), "state"),
        (lambda j: j.submissions(state="QUEUED"), "state"),
        (lambda j: j.save_chunk("s", "k", 2**63, "x"), "index"),
        (lambda j: j.save_chunk("s", "k", -1, "x"), "index"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_g12_numbers_and_names_out_of_their_range_are_typed_errors_that_write_nothing(j, db_path, call, name) -> None:
    j.create_session("s")
    j.submit("s", "user_message", {"content": "queued"})
    before = _fingerprint(db_path)
    with pytest.raises(journal.InvalidArgument) as info:
        call(j)
    assert info.value.name == name
    assert _fingerprint(db_path) == before


@pytest.mark.parametrize("path", [123, b"/tmp/x.db", None, "", "a\0b", ["x"]], ids=repr)
def test_g12_a_path_that_is_not_text_is_a_typed_error(path) -> None:
    with pytest.raises(journal.InvalidArgument) as info:
        journal.open(path)  # type: ignore[arg-type]
    assert info.value.name == "path"


_BIG = "x" * 2000


def _write_paths():
    """Each public write path, given content over a 1000-byte limit."""

    def turn_with_call(j):
        turn = j.turn_start("s")
        turn.step_start()
        turn.assistant("", tool_calls=[{"id": "c1", "name": "t", "arguments": {}}])
        return turn

    return [
        ("append", lambda j: j.append("s", "user_message", {"content": _BIG})),
        ("append_many", lambda j: j.append_many("s", [("user_message", {"content": _BIG})])),
        ("create_session meta", lambda j: j.create_session("t", meta={"m": _BIG})),
        ("turn assistant", lambda j: turn_with_call(j).assistant(_BIG)),
        ("record_assistant", lambda j: j.record_assistant(_step(j), _BIG)),
        ("put_result", lambda j: turn_with_call(j).put_result("c1", _BIG)),
        ("dispatch then result", lambda j: _dispatched(turn_with_call(j)).result(_BIG)),
        ("submit", lambda j: j.submit("s", "user_message", {"content": _BIG})),
    ]


def _step(j):
    turn = j.turn_start("s")
    turn.step_start()
    return turn


def _dispatched(turn):
    return turn.dispatch("c1")


@pytest.mark.parametrize("name, write", _write_paths(), ids=[n for n, _ in _write_paths()])
def test_g12_the_size_limit_set_at_open_holds_on_every_write_path(db_path, name, write) -> None:
    with journal.open(db_path, max_event_bytes=1000) as j:
        j.create_session("s")
        with pytest.raises(journal.InvalidEvent) as info:
            write(j)
        assert "over the limit of 1000" in str(info.value)
        assert all(len(e.data.get("content", "")) < 1000 for e in j.events("s"))
        assert j.submissions() == [] and [s.id for s in j.sessions()] == ["s"]


def test_g12_the_size_limit_holds_on_an_operator_note(db_path) -> None:
    with journal.open(db_path, max_event_bytes=1000) as j:
        with pytest.raises(journal.InvalidEvent):
            j.resolve("s", "c1", outcome="ran", note=_BIG)


@pytest.mark.parametrize(
    "call",
    [
        lambda j: j.session("s\udc80"),
        lambda j: j.events("s\udc80"),
        lambda j: j.count("s\udc80"),
        lambda j: j.append("s\udc80", "user_message", {"content": "x"}),
        lambda j: j.dispatch("s", "c\udc80"),
        lambda j: j.put_result("s", "c\udc80", "x"),
        lambda j: j.save_chunk("s", "k\udc80", 0, "x"),
        lambda j: j.save_chunk("s", "k", 0, "x\udc80"),
        lambda j: j.fork("s", 0, id="f\udc80"),
        lambda j: j.recover("s\udc80"),
    ],
    ids=["session", "events", "count", "append", "dispatch", "put_result", "chunk-key", "chunk-text", "fork-id",
         "recover"],  # fmt: skip
)
def test_g12_a_lone_surrogate_in_any_argument_is_a_typed_error_that_writes_nothing(j, db_path, call) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "x"})
    before = _fingerprint(db_path)
    with pytest.raises(journal.JournalError):
        call(j)
    assert _fingerprint(db_path) == before
