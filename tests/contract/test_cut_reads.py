"""A cut read (``messages``/``provider_view`` with ``tail=`` and ``chars=``) is the uncut read with
its text cut: never its structure.

The viewer reads a transcript's last messages cut to a few characters in SQL. Whatever ``chars``
is, the cut read holds the same messages as the whole one, in the same order, with the same
roles, call ids, tool names, stop reasons, errors and risks, and names the same calls missing;
only text (a content, arguments) is shorter. A field's key or a call's id is never cut.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal.model import Risk
from journal.pure.plan import synthetic_result_data

TEXT = st.text(alphabet="ab\u00e9\u4e2d \x00", max_size=30)  # a NUL too: cut in Python, as SQL would
IDS = st.text(alphabet="abcdefghij_0123456789", min_size=1, max_size=40)
STOPS = st.sampled_from(["stop", "tool_use", "length", "aborted", "error", None])


@st.composite
def logs(draw: st.DrawFn) -> list[tuple[str, dict[str, Any]]]:
    """A session's surface events: users, assistants with calls, results for some calls."""
    events: list[tuple[str, dict[str, Any]]] = []
    used: set[str] = set()
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["user", "assistant", "calls"]))
        if kind == "user":
            events.append(("user_message", {"content": draw(TEXT)}))
            continue
        data: dict[str, Any] = {"content": draw(TEXT)}
        stop = draw(STOPS)
        if stop is not None:
            data["stop_reason"] = stop
        ids = [i for i in draw(st.lists(IDS, max_size=3, unique=True)) if i not in used] if kind == "calls" else []
        used.update(ids)
        if ids:
            data["tool_calls"] = [
                {"id": i, "name": draw(IDS), "arguments": {"q": draw(TEXT)}} for i in ids
            ]  # fmt: skip
        events.append(("assistant_message", data))
        for i in ids:
            answer = draw(st.sampled_from(["result", "synthetic", "none"]))
            if answer == "result":
                events.append(
                    ("tool_result", {"tool_call_id": i, "content": draw(TEXT), "is_error": draw(st.booleans())})
                )
            elif answer == "synthetic":
                events.append(("tool_result", synthetic_result_data(i, "pay", Risk.TOOL_OUTCOME_UNKNOWN)))
    return events


def _shape(message: journal.Message) -> tuple[Any, ...]:
    calls = tuple((c.get("id"), c.get("name")) for c in message.tool_calls)
    return (message.seq, message.role, message.tool_call_id, message.name, message.stop_reason,
            message.is_error, message.risk, calls)  # fmt: skip


def _same_but_cut(cut: list[journal.Message], whole: list[journal.Message], chars: int) -> None:
    assert [_shape(m) for m in cut] == [_shape(m) for m in whole]
    for short, message in zip(cut, whole):
        if isinstance(message.content, str):
            assert short.content == message.content[:chars]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(log=logs(), tail=st.integers(0, 12), chars=st.integers(0, 16))
def test_a_cut_read_is_the_uncut_read_with_its_text_cut(
    j: journal.Journal, log: list[tuple[str, dict[str, Any]]], tail: int, chars: int
) -> None:
    s = j.create_session().id
    j.append_many(s, log)
    _same_but_cut(j.messages(s, tail=tail, chars=chars), j.messages(s, tail=tail), chars)
    cut, whole = j.provider_view(s, tail=tail, chars=chars), j.provider_view(s, tail=tail)
    _same_but_cut(cut.messages, whole.messages, chars)
    assert cut.missing == whole.missing


def test_a_long_call_id_and_key_survive_the_smallest_cut(j: journal.Journal) -> None:
    s = j.create_session().id
    call_id = "call_" + "9" * 500  # 505 characters: a call id may be up to 512
    j.append_many(s, [
        ("assistant_message", {"content": "", "tool_calls": [{"id": call_id, "name": "pay", "arguments": {}}]}),
        ("tool_result", {"tool_call_id": call_id, "content": "paid", "is_error": False}),
    ])  # fmt: skip
    assistant, result = j.messages(s, tail=2, chars=0)
    assert assistant.tool_calls[0]["id"] == call_id and result.tool_call_id == call_id
    assert j.provider_view(s, tail=2, chars=1).missing == ()
    (preview,) = j.previews(s, chars=3)[1:]
    assert set(preview.data) == {"tool_call_id", "content", "is_error"} and preview.data["content"] == "pai"


def test_g14_a_long_metadata_keeps_its_risk_marker_through_the_smallest_cut(j: journal.Journal) -> None:
    """The MAY-have-run marker a viewer draws comes from ``metadata.risk``: a metadata too long
    to keep whole (an adapter's entry beside the synthetic marks) keeps it."""
    s = j.create_session().id
    result = synthetic_result_data("c1", "pay", Risk.TOOL_OUTCOME_UNKNOWN)
    result["metadata"]["entry"] = {"note": "n" * 2000}
    j.append_many(s, [
        ("assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": "pay", "arguments": {}}]}),
        ("tool_result", result),
    ])  # fmt: skip
    for chars in (0, 5, 600):
        (cut,) = j.messages(s, tail=1, chars=chars)
        assert cut.risk == Risk.TOOL_OUTCOME_UNKNOWN.value and cut.tool_call_id == "c1"
    preview = j.previews(s, chars=5)[1]
    assert preview.data["metadata"] == {"synthetic": True, "risk": Risk.TOOL_OUTCOME_UNKNOWN.value}
    assert "metadata" in preview.cut
    (whole,) = j.messages(s, tail=1, chars=100_000)
    assert whole.metadata == result["metadata"]


def test_a_cut_read_keeps_each_number_as_stored(j: journal.Journal) -> None:
    """A preview's uncut fields are the stored values exactly: SQLite's ``json_each`` hands a
    number over as a double, which lost ``-0.0``'s sign and said nothing was cut."""
    numbers = {"neg_zero": -0.0, "sum": 0.1 + 0.2, "big": 1e300, "tiny": 5e-324, "int": -(2**63), "one": 1.0}
    s = j.create_session().id
    j.append(s, "user_message", {"content": "x", **numbers, "metadata": {"temp": -0.0}})
    (preview,) = j.previews(s, chars=100)
    assert preview.whole and preview.data == j.events(s)[0].data
    assert {k: repr(preview.data[k]) for k in numbers} == {k: repr(v) for k, v in numbers.items()}
    assert repr(j.messages(s, tail=1, chars=100)[0].metadata["temp"]) == "-0.0"
