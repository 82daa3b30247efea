"""The resume policy's classifier (DESIGN §7(3)): tables for every rule, properties for the rest."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal.model import Event, EventType, StopReason
from journal.pure.classify import (
    Absent,
    AdvancedPastInput,
    Completed,
    Pending,
    Resume,
    ResumeMode,
    TerminalError,
    ToolUseUnresolved,
    TrailingPartialToolBatch,
    classify_submission_state,
    count_consecutive_retryable_errors,
    find_trailing_partial_tool_batch,
    is_context_overflow,
    is_retryable_error,
)
from tests import builders
from tests.builders import raw, result, step_end, step_start, system, turn_start, usage, user
from tests.strategies import any_items, bookkeeping_items, significant_items

WINDOW = 200_000

# --- building logs ------------------------------------------------------------------------

# The shared builders in this suite's dialect: seq 0 is the submission's input, so a log starts
# at seq 1; an assistant says "…"; every tool is "echo".
log = partial(builders.log, first_seq=1, clock_ms=1000)
call = partial(builders.call, name="echo")
dispatch = partial(builders.dispatch, name="echo")
assistant = partial(builders.assistant, "…")
tool_use = partial(builders.tool_use, content="…", name="echo")
error = partial(builders.error, content="…")

STOP = assistant(stop_reason="stop")
ABORTED = assistant(stop_reason="aborted")
INTERRUPTED = raw("stream_interrupted")
CONTINUED = raw("stream_continued")
TURN_START = turn_start()
STEP_START = step_start()
STEP_END = step_end()
APP_NOTE = raw("x.note", text="an application's own event")


def resume(mode: ResumeMode, at: int | None, errors: int = 0) -> Callable[[list[Event]], Resume]:
    """The expected ``Resume``, its assistant named by index into the log."""
    return lambda events: Resume(mode, None if at is None else events[at], errors)


def completed(at: int, *, overflow: bool) -> Callable[[list[Event]], Completed]:
    return lambda events: Completed(events[at], overflow)


def unresolved(at: int) -> Callable[[list[Event]], ToolUseUnresolved]:
    return lambda events: ToolUseUnresolved(events[at])


def fixed(state: object) -> Callable[[list[Event]], object]:
    return lambda events: state


M = ResumeMode

# --- the ten rules, as a table --------------------------------------------------------------

CASES = [
    # rule 2
    pytest.param(
        [STOP, user("and another thing")],
        fixed(AdvancedPastInput()),
        id="r2_user_message_after_input_is_advanced_past_input",
    ),
    pytest.param(
        [tool_use("a"), user("and another thing")],
        fixed(AdvancedPastInput()),
        id="r2_user_message_wins_over_an_open_batch",
    ),
    # rule 3
    pytest.param([], resume(M.INPUT_ONLY, None), id="r3_nothing_after_input_resumes_input_only"),
    pytest.param(
        [TURN_START, STEP_START, APP_NOTE],
        resume(M.INPUT_ONLY, None),
        id="r3_only_bookkeeping_resumes_input_only",
    ),
    # rule 4 (before overflow: finished work is settled, overflow only flagged)
    pytest.param([STOP], completed(0, overflow=False), id="r4_stop_is_completed"),
    pytest.param([assistant(stop_reason="length")], completed(0, overflow=False), id="r4_length_is_completed"),
    pytest.param(
        [tool_use("a"), result("a"), STEP_END, STOP],
        completed(3, overflow=False),
        id="r4_stop_after_a_batch_is_completed",
    ),
    pytest.param(
        [assistant(stop_reason="stop", usage=usage(190_000, 10, 10_001))],
        completed(0, overflow=True),
        id="r4_stop_over_the_window_is_completed_with_silent_overflow",
    ),
    pytest.param(
        [assistant(stop_reason="stop", usage=usage(190_000, 10, 10_000))],
        completed(0, overflow=False),
        id="r4_stop_exactly_at_the_window_is_no_overflow",
    ),
    pytest.param(
        [assistant(stop_reason="length", usage=usage(198_000, 0))],
        completed(0, overflow=True),
        id="r4_length_with_no_output_at_99_percent_is_silent_overflow",
    ),
    pytest.param(
        [assistant(stop_reason="length", usage=usage(197_999, 0))],
        completed(0, overflow=False),
        id="r4_length_below_99_percent_is_no_overflow",
    ),
    pytest.param(
        [assistant(stop_reason="length", usage=usage(199_000, 1))],
        completed(0, overflow=False),
        id="r4_length_with_output_is_no_overflow",
    ),
    # rule 5
    pytest.param(
        [error("prompt is too long: 215000 tokens > 200000 maximum")],
        resume(M.OVERFLOW, 0),
        id="r5_prompt_too_long_resumes_overflow",
    ),
    pytest.param(
        [error("Error code: 400 - context_length_exceeded")],
        resume(M.OVERFLOW, 0),
        id="r5_context_length_exceeded_resumes_overflow",
    ),
    pytest.param(
        [error("Your input exceeds the context window of this model")],
        resume(M.OVERFLOW, 0),
        id="r5_exceeds_the_context_window_resumes_overflow",
    ),
    pytest.param(
        [error("prompt is too long: 215000 tokens > 200000 maximum (HTTP 500 upstream)")],
        resume(M.OVERFLOW, 0),
        id="r5_overflow_wins_over_a_retryable_status",
    ),
    # rule 6
    pytest.param(
        [error("upstream said HTTP 503")],
        resume(M.TRANSIENT_RETRY, 0, errors=1),
        id="r6_http_503_resumes_transient_retry",
    ),
    pytest.param(
        [error("overloaded_error"), error("rate limit reached"), error("socket hang up")],
        resume(M.TRANSIENT_RETRY, 2, errors=3),
        id="r6_retryable_errors_in_a_row_are_counted",
    ),
    pytest.param(
        [error("invalid api key"), error("Request timed out")],
        resume(M.TRANSIENT_RETRY, 1, errors=1),
        id="r6_count_stops_at_a_non_retryable_error",
    ),
    pytest.param(
        [tool_use("a"), result("a"), STEP_END, error("fetch failed"), STEP_START, error("ECONNRESET")],
        resume(M.TRANSIENT_RETRY, 5, errors=2),
        id="r6_count_stops_at_a_tool_use_assistant",
    ),
    pytest.param(
        [error("billing: monthly budget of 215000 tokens used up")],
        fixed(TerminalError("billing: monthly budget of 215000 tokens used up")),
        id="r6_215000_tokens_is_not_a_retryable_500",
    ),
    pytest.param(
        [error("413 request_too_large: see the rate limits page")],
        resume(M.TRANSIENT_RETRY, 0, errors=1),
        id="r6_a_rate_limit_that_reads_like_an_overflow_resumes_transient_retry",
    ),
    pytest.param(
        [error("ThrottlingException: Too many tokens, please wait before trying again.")],
        resume(M.TRANSIENT_RETRY, 0, errors=1),
        id="r6_a_bedrock_throttle_about_too_many_tokens_resumes_transient_retry",
    ),
    # rule 7
    pytest.param(
        [ABORTED, INTERRUPTED, CONTINUED],
        resume(M.STREAM_CONTINUATION, 0),
        id="r7_aborted_then_stream_signals_resumes_stream_continuation",
    ),
    pytest.param(
        [ABORTED, STEP_END, INTERRUPTED, APP_NOTE, CONTINUED],
        resume(M.STREAM_CONTINUATION, 0),
        id="r7_bookkeeping_between_signals_keeps_them_adjacent",
    ),
    pytest.param(
        [tool_use("a", "b"), result("a"), ABORTED, INTERRUPTED, CONTINUED],
        resume(M.STREAM_CONTINUATION, 2),
        id="r7_stream_continuation_wins_over_a_partial_batch",
    ),
    pytest.param(
        [ABORTED, INTERRUPTED, system(), CONTINUED],
        resume(M.ABORTED_PARTIAL, 0),
        id="r7_signals_not_adjacent_are_aborted_partial",
    ),
    pytest.param(
        [ABORTED, CONTINUED, INTERRUPTED],
        resume(M.ABORTED_PARTIAL, 0),
        id="r7_signals_in_the_wrong_order_are_aborted_partial",
    ),
    pytest.param(
        [ABORTED, INTERRUPTED],
        resume(M.ABORTED_PARTIAL, 0),
        id="r7_interrupted_without_continued_is_aborted_partial",
    ),
    # rule 8
    pytest.param([tool_use("a", "b")], unresolved(0), id="r8_tool_use_without_any_result_is_unresolved"),
    pytest.param(
        [STEP_START, tool_use("a"), dispatch("a")],
        unresolved(1),
        id="r8_dispatched_call_without_result_is_unresolved",
    ),
    pytest.param(
        [tool_use("a", "b"), dispatch("a"), result("a"), dispatch("b"), result("b")],
        resume(M.TOOL_RESULTS, 0),
        id="r8_complete_batch_resumes_tool_results",
    ),
    pytest.param(
        [tool_use("a", "b"), result("b"), result("a")],
        resume(M.TOOL_RESULTS, 0),
        id="r8_results_out_of_call_order_are_still_complete",
    ),
    pytest.param(
        [tool_use("a", "b"), dispatch("a"), result("a"), dispatch("b")],
        resume(M.TOOL_RESULTS_PARTIAL, 0),
        id="r8_partial_batch_resumes_tool_results_partial",
    ),
    pytest.param(
        [tool_use("a"), result("a"), tool_use("b")],
        resume(M.TOOL_RESULTS_PARTIAL, 2),
        id="r8_new_batch_after_earlier_results_is_partial_not_unresolved",
    ),
    # rule 9
    pytest.param(
        [tool_use("a", "b"), result("a"), ABORTED],
        resume(M.TOOL_RESULTS_PARTIAL, 2),
        id="r9_partial_batch_then_aborted_resumes_tool_results_partial",
    ),
    pytest.param(
        [tool_use("a", "b"), result("a"), result("b"), STEP_END, ABORTED],
        resume(M.ABORTED_PARTIAL, 4),
        id="r9_complete_batch_then_aborted_resumes_aborted_partial",
    ),
    pytest.param([ABORTED], resume(M.ABORTED_PARTIAL, 0), id="r9_aborted_alone_resumes_aborted_partial"),
    pytest.param(
        [tool_use("a", "b"), result("a"), ABORTED, ABORTED],
        resume(M.ABORTED_PARTIAL, 3),
        id="r9_two_aborted_after_a_batch_break_the_shape",
    ),
    # rule 10
    pytest.param(
        [error("invalid api key")],
        fixed(TerminalError("invalid api key")),
        id="r10_non_retryable_error_is_terminal_with_its_message",
    ),
    pytest.param(
        [error(None)],
        fixed(TerminalError("error")),
        id="r10_error_without_message_is_terminal_with_stop_reason",
    ),
    pytest.param(
        [assistant(stop_reason="refusal")], fixed(TerminalError("refusal")), id="r10_unknown_stop_reason_is_terminal"
    ),
    pytest.param(
        [("assistant_message", {"content": "?"})],
        fixed(TerminalError("unknown")),
        id="r10_missing_stop_reason_is_terminal_unknown",
    ),
]


@pytest.mark.parametrize(("items", "expected"), CASES)
def test_classify_submission_state(items: list[tuple[str, Any]], expected: Callable) -> None:
    events = log(*items)
    assert classify_submission_state(events, context_window=WINDOW) == expected(events)


def test_r1_missing_input_event_is_absent() -> None:
    assert classify_submission_state(None, context_window=WINDOW) == Absent()


def test_every_rule_state_and_mode_is_covered_by_the_table() -> None:
    states = [p.values[1](log(*p.values[0])) for p in CASES]
    kinds = {state.kind for state in states} | {Absent.kind}
    assert kinds == {"absent", "advanced_past_input", "completed", "tool_use_unresolved", "terminal_error", "resume"}
    assert {state.mode for state in states if isinstance(state, Resume)} == set(ResumeMode)
    assert {p.id.split("_")[0] for p in CASES} | {"r1"} == {f"r{n}" for n in range(1, 11)}


def test_resume_carries_no_assistant_only_for_input_only() -> None:
    for param in CASES:
        state = param.values[1](log(*param.values[0]))
        if isinstance(state, Resume):
            assert (state.assistant is None) == (state.mode is ResumeMode.INPUT_ONLY)


# --- the states ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        (Absent, "absent"),
        (AdvancedPastInput, "advanced_past_input"),
        (Completed, "completed"),
        (ToolUseUnresolved, "tool_use_unresolved"),
        (TerminalError, "terminal_error"),
        (Pending, "pending"),
        (Resume, "resume"),
    ],
)
def test_each_state_names_its_kind_on_the_class(cls: type, kind: str) -> None:
    assert cls.kind == kind


def test_state_to_dict_starts_with_kind_and_flattens_events_and_modes() -> None:
    [event] = log(ABORTED)
    assert Resume(ResumeMode.ABORTED_PARTIAL, event, 2).to_dict() == {
        "kind": "resume",
        "mode": "aborted_partial",
        "assistant": event.to_dict(),
        "consecutive_retryable_errors": 2,
    }
    assert Pending().to_dict() == {"kind": "pending"}
    assert TerminalError("boom").to_dict() == {"kind": "terminal_error", "reason": "boom"}


def test_resume_mode_values_are_the_vocabulary() -> None:
    assert [str(mode) for mode in ResumeMode] == [
        "input_only",
        "stream_continuation",
        "tool_results",
        "tool_results_partial",
        "transient_retry",
        "overflow",
        "aborted_partial",
    ]
    assert ResumeMode("overflow") == "overflow"


def test_states_are_hashable_although_events_hold_dicts() -> None:
    [event] = log(STOP)
    assert len({Completed(event, False), Completed(event, False), Absent()}) == 2


# --- the trailing partial batch -----------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "at", "call_ids"),
    [
        pytest.param(
            [tool_use("a", "b", "c"), result("b")],
            0,
            ("a", "b", "c"),
            id="partial_batch_returns_all_calls_in_call_order",
        ),
        pytest.param(
            [tool_use("a", "b"), result("a"), STEP_END, ABORTED],
            0,
            ("a", "b"),
            id="partial_batch_then_one_aborted_assistant",
        ),
        pytest.param([tool_use("a", "b")], 0, ("a", "b"), id="batch_without_results_is_partial"),
        pytest.param(
            [tool_use("a"), dispatch("a"), result("zz")],
            0,
            ("a",),
            id="result_for_a_foreign_call_answers_nothing",
        ),
        pytest.param(
            [tool_use("x"), result("x"), tool_use("a", "b"), result("a")],
            2,
            ("a", "b"),
            id="only_the_last_batch_is_examined",
        ),
        pytest.param(
            [tool_use("a", "b"), result("a"), ABORTED, INTERRUPTED],
            None,
            (),
            id="trailing_signal_breaks_the_shape",
        ),
        pytest.param([tool_use("a", "b"), result("a"), result("b")], None, (), id="complete_batch_is_none"),
        pytest.param(
            [tool_use("a", "b"), result("a"), result("b"), ABORTED],
            None,
            (),
            id="complete_batch_then_aborted_is_none",
        ),
        pytest.param(
            [tool_use("a", "b"), result("a"), ABORTED, ABORTED],
            None,
            (),
            id="two_aborted_assistants_are_not_the_shape",
        ),
        pytest.param(
            [tool_use("a", "b"), result("a"), system()],
            None,
            (),
            id="system_message_after_results_is_not_the_shape",
        ),
        pytest.param(
            [tool_use("a", "b"), result("a"), INTERRUPTED, CONTINUED],
            None,
            (),
            id="stream_continued_means_no_partial_batch",
        ),
        pytest.param([CONTINUED, tool_use("a", "b")], None, (), id="stream_continued_anywhere_means_no_partial_batch"),
        pytest.param(
            [error("overloaded"), result("a")],
            None,
            (),
            id="results_after_a_non_tool_use_assistant_are_none",
        ),
        pytest.param([STOP], None, (), id="stopped_assistant_is_none"),
        pytest.param([assistant(stop_reason="tool_use")], None, (), id="tool_use_without_calls_is_none"),
        pytest.param([], None, (), id="empty_slice_is_none"),
    ],
)
def test_find_trailing_partial_tool_batch(items: list, at: int | None, call_ids: tuple[str, ...]) -> None:
    events = log(*items)
    batch = find_trailing_partial_tool_batch(events)
    if at is None:
        assert batch is None
    else:
        assert batch == TrailingPartialToolBatch(events[at], tuple(call(i) for i in call_ids))


def test_find_trailing_partial_tool_batch_of_none_is_none() -> None:
    assert find_trailing_partial_tool_batch(None) is None


# --- the predicates -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "retryable"),
    [
        ("Overloaded", True),
        ("rate_limit_error: slow down", True),
        ("429 Too Many Requests", True),
        ("HTTP 503", True),
        ("status 500.", True),
        ("502 Bad Gateway", True),
        ("504", True),
        ("503 Service Unavailable", True),
        ("service unavailable", True),
        ("Internal server error", True),
        ("network error", True),
        ("connection reset by peer", True),
        ("connection refused", True),
        ("Connection lost", True),
        ("socket hang up", True),
        ("TypeError: fetch failed", True),
        ("request timed out", True),
        ("ETIMEDOUT", True),
        ("read timeout", True),
        ("prompt is too long: 215000 tokens > 200000 maximum", False),
        ("request 15029 failed", False),
        ("1,500 tokens over budget", False),
        ("version 1.503 is unsupported", False),
        ("invalid api key", False),
        ("Request too large for gpt-4o on tokens per min; see the rate-limits page", True),
        ("ThrottlingException: Rate exceeded", True),
        ("Throttling error: Too many tokens, please wait before trying again.", True),
        ("the request was throttled", True),
        ("", False),
    ],
)
def test_is_retryable_error_on_messages(message: str, retryable: bool) -> None:
    assert is_retryable_error(message) is retryable
    [event] = log(error(message))
    assert is_retryable_error(event) is retryable


# Transient failures that also match an overflow pattern (DESIGN §7(3), the reference's negative
# patterns): a rate limit, too many requests, a throttle, and Bedrock's "Throttling error:" and
# "Service unavailable:" prefixes. Not an overflow: the same request is retried, not compacted.
TRANSIENT_THAT_READS_LIKE_AN_OVERFLOW = [
    pytest.param("ThrottlingException: Too many tokens, please wait before trying again.", id="bedrock_raw_throttle"),
    pytest.param("Throttling error: Too many tokens, please wait before trying again.", id="bedrock_throttling_prefix"),
    pytest.param("throttling error: too many tokens", id="bedrock_throttling_prefix_lower_case"),
    pytest.param("THROTTLING ERROR: TOO MANY TOKENS", id="bedrock_throttling_prefix_upper_case"),
    pytest.param("  Throttling error : token limit exceeded for this minute", id="throttling_prefix_spaced"),
    pytest.param("Service unavailable: Too many tokens in flight, try again later", id="bedrock_unavailable_prefix"),
    pytest.param("SERVICE UNAVAILABLE: request too large for current capacity", id="bedrock_unavailable_upper_case"),
    pytest.param("Request was throttled: too many tokens", id="throttled"),
    pytest.param("Rate limit exceeded: too many tokens per minute", id="rate_limit"),
    pytest.param(
        "rate_limit_error: This request would exceed the rate limit of 40,000 input tokens per minute. "
        "Too many tokens.",
        id="anthropic_rate_limit_error",
    ),
    pytest.param("RateLimitError: token limit exceeded, retry in 20s", id="ratelimit_one_word"),
    pytest.param("rate-limited: context length exceeded for this window", id="rate_limited_hyphenated"),
    pytest.param("429 Too Many Requests: too many tokens", id="too_many_requests_with_status"),
    pytest.param("too many requests; token limit exceeded", id="too_many_requests_lower_case"),
    pytest.param("413 request_too_large: see the rate limits page", id="request_too_large_beside_rate_limits"),
    pytest.param("Request too large for gpt-4o on tokens per min; see the rate-limits page", id="openai_tpm"),
]


@pytest.mark.parametrize("message", TRANSIENT_THAT_READS_LIKE_AN_OVERFLOW)
def test_a_transient_failure_that_reads_like_an_overflow_is_a_transient_retry(message: str) -> None:
    [event] = log(error(message))
    assert not is_context_overflow(event, context_window=WINDOW)
    assert is_retryable_error(message)
    assert classify_submission_state([event], context_window=WINDOW) == Resume(M.TRANSIENT_RETRY, event, 1)


# Overflow messages that carry a retryable-looking word or number but none of the negative
# patterns: still overflows, never retried as they are.
STILL_AN_OVERFLOW = [
    pytest.param("prompt is too long: 215000 tokens > 200000 maximum", id="anthropic"),
    pytest.param(
        "This model's maximum context length is 4097 tokens. However, you requested 4429 tokens "
        "(429 in the messages, 4000 in the completion). Please reduce the length of the messages or completion.",
        id="openai_with_a_whole_429_in_its_counts",
    ),
    pytest.param("Validation error: Input is too long for requested model.", id="bedrock_validation_prefix"),
    pytest.param("ValidationException: Input is too long for requested model.", id="bedrock_raw_validation"),
    pytest.param("upstream 503: prompt is too long", id="overflow_beside_a_5xx"),
    pytest.param(
        "Overloaded? No: your input exceeds the context window of this model", id="overflow_beside_overloaded"
    ),
    pytest.param("Too many tokens: the prompt does not fit (service unavailable: no)", id="unavailable_not_as_prefix"),
]


@pytest.mark.parametrize("message", STILL_AN_OVERFLOW)
def test_an_overflow_without_a_transient_wording_stays_an_overflow(message: str) -> None:
    [event] = log(error(message))
    assert is_context_overflow(event, context_window=WINDOW)
    assert not is_retryable_error(message)
    assert classify_submission_state([event], context_window=WINDOW) == Resume(M.OVERFLOW, event, 0)


def test_only_an_error_assistant_is_a_retryable_error() -> None:
    aborted_by_timeout = log(assistant(stop_reason="aborted", error_message="request timed out"))[0]
    result_event = log(("tool_result", {"tool_call_id": "a", "error_message": "timed out"}))[0]
    assert not is_retryable_error(aborted_by_timeout)
    assert not is_retryable_error(result_event)
    assert not is_retryable_error(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("item", "window", "overflow"),
    [
        pytest.param(error("maximum context length is 128000 tokens"), WINDOW, True, id="openai_message"),
        pytest.param(error("input is too long for requested model"), WINDOW, True, id="bedrock_message"),
        pytest.param(error("request_too_large"), WINDOW, True, id="anthropic_413"),
        pytest.param(error("Too many tokens in the request"), WINDOW, True, id="too_many_tokens"),
        pytest.param(error("context length exceeded"), WINDOW, True, id="context_length_exceeded_prose"),
        pytest.param(error("overloaded"), WINDOW, False, id="retryable_error_is_not_overflow"),
        pytest.param(
            assistant(stop_reason="aborted", error_message="prompt is too long"),
            WINDOW,
            False,
            id="aborted_is_never_overflow",
        ),
        pytest.param(
            assistant(stop_reason="stop", usage=usage(200_001, 5)), WINDOW, True, id="stop_over_window_by_input"
        ),
        pytest.param(
            assistant(stop_reason="stop", usage={"input": 200_001.0, "output": 5}),
            WINDOW,
            True,
            id="integral_float_counts",
        ),
        pytest.param(
            assistant(stop_reason="stop", usage={"input": 150_000}),
            WINDOW,
            False,
            id="missing_cache_read_counts_as_zero",
        ),
        pytest.param(
            assistant(stop_reason="length", usage={"input": 199_000}),
            WINDOW,
            False,
            id="length_without_output_is_unknown",
        ),
        pytest.param(assistant(stop_reason="stop"), WINDOW, False, id="missing_usage"),
        pytest.param(assistant(stop_reason="stop", usage=usage(10, 5)), 0, False, id="no_window_no_silent_overflow"),
        pytest.param(
            assistant(stop_reason="stop", usage=usage(10**400, 5)), 10**399, True, id="huge_counts_stay_exact"
        ),
    ],
)
def test_is_context_overflow(item: tuple[str, Any], window: int, overflow: bool) -> None:
    [event] = log(item)
    assert is_context_overflow(event, context_window=window) is overflow


@pytest.mark.parametrize(
    ("items", "count"),
    [
        pytest.param([], 0, id="empty"),
        pytest.param([error("overloaded")], 1, id="one"),
        pytest.param([error("overloaded"), error("HTTP 429"), error("timeout")], 3, id="three_in_a_row"),
        pytest.param(
            [error("overloaded"), error("invalid api key"), error("timeout")],
            1,
            id="stops_at_non_retryable_error",
        ),
        pytest.param([error("overloaded"), user("and another thing"), error("timeout")], 1, id="stops_at_user_message"),
        pytest.param([error("overloaded"), STEP_END, INTERRUPTED, error("timeout")], 2, id="passes_over_other_events"),
        pytest.param([error("overloaded"), STOP], 0, id="ends_with_a_good_answer"),
        pytest.param([error("overloaded"), error("prompt is too long")], 0, id="stops_at_an_overflow"),
    ],
)
def test_count_consecutive_retryable_errors(items: list, count: int) -> None:
    assert count_consecutive_retryable_errors(log(*items)) == count


def test_count_consecutive_retryable_errors_of_none_is_zero() -> None:
    assert count_consecutive_retryable_errors(None) == 0


# --- garbage in, a state out --------------------------------------------------------------

GARBAGE = [
    pytest.param([("assistant_message", None)], id="data_is_none"),
    pytest.param([("assistant_message", ["stop"])], id="data_is_a_list"),
    pytest.param([("assistant_message", {"stop_reason": "tool_use", "tool_calls": "a,b"})], id="tool_calls_not_a_list"),
    pytest.param(
        [("assistant_message", {"stop_reason": "tool_use", "tool_calls": [1, None, "x", {"id": 3}]}), result("a")],
        id="tool_calls_entries_not_dicts",
    ),
    pytest.param([("assistant_message", {"stop_reason": "stop", "usage": "lots"})], id="usage_not_a_dict"),
    pytest.param(
        [("assistant_message", {"stop_reason": "stop", "usage": {"input": math.nan, "cache_read": math.inf}})],
        id="usage_nan_and_inf",
    ),
    pytest.param(
        [("assistant_message", {"stop_reason": "length", "usage": {"input": True, "output": False}})],
        id="usage_bools",
    ),
    pytest.param(
        [("assistant_message", {"stop_reason": "stop", "usage": {"input": 10**400, "cache_read": 0.5}})],
        id="usage_huge_int_and_fraction",
    ),
    pytest.param(
        [("assistant_message", {"stop_reason": ["error"], "error_message": {"x": 1}})],
        id="stop_reason_and_message_wrong_types",
    ),
    pytest.param(
        [("tool_result", {"tool_call_id": ["a"]}), ("assistant_message", {"stop_reason": "aborted"})],
        id="result_id_wrong_type",
    ),
    pytest.param(
        [(None, {}), (42, None), ("x.app", 7), ("nonsense", {"stop_reason": "stop"})],
        id="types_wrong_or_unknown",
    ),
]


@pytest.mark.parametrize("items", GARBAGE)
def test_garbage_events_classify_without_raising(items: list) -> None:
    events = log(*items)
    state = classify_submission_state(events, context_window=WINDOW)
    assert state == classify_submission_state(events, context_window=WINDOW)
    assert not isinstance(state, Pending)
    find_trailing_partial_tool_batch(events)
    assert count_consecutive_retryable_errors(events) >= 0


def test_enum_members_in_data_read_as_their_values() -> None:
    events = log(("assistant_message", {"content": "", "stop_reason": StopReason.STOP}))
    events = [Event(e.session_id, e.seq, EventType.ASSISTANT_MESSAGE, e.data, e.time_ms) for e in events]
    assert classify_submission_state(events, context_window=WINDOW) == Completed(events[0], False)


def test_any_iterable_of_events_is_accepted() -> None:
    events = log(tool_use("a"), result("a"))
    assert classify_submission_state(tuple(events), context_window=WINDOW) == Resume(
        ResumeMode.TOOL_RESULTS, events[0], 0
    )


# --- properties ---------------------------------------------------------------------------

_WINDOWS = st.integers(-5, 400_000) | st.integers()


@settings(max_examples=200, deadline=None)
@given(items=st.lists(any_items, max_size=10), window=_WINDOWS)
def test_classifier_never_raises_and_is_deterministic(items: list, window: int) -> None:
    events = log(*items)
    state = classify_submission_state(events, context_window=window)
    assert state == classify_submission_state(list(events), context_window=window)
    assert isinstance(state, (AdvancedPastInput, Completed, ToolUseUnresolved, TerminalError, Resume))
    if isinstance(state, Resume):
        assert isinstance(state.mode, ResumeMode)
        assert state.consecutive_retryable_errors == count_consecutive_retryable_errors(events)
        assert state.assistant is None or state.assistant in events
    if isinstance(state, TerminalError):
        assert isinstance(state.reason, str) and state.reason


@settings(max_examples=150, deadline=None)
@given(items=st.lists(any_items, max_size=10))
def test_find_trailing_partial_tool_batch_never_raises_and_names_an_owed_call(items: list) -> None:
    events = log(*items)
    batch = find_trailing_partial_tool_batch(events)
    assert batch == find_trailing_partial_tool_batch(events)
    if batch is not None:
        assert batch.assistant in events
        assert batch.assistant.data["stop_reason"] == "tool_use"
        after = events[events.index(batch.assistant) + 1 :]
        answered = [e.data.get("tool_call_id") for e in after if e.type == "tool_result" and isinstance(e.data, dict)]
        assert any(not isinstance(c.get("id"), str) or c["id"] not in answered for c in batch.tool_calls)


@settings(max_examples=150, deadline=None)
@given(
    significant=st.lists(significant_items, max_size=8),
    bookkeeping=st.lists(st.tuples(st.integers(0, 8), bookkeeping_items), max_size=6),
)
def test_bookkeeping_events_never_change_the_classification(significant: list, bookkeeping: list) -> None:
    events = log(*significant)
    mixed: list[Event] = list(events)
    for position, (type_, data) in bookkeeping:
        mixed.insert(min(position, len(mixed)), Event("s", 0, type_, data, 0))
    state = classify_submission_state(events, context_window=WINDOW)
    assert classify_submission_state(mixed, context_window=WINDOW) == state
    assert find_trailing_partial_tool_batch(mixed) == find_trailing_partial_tool_batch(events)
    assert count_consecutive_retryable_errors(mixed) == count_consecutive_retryable_errors(events)
