"""Errors: one root, structured arguments kept as attributes, their own message, and they pickle."""

from __future__ import annotations

import inspect
import pickle

import pytest

import journal
from journal import errors


def _error_classes() -> list[type[journal.JournalError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, journal.JournalError) and cls is not journal.JournalError
    ]


def _example(cls: type[journal.JournalError]) -> journal.JournalError:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    values = {"count": 3, "seq": 7, "boundary": 9, "attempt": 2, "timeout_ms": 100, "index": 1, "version": 9,
              "supported": 1, "fork_ids": ("f",), "call_ids": ("c",)}  # fmt: skip
    args = [values.get(p.name, f"<{p.name}>") for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    return cls(*args)


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_every_error_is_a_journal_error_with_a_message_that_pickles(cls: type[journal.JournalError]) -> None:
    error = _example(cls)
    assert isinstance(error, journal.JournalError)
    text = str(error)
    assert text
    for value in error.args:
        if isinstance(value, str):
            assert value in text, f"{cls.__name__}'s message leaves out {value!r}: {text}"
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is cls and clone.args == error.args and str(clone) == text
    assert vars(clone) == vars(error)


def test_every_error_is_exported() -> None:
    for cls in _error_classes():
        assert getattr(journal, cls.__name__, None) is cls, cls.__name__


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_g14_a_message_quotes_an_untrusted_id_escaped_and_cut(cls: type[journal.JournalError]) -> None:
    """An id is text a model or a user wrote: a message shows it escaped (no control or bidi
    character reaches a terminal raw) and cut; the attribute keeps all of it."""
    hostile = "\x1b[2J\u202e" + "x" * 5000 + "\x07end"
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    quoted = {"session_id", "call_id", "submission_id", "name", "owner", "named", "path"}
    names = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    if cls is errors.InvalidArgument:
        quoted = set()  # its `name` is a parameter's name: the code's, not stored data
    if not quoted & set(names):
        pytest.skip("quotes no id")
    values = {"count": 3, "seq": 7, "boundary": 9, "attempt": 2, "timeout_ms": 100, "index": 1, "version": 9,
              "supported": 1, "start_seq": 4, "expected": 1, "actual": 2, "start": 0, "stop": 1}  # fmt: skip
    lists = {"fork_ids", "call_ids", "nodes", "candidates"}
    args = [(hostile,) * 50 if n in lists else hostile if n in quoted else values.get(n, f"<{n}>") for n in names]
    error = cls(*args)
    text = str(error)
    assert not any(c in text for c in "\x1b\u202e\x07"), text[:200]
    assert len(text) < 2000, len(text)
    kept = [getattr(error, n) for n in names if n in quoted and hasattr(error, n)]
    assert hostile in kept or not kept
