"""``submit`` refuses a bad submission with an error that names what was wrong (G12): the
submission's ``id``, or its ``session_id``; nothing is written."""

from __future__ import annotations

import pytest

import journal


@pytest.mark.parametrize(
    "bad",
    ["", "a b", "x" * 257, "tab\there", 3, "\udc80x"],
    ids=["empty", "space", "too-long", "control", "not-a-string", "lone-surrogate"],
)
def test_g12_a_bad_submission_id_is_refused_naming_the_submission_id_and_nothing_is_written(
    j: journal.Journal, fresh, bad: object
) -> None:
    j.create_session("s")
    with pytest.raises(journal.InvalidArgument) as info:
        j.submit("s", "user_message", {"content": "hi"}, id=bad)
    assert info.value.name == "id"
    assert str(info.value).startswith("id: a submission id ")
    assert "session_id" not in str(info.value)
    assert fresh().submissions() == [] and fresh().count("s") == 0


@pytest.mark.parametrize("bad", [3, "\udc80x", None], ids=["not-a-string", "lone-surrogate", "none"])
def test_g12_a_bad_session_id_is_refused_naming_session_id(j: journal.Journal, fresh, bad: object) -> None:
    with pytest.raises(journal.InvalidArgument) as info:
        j.submit(bad, "user_message", {"content": "hi"})
    assert info.value.name == "session_id"
    assert fresh().submissions() == []


def test_g12_a_submission_id_queued_before_raises_submission_exists_naming_it(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    j.create_session("t")
    first = j.submit("s", "user_message", {"content": "first"}, id="sub-1")
    with pytest.raises(journal.SubmissionExists) as info:
        j.submit("t", "user_message", {"content": "again"}, id="sub-1")
    assert info.value.submission_id == "sub-1" and "'sub-1'" in str(info.value)
    assert [(s.id, s.session_id) for s in fresh().submissions()] == [(first.id, "s")]
    # The journal goes on: the refused submit left no transaction behind.
    assert j.submit("t", "user_message", {"content": "other"}, id="sub-2").session_id == "t"
