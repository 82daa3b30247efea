"""``journal.bulk.paused_collector``: the cyclic collector is off inside, back as it was after."""

from __future__ import annotations

import gc

import pytest

from journal.bulk import paused_collector


def test_the_collector_is_paused_inside_and_back_on_after_even_on_an_error() -> None:
    assert gc.isenabled()
    with paused_collector():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), paused_collector():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with paused_collector():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_nested_pauses_turn_it_back_on_once_the_outer_one_ends() -> None:
    with paused_collector():
        with paused_collector():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
