"""G12 under hostile input: nothing that cannot be read back gets in, and a refusal writes nothing.

Each case is refused with a typed error (``InvalidEvent`` naming the place, or
``InvalidArgument`` naming the argument) before any write, and what is accepted at the limits
reads back exactly through every reader (``events``, ``messages``, ``check``).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import uuid
from pathlib import Path

import pytest

import journal
import journal.aio
from tests.raw import Raw

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


@pytest.fixture(scope="module")
def _shared_journals(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """One journal per backend for this module's refusal cases, made on first use. A refusal
    writes nothing (each case checks it), so the cases can share one: a fresh PostgreSQL schema
    per case was most of this module's time."""
    made: dict[str, tuple[object, journal.Journal, journal.Turn]] = {}

    def get(backend: str) -> tuple[object, journal.Journal, journal.Turn]:
        if backend not in made:
            if backend == "postgresql":
                import psycopg

                schema = "g12_" + uuid.uuid4().hex[:12]
                base = request.getfixturevalue("pg_server").dsn("contract")
                with psycopg.connect(base, autocommit=True) as conn:
                    conn.execute(f"CREATE SCHEMA {schema}")
                target: object = f"{base}&options=-csearch_path%3D{schema}"
            else:
                target = tmp_path_factory.mktemp("g12") / "journal.db"
            j = journal.open(target)
            made[backend] = (target, j, _open_turn_with_a_call(j))
            j.submit("s", "user_message", {"content": "queued"})
        return made[backend]

    yield get
    for _, j, _ in made.values():
        j.close()


@pytest.fixture
def shared(backend: str, _shared_journals):
    """``(target, journal, turn)``: this module's journal on the test's backend, where session
    ``s`` has an open turn (``turn``) whose assistant message requested call ``c1``, and a
    queued submission."""
    return _shared_journals(backend)


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
    ids=[
        "depth-101",
        "surrogate-value",
        "surrogate-content",
        "surrogate-key",
        "surrogate-in-blocks",
        "int-2**63",
        "int-below-min",
        "int-5000-digits",
    ],
)
def test_g12_data_that_could_not_be_read_back_is_refused_naming_the_place(shared, data, field, words) -> None:
    db_path, j, _ = shared
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
def test_g12_app_type_names_are_limited_like_session_ids(shared, type_) -> None:
    db_path, j, _ = shared
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
def test_g12_numbers_and_names_out_of_their_range_are_typed_errors_that_write_nothing(shared, call, name) -> None:
    db_path, j, _ = shared  # session s has a queued submission
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
        # A session's meta is not an event: its refusal is an InvalidArgument naming it.
        with pytest.raises(journal.InvalidArgument if "meta" in name else journal.InvalidEvent) as info:
            write(j)
        assert "over the limit of 1000" in str(info.value)
        assert all(len(e.data.get("content", "")) < 1000 for e in j.events("s"))
        assert j.submissions() == [] and [s.id for s in j.sessions()] == ["s"]


def test_g12_the_size_limit_holds_on_an_operator_note(db_path) -> None:
    with journal.open(db_path, max_event_bytes=1000) as j, pytest.raises(journal.InvalidEvent):
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
    ids=[
        "session",
        "events",
        "count",
        "append",
        "dispatch",
        "put_result",
        "chunk-key",
        "chunk-text",
        "fork-id",
        "recover",
    ],
)
def test_g12_a_lone_surrogate_in_any_argument_is_a_typed_error_that_writes_nothing(shared, call) -> None:
    db_path, j, _ = shared
    before = _fingerprint(db_path)
    with pytest.raises((journal.InvalidArgument, journal.InvalidEvent)):  # event data: InvalidEvent
        call(j)
    assert _fingerprint(db_path) == before


# -- a lone surrogate in every key and id, on every path -----------------------------------------------

# Where in a string the surrogate sits: a high one first, a low one inside, a low one last.
_PLACES = {
    "first": lambda s: "\ud800" + s,
    "inside": lambda s: s[:1] + "\udc00" + s[1:],
    "last": lambda s: s + "\udfff",
}
_MSG = {"content": "x"}

# (id, method, arguments given the bad string, error, the name or field it names). A name of
# None: the refusal comes from the store's net under the parts (any name, still typed, nothing
# written). Each is called on the sync face and on the async one (journal.aio).
_KEYED = [
    ("append session", "append", lambda b: ((b, "user_message", _MSG), {}), journal.InvalidArgument, "session_id"),
    ("append key", "append", lambda b: (("s", "user_message", _MSG), {"key": b}), journal.InvalidArgument, "key"),
    ("append data", "append",
     lambda b: (("s", "user_message", {"content": b}), {}), journal.InvalidEvent, "data.content"),
    ("append conditional key", "append",
     lambda b: (("s", "user_message", _MSG), {"key": b, "expected_count": 2}), journal.InvalidArgument, "key"),
    ("append_many item key", "append_many",
     lambda b: (("s", [("user_message", _MSG), ("user_message", _MSG, b)]), {}),
     journal.InvalidArgument, "items[1] key"),
    ("append_many session", "append_many",
     lambda b: ((b, [("user_message", _MSG)]), {}), journal.InvalidArgument, "session_id"),
    ("append_many state key", "append_many",
     lambda b: (("s", [("user_message", _MSG)]), {"state": {"ok": 1, b: 2}}), journal.InvalidArgument, "state key"),
    ("append_many state value", "append_many",
     lambda b: (("s", [("user_message", _MSG)]), {"state": {"k": {"v": b}}}), journal.InvalidArgument, "state['k'].v"),
    ("set_state key", "set_state", lambda b: (("s", {b: 1}), {}), journal.InvalidArgument, "state key"),
    ("set_state value", "set_state", lambda b: (("s", {"k": [b]}), {}), journal.InvalidArgument, "state['k'][0]"),
    ("set_state session", "set_state", lambda b: ((b, {"k": 1}), {}), journal.InvalidArgument, "session_id"),
    ("create_session id", "create_session", lambda b: ((b,), {}), journal.InvalidArgument, "session_id"),
    ("create_session meta key", "create_session",
     lambda b: (("t",), {"meta": {b: 1}}), journal.InvalidArgument, "meta (a key)"),
    ("create_session meta value", "create_session",
     lambda b: (("t",), {"meta": {"m": b}}), journal.InvalidArgument, "meta.m"),
    ("fork meta", "fork",
     lambda b: (("s",), {"id": "f", "meta": {"m": {"n": b}}}), journal.InvalidArgument, "meta.m.n"),
    ("fork id", "fork", lambda b: (("s",), {"id": b}), journal.InvalidArgument, "session_id"),
    ("fork source", "fork", lambda b: ((b,), {}), journal.InvalidArgument, "session_id"),
    ("submit id", "submit", lambda b: (("s", "user_message", _MSG), {"id": b}), journal.InvalidArgument, "id"),
    ("submit session", "submit", lambda b: ((b, "user_message", _MSG), {}), journal.InvalidArgument, "session_id"),
    ("dispatch call id", "dispatch", lambda b: (("s", b), {}), journal.InvalidArgument, "call_id"),
    ("dispatch idempotency key", "dispatch",
     lambda b: (("s", "c1"), {"idempotency_key": b}), journal.InvalidEvent, "data.idempotency_key"),
    ("put_result call id", "put_result", lambda b: (("s", b, "done"), {}), journal.InvalidEvent, "data.tool_call_id"),
    ("resolve call id", "resolve", lambda b: (("s", b), {"outcome": "ran"}), journal.InvalidEvent, "data.tool_call_id"),
    ("save_chunk stream key", "save_chunk", lambda b: (("s", b, 0, "x"), {}), journal.InvalidArgument, "stream_key"),
    ("turn_start session", "turn_start", lambda b: ((b,), {}), journal.InvalidArgument, "session_id"),
    ("sessions meta", "sessions", lambda b: ((), {"meta": {"m": b}}), journal.InvalidArgument, "meta"),
    ("submission id", "submission", lambda b: ((b,), {}), journal.InvalidArgument, "submission_id"),
    ("state keys", "state", lambda b: (("s",), {"keys": [b]}), journal.InvalidArgument, "keys"),
    ("save_chunk content", "save_chunk", lambda b: (("s", "k1", 0, b), {}), journal.InvalidArgument, "content"),
    ("recover session", "recover", lambda b: ((b,), {}), journal.InvalidArgument, "session_id"),
    ("purge session", "purge", lambda b: ((b,), {}), journal.InvalidArgument, "session_id"),
    ("retract session", "retract", lambda b: ((b,), {}), journal.InvalidArgument, "session_id"),
    ("take_over session", "take_over", lambda b: ((b,), {}), journal.InvalidArgument, "session_id"),
    ("check session", "check", lambda b: ((b,), {}), journal.InvalidArgument, "session_id"),
    ("submissions session", "submissions", lambda b: ((b,), {}), journal.InvalidArgument, "session_id"),
]  # fmt: skip


def _open_turn_with_a_call(j: journal.Journal) -> journal.Turn:
    """Session ``s`` with an open turn whose assistant message requested call ``c1``, and one
    plain append last, so that this connection knows the next seq (the lone-INSERT fast path)."""
    j.create_session("s")
    turn = j.turn_start("s")
    turn.step_start()
    turn.assistant("", tool_calls=[{"id": "c1", "name": "t", "arguments": {}}])
    j.append("s", "user_message", {"content": "warm"})
    return turn


def _refusals(
    face: str, j: journal.Journal, db_path, method: str, calls: list[tuple[tuple, dict]]
) -> tuple[list, str, str]:
    """The error each call raised (``None`` if none) on the ``face`` ("sync": ``j``; "aio": a
    ``journal.aio`` handle on the same journal), after an append on that handle (so a lone append
    takes the fast path), and the fingerprints of every table before and after the calls."""
    errors: list[BaseException | None] = []
    if face == "sync":
        j.append("s", "user_message", {"content": "warm"})
        before = _fingerprint(db_path)
        for args, kwargs in calls:
            try:
                getattr(j, method)(*args, **kwargs)
                errors.append(None)
            except journal.JournalError as exc:
                errors.append(exc)
        return errors, before, _fingerprint(db_path)

    async def run() -> tuple[list, str, str]:
        async with journal.aio.open(db_path) as aj:
            await aj.append("s", "user_message", {"content": "warm"})
            before = _fingerprint(db_path)
            for args, kwargs in calls:
                try:
                    await getattr(aj, method)(*args, **kwargs)
                    errors.append(None)
                except journal.JournalError as exc:
                    errors.append(exc)
            return errors, before, _fingerprint(db_path)

    return asyncio.run(run())


@pytest.mark.parametrize("face", ["sync", "aio"])
@pytest.mark.parametrize("case", _KEYED, ids=[c[0] for c in _KEYED])
def test_g12_a_lone_surrogate_in_any_key_or_id_is_refused_by_name_on_every_path_and_writes_nothing(
    shared, case, face
) -> None:
    _id, method, arguments, error, name = case
    db_path, j, _ = shared
    refusals, before, after = _refusals(
        face, j, db_path, method, [arguments(spoil("k1")) for spoil in _PLACES.values()]
    )
    for place, refused in zip(_PLACES, refusals):
        assert isinstance(refused, error), (place, refused)
        if name is not None:
            assert (refused.name if isinstance(refused, journal.InvalidArgument) else refused.field) == name, place
        assert "lone surrogate" in str(refused), place
    assert after == before  # read through fresh connections: not a row of any table changed


# -- deep nesting: one limit, in the codec, on every path ------------------------------------------------


def _deep(depth: int) -> list:
    """Lists nested ``depth`` deep, built without recursion."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


_DEEP_WRITES = [
    ("append", lambda j, d: j.append("s", "user_message", {"content": d}), journal.InvalidEvent),
    ("append_many", lambda j, d: j.append_many("s", [("x.a", {}), ("x.b", {"v": d})]), journal.InvalidEvent),
    ("set_state", lambda j, d: j.set_state("s", {"k": d}), journal.InvalidArgument),
    ("append_many state", lambda j, d: j.append_many("s", [("x.a", {})], state={"k": d}), journal.InvalidArgument),
    ("create_session meta", lambda j, d: j.create_session("t", meta={"m": d}), journal.InvalidArgument),
    ("submit", lambda j, d: j.submit("s", "user_message", {"content": d}), journal.InvalidEvent),
]


@pytest.mark.parametrize("write", [w for _, w, _ in _DEEP_WRITES], ids=[n for n, _, _ in _DEEP_WRITES])
def test_g12_data_nested_100000_deep_is_refused_naming_the_depth_and_writes_nothing(shared, write) -> None:
    db_path, j, _ = shared
    before = _fingerprint(db_path)
    error = next(e for _, w, e in _DEEP_WRITES if w is write)
    with pytest.raises(error) as info:
        write(j, _deep(100_000))
    assert "nests deeper than the limit of 100 levels" in str(info.value)
    assert _fingerprint(db_path) == before


@pytest.mark.parametrize(
    "text, accepted",
    [
        ("[" * 100 + "]" * 100, True),
        ("[" * 101 + "]" * 101, False),
        ('{"a":' * 100 + "1" + "}" * 100, True),
        ('{"a":' * 101 + "1" + "}" * 101, False),
        ('["' + "[" * 5000 + '"]', True),  # brackets inside a string are text, not nesting
        ('["\\"' + "[" * 5000 + '"]', True),  # an escaped quote does not end the string
        ("[" * 100_000 + "]" * 100_000, False),
        ("[" * 100_000, False),  # unclosed, too: refused before the parser recurses
    ],
    ids=[
        "100-lists",
        "101-lists",
        "100-objects",
        "101-objects",
        "brackets-in-a-string",
        "escaped-quote",
        "100000-lists",
        "100000-unclosed",
    ],
)
def test_g12_json_text_is_parsed_by_the_codec_under_the_same_depth_limit(text: str, accepted: bool) -> None:
    from journal.codec import parse_json

    if accepted:
        parse_json(text)
        return
    with pytest.raises(journal.InvalidEvent) as info:
        parse_json(text, "DATA")
    assert info.value.field == "DATA" and "nests deeper than the limit of 100 levels" in str(info.value)


@pytest.mark.parametrize(
    "text, problem",
    [("{nope", "not JSON"), ('{"a": NaN}', "NaN"), ('{"a": 1e999}', "1e999"), ('{"a": 1, "a": 2}', "duplicate key"),
     (b'{"a": "\xff"}', "not UTF-8")],
    ids=["syntax", "nan", "overflowing-float", "duplicate-key", "not-utf8"],
)  # fmt: skip
def test_g12_json_text_that_is_not_strict_json_is_refused_naming_the_place(text, problem: str) -> None:
    from journal.codec import parse_json

    with pytest.raises(journal.InvalidEvent) as info:
        parse_json(text, "line 3")
    assert info.value.field == "line 3" and problem in str(info.value)


@pytest.mark.parametrize(
    "args",
    [["append", "s", "user_message", '{"content": ' + "[" * 100_000 + "]" * 100_000 + "}"],
     ["append", "s", "user_message", '{"content": ' + "[" * 101 + "]" * 101 + "}"],
     ["sessions", "--meta", "k=" + "[" * 100_000 + "]" * 100_000]],
    ids=["append-100000-deep", "append-101-deep", "sessions-meta-100000-deep"],
)  # fmt: skip
def test_g12_deep_json_on_the_command_line_is_a_one_line_usage_error(j, db_path, args) -> None:
    from click.testing import CliRunner

    from journal.cli import main

    j.create_session("s")
    before = _fingerprint(db_path)
    result = CliRunner().invoke(main, [*args, "--db", str(db_path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("journal: ") and result.stderr.count("\n") == 1, result.stderr
    assert "nests deeper than the limit of 100 levels" in result.stderr and "unexpected" not in result.stderr
    assert _fingerprint(db_path) == before


# -- identifier limits: the same on both backends (DESIGN §16, parity) ---------------------------------


def _astral(length: int, seed: int) -> str:
    """``length`` random characters outside the Basic Multilingual Plane (4 bytes each in UTF-8,
    and random, so PostgreSQL cannot compress an index entry made of them): the worst case."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x10000, 0x110000)) for _ in range(length))


def _ascii(length: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x21, 0x7F)) for _ in range(length))


MAX_CALL_ID, MAX_STREAM_KEY, MAX_KEY, MAX_SESSION_ID = 512, 512, 256, 256
AT_LIMIT = {
    "session": _ascii(MAX_SESSION_ID, 1),
    "submission": _ascii(MAX_SESSION_ID, 2),
    "call": _astral(MAX_CALL_ID, 3),
    "unsafe call": _astral(MAX_CALL_ID, 4),
    "key": _astral(MAX_KEY, 5),
    "state key": _astral(MAX_KEY, 6),
    "stream key": _astral(MAX_STREAM_KEY, 7),
    "chunk key": _astral(MAX_STREAM_KEY, 8),
}


def write_identifiers_at_their_limits(j: journal.Journal) -> str:
    """A session whose every identifier is at its limit, in the worst case for a btree entry:
    each unique key and index of the schema holds one (G5's and G6's keys, ``tool_calls``,
    ``notifications``, ``stream_chunks``, the keys of events and state). Returns its id."""
    ids = AT_LIMIT
    sid = j.create_session(ids["session"]).id
    j.append(sid, "user_message", {"content": "hi"}, key=ids["key"])
    j.set_state(sid, {ids["state key"]: {"v": 1}})
    tools = journal.ToolRegistry()
    tools.register("mail", lambda arguments, context: None, effects=journal.Unsafe())
    turn = j.turn_start(sid)
    turn.step_start()
    turn.provider_started(stream_key=ids["stream key"])
    assert j.save_chunk(sid, ids["chunk key"], 0, "part")
    calls = [
        {"id": ids["call"], "name": "get", "arguments": {}},
        {"id": ids["unsafe call"], "name": "mail", "arguments": {}},
    ]
    turn.assistant("", tool_calls=calls)
    with turn.dispatch(ids["call"]) as call:
        call.result("done")
    j.dispatch(sid, ids["unsafe call"], turn=turn, effect="unsafe")
    j.recover_effects(tools)  # the unsafe call may have run: indeterminate, with a notification
    assert [c.call_id for c in j.indeterminate(sid)] == [ids["unsafe call"]]
    j.resolve(sid, ids["unsafe call"], outcome="did_not_run")
    turn.step_end()
    turn.complete()
    j.submit(sid, "user_message", {"content": "next"}, id=ids["submission"])
    return sid


def test_g12_every_identifier_at_its_limit_is_accepted_on_both_backends_and_reads_back(j, fresh) -> None:
    sid = write_identifiers_at_their_limits(j)
    reader = fresh(readonly=True)
    events = reader.events(sid)
    assert events[0].key == AT_LIMIT["key"]
    assert reader.state(sid) == {AT_LIMIT["state key"]: {"v": 1}}
    calls = {AT_LIMIT["call"], AT_LIMIT["unsafe call"]}  # the resolution answers the unsafe one
    assert {e.data["tool_call_id"] for e in events if e.type in ("tool_result", "operator_resolution")} == calls
    assert {e.data["id"] for e in events if e.type == "tool_call"} == calls
    assert reader.stream_chunks(AT_LIMIT["chunk key"]) == ["part"]
    assert reader.submission(AT_LIMIT["submission"]).session_id == sid
    assert reader.check() == []


_OVER_CALL, _OVER_STREAM, _OVER_KEY = _astral(MAX_CALL_ID + 1, 9), _astral(MAX_STREAM_KEY + 1, 10), "k" * (MAX_KEY + 1)
_OVER_ID = "i" * (MAX_SESSION_ID + 1)
_NUL = "c\0d"

# (id, the call given the shared journal and its open turn, error, the name or field it names)
_OVER = [
    ("assistant tool_calls[i].id", lambda j, t: j.append("s", "assistant_message", {"content": "", "tool_calls": [
        {"id": "ok", "name": "t"}, {"id": _OVER_CALL, "name": "t"}]}), journal.InvalidEvent, "data.tool_calls[1].id"),
    ("turn assistant call id", lambda j, t: t.assistant("", tool_calls=[{"id": _OVER_CALL, "name": "t"}]),
     journal.InvalidEvent, "data.tool_calls[0].id"),
    ("tool_result tool_call_id",
     lambda j, t: j.append("s", "tool_result", {"tool_call_id": _OVER_CALL, "content": "x"}),
     journal.InvalidEvent, "data.tool_call_id"),
    ("put_result call id", lambda j, t: j.put_result("s", _OVER_CALL, "x"), journal.InvalidEvent, "data.tool_call_id"),
    ("tool_call id", lambda j, t: j.append("s", "tool_call", {"id": _OVER_CALL, "name": "t"}),
     journal.InvalidEvent, "data.id"),
    ("dispatch call id", lambda j, t: j.dispatch("s", _OVER_CALL), journal.InvalidArgument, "call_id"),
    ("resolve call id",
     lambda j, t: j.resolve("s", _OVER_CALL, outcome="ran"), journal.InvalidEvent, "data.tool_call_id"),
    ("tool_result_late call id", lambda j, t: j.append("s", "tool_result_late", {"tool_call_id": _OVER_CALL}),
     journal.InvalidEvent, "data.tool_call_id"),
    ("save_chunk stream key",
     lambda j, t: j.save_chunk("s", _OVER_STREAM, 0, "x"), journal.InvalidArgument, "stream_key"),
    ("provider_started stream key", lambda j, t: t.provider_started(stream_key=_OVER_STREAM),
     journal.InvalidArgument, "stream_key"),
    ("append key", lambda j, t: j.append("s", "user_message", _MSG, key=_OVER_KEY), journal.InvalidArgument, "key"),
    ("append_many item key", lambda j, t: j.append_many("s", [("user_message", _MSG, _OVER_KEY)]),
     journal.InvalidArgument, "items[0] key"),
    ("set_state key", lambda j, t: j.set_state("s", {_OVER_KEY: 1}), journal.InvalidArgument, "state key"),
    ("create_session id", lambda j, t: j.create_session(_OVER_ID), journal.InvalidArgument, "session_id"),
    ("fork id", lambda j, t: j.fork("s", 0, id=_OVER_ID), journal.InvalidArgument, "session_id"),
    ("submit id", lambda j, t: j.submit("s", "user_message", _MSG, id=_OVER_ID), journal.InvalidArgument, "id"),
    # A NUL: SQLite's text holds it, PostgreSQL's cannot, so neither takes it in an identifier.
    ("NUL in a call id", lambda j, t: j.append("s", "assistant_message", {"content": "", "tool_calls": [
        {"id": _NUL, "name": "t"}]}), journal.InvalidEvent, "data.tool_calls[0].id"),
    ("NUL in a tool name",
     lambda j, t: j.append("s", "tool_result", {"tool_call_id": "c9", "name": _NUL, "content": ""}),
     journal.InvalidEvent, "data.name"),
    ("NUL in a key", lambda j, t: j.append("s", "user_message", _MSG, key=_NUL), journal.InvalidArgument, "key"),
    ("NUL in a state key", lambda j, t: j.set_state("s", {_NUL: 1}), journal.InvalidArgument, "state key"),
    ("NUL in a stream key", lambda j, t: j.save_chunk("s", _NUL, 0, "x"), journal.InvalidArgument, "stream_key"),
    ("NUL in an idempotency key", lambda j, t: j.dispatch("s", "c1", idempotency_key=_NUL),
     journal.InvalidEvent, "data.idempotency_key"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, name", [c[1:] for c in _OVER], ids=[c[0] for c in _OVER])
def test_g12_an_identifier_over_its_limit_is_refused_by_name_on_both_backends_and_writes_nothing(
    shared, call, error, name
) -> None:
    db_path, j, turn = shared
    before = _fingerprint(db_path)
    with pytest.raises(error) as info:
        call(j, turn)
    assert (info.value.name if isinstance(info.value, journal.InvalidArgument) else info.value.field) == name
    assert _fingerprint(db_path) == before


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda j, s: j.create_session(meta={"k": "a\0b"}), "meta.k"),
        (lambda j, s: j.create_session(meta={"k\0": "v"}), "meta (a key)"),
        (lambda j, s: j.create_session(meta={"k": {"deep": ["\0"]}}), "meta.k.deep[0]"),
        (lambda j, s: j.fork(s, at="last", meta={"k": "\0"}), "meta.k"),
        (lambda j, s: j.save_chunk(s, "stream", 0, "half\0way"), "content"),
        (lambda j, s: j.claim(owner="host:1:\0"), "owner"),
    ],
    ids=["meta-value", "meta-key", "meta-nested", "fork-meta", "chunk-content", "claim-owner"],
)
def test_g12_a_nul_in_text_a_backend_stores_as_text_is_refused_on_both_backends_and_writes_nothing(
    j, fresh, call, name
) -> None:
    """PostgreSQL's text cannot hold a NUL; SQLite's can. So neither takes one: what one backend
    accepts the other does too, and a file always imports into a server (DESIGN §16)."""
    s = j.create_session().id
    j.append(s, "user_message", {"content": "hi"})
    j.submit(s, "user_message", {"content": "queued"})
    before = [(x.id, x.count) for x in fresh().sessions()]
    with pytest.raises(journal.InvalidArgument) as refused:
        call(j, s)
    assert refused.value.name == name
    assert [(x.id, x.count) for x in fresh().sessions()] == before


@pytest.mark.parametrize("face", ["sync", "aio"])
@pytest.mark.parametrize("flag", ["false", 0, 1, [True]], ids=repr)
def test_g12_a_result_flagged_with_anything_but_a_boolean_is_refused_as_append_refuses_it(shared, face, flag) -> None:
    """``is_error="false"`` is not an error, nor is it a boolean: ``put_result`` refuses it as the
    log does (an ``append`` of the same data), and writes nothing; it never reads it as true."""
    db_path, j, _ = shared
    before = _fingerprint(db_path)
    with pytest.raises(journal.InvalidEvent) as appended:
        j.append("s", "tool_result", {"tool_call_id": "c1", "content": "fine", "is_error": flag})
    if face == "sync":
        with pytest.raises(journal.InvalidEvent) as put:
            j.put_result("s", "c1", "fine", is_error=flag)
    else:

        async def put_async() -> None:
            async with journal.aio.open(db_path) as aj:
                await aj.put_result("s", "c1", "fine", is_error=flag)

        with pytest.raises(journal.InvalidEvent) as put:
            asyncio.run(put_async())
    assert put.value.field == appended.value.field == "data.is_error"
    assert _fingerprint(db_path) == before


@pytest.mark.parametrize(
    "read, name",
    [
        (lambda j: j.events("s\0"), "session_id"),
        (lambda j: j.check("s\0"), "session_id"),
        (lambda j: j.messages("s\0"), "session_id"),
        (lambda j: j.sessions(prefix="\0"), "prefix"),
        (lambda j: j.sessions(after="s\0"), "after"),
        (lambda j: j.sessions(meta={"k\0": "v"}), "meta"),
        (lambda j: j.state("s", keys=["\0"]), "keys"),
    ],
    ids=["events", "check", "messages", "prefix", "after", "meta-key", "state-keys"],
)
def test_g12_a_read_naming_a_key_or_id_with_a_nul_is_refused_alike_on_both_backends(shared, read, name) -> None:
    """No key or id holds a NUL (PostgreSQL's text cannot): a read that names one is refused
    with the same ``InvalidArgument`` on both backends, before anything is read."""
    _, j, _ = shared
    with pytest.raises(journal.InvalidArgument) as refused:
        read(j)
    assert refused.value.name == name and "NUL" in str(refused.value)
