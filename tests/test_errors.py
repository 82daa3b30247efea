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
