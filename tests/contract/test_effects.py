"""Effect classes (DESIGN §7(1)): no unsafe re-run (G9), indeterminate is a state (G10).

The test tools (``tests/effect_tools.py``) write every side effect to an external ledger, the
witness; the journal's own log is what is being tested. Each crash is a real SIGKILL of a child
process at a named crash point in the middle of the call (``tool.before_run``: dispatched, the
provider not reached; ``tool.after_run``: the provider did it, no result recorded yet), or in the
middle of recovery itself.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

import journal
from journal import EffectAction, EffectKind, IndeterminateReason, Risk

from ..conftest import python_child, release_together, run_child
from ..effect_tools import ARGUMENTS, CALL, CHILD, SESSION, World, invoice_key

KILLED = -signal.SIGKILL


@pytest.fixture
def world(tmp_path: Path) -> World:
    (tmp_path / "world").mkdir()
    return World(tmp_path / "world")


def _kill_mid_call(db_path: Path, world: World, tool: str, point: str, **env: str) -> None:
    """Run the live call of ``tool`` in a child process and SIGKILL it at ``point``."""
    done = run_child(CHILD, str(db_path), str(world.root), "call", tool, env={"JOURNAL_CRASH_AT": point, **env})
    assert done.returncode == KILLED, (done.stdout, done.stderr)


def _recover_in_child(db_path: Path, world: World, *, crash_at: str | None = None) -> Any:
    env = {"JOURNAL_CRASH_AT": crash_at} if crash_at else {}
    done = run_child(CHILD, str(db_path), str(world.root), "recover", env=env)
    if crash_at:
        assert done.returncode == KILLED, (done.stdout, done.stderr)
        return None
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[0])


def _dispatch_event(j: journal.Journal) -> journal.Event:
    (event,) = [e for e in j.events(SESSION) if e.type == "tool_call"]
    return event


def _results(j: journal.Journal, call_id: str = CALL) -> list[journal.Event]:
    return [
        e
        for e in j.events(SESSION)
        if e.type in ("tool_result", "tool_result_late") and e.data["tool_call_id"] == call_id
    ]


def _close_and_check(j: journal.Journal) -> None:
    """The close policy after effect recovery owes no result for the settled call."""
    (closed,) = j.recover()
    assert [e.type for e in closed.appended] == ["turn_end"]
    assert j.scan().open_turns == () and j.scan().pending_calls == ()
    assert j.check() == [] and j.integrity_check() == ["ok"]


# -- 1. Idempotent ------------------------------------------------------------------------------


@pytest.mark.parametrize(("point", "effects_before"), [("tool.after_run", 1), ("tool.before_run", 0)])
def test_g9_idempotent_call_killed_mid_call_is_reissued_with_the_same_key_and_takes_effect_once(
    db_path: Path, world: World, fresh, point: str, effects_before: int
) -> None:
    _kill_mid_call(db_path, world, "pay_invoice", point)
    assert len(world.ledger.entries()) == effects_before
    key = invoice_key(ARGUMENTS["pay_invoice"])
    j = fresh()
    dispatched = _dispatch_event(j)
    assert (dispatched.data["effect"], dispatched.data["idempotency_key"]) == ("idempotent", key)

    (outcome,) = j.recover_effects(world.registry)

    assert outcome.action is EffectAction.REISSUED
    assert outcome.idempotency_key == outcome.derived_key == key and not outcome.key_mismatch
    assert [e["key"] for e in world.ledger.entries()] == [key]  # exactly one payment
    assert {r["key"] for r in world.keyed.requests.entries()} == {key}  # every request carried it
    (result,) = _results(fresh())
    assert result.data["content"] == world.keyed.seen.read()[key]  # the provider's one receipt
    assert result.data["metadata"] == {"source": "effect_recovery", "action": "reissued"}
    _close_and_check(j)


def test_the_keyed_provider_deduplicates_on_the_key_only_never_on_the_content(world: World) -> None:
    # What makes the Idempotent tests able to fail: the same content under another key is a
    # second payment, so a key derivation that changed between the call and its recovery shows.
    same = ARGUMENTS["pay_invoice"]
    first = world.keyed.charge("k1", same)
    assert world.keyed.charge("k1", {"invoice": "other", "cents": 1}) == first
    world.keyed.charge("k2", same)
    assert [e["key"] for e in world.ledger.entries()] == ["k1", "k2"]


def test_g9_a_key_that_no_longer_derives_the_same_is_reported_and_the_recorded_key_is_used(
    db_path: Path, tmp_path: Path, fresh
) -> None:
    (tmp_path / "world").mkdir()
    broken = World(tmp_path / "world", key=lambda arguments: f"k-{time.time_ns()}")
    _kill_mid_call(db_path, broken, "pay_invoice", "tool.after_run", BROKEN_KEY="1")
    j = fresh()
    recorded = _dispatch_event(j).data["idempotency_key"]

    (outcome,) = j.recover_effects(broken.registry)

    assert outcome.key_mismatch and outcome.derived_key != recorded
    assert outcome.idempotency_key == recorded  # the key the provider saw
    assert len(broken.ledger.entries()) == 1


# -- 2. Queryable -------------------------------------------------------------------------------


def test_g9_queryable_call_that_landed_is_completed_from_the_provider_without_reissuing(
    db_path: Path, world: World, fresh
) -> None:
    _kill_mid_call(db_path, world, "send_sms", "tool.after_run")
    assert len(world.ledger.entries()) == 1
    j = fresh()
    request_id = _dispatch_event(j).data["request_id"]

    (outcome,) = j.recover_effects(world.registry)

    assert (outcome.action, outcome.request_id) == (EffectAction.LANDED, request_id)
    assert [e["request_id"] for e in world.sms.lookups.entries()] == [request_id]
    assert [e["request_id"] for e in world.ledger.entries()] == [request_id]  # not re-issued
    (result,) = _results(fresh())
    assert result.data["content"] == world.sms.received.read()[request_id]
    _close_and_check(j)


def test_g9_queryable_call_that_never_arrived_is_reissued_with_the_recorded_request_id(
    db_path: Path, world: World, fresh
) -> None:
    _kill_mid_call(db_path, world, "send_sms", "tool.before_run")
    assert world.ledger.entries() == []
    j = fresh()
    request_id = _dispatch_event(j).data["request_id"]

    (outcome,) = j.recover_effects(world.registry)

    assert (outcome.action, outcome.request_id) == (EffectAction.REISSUED, request_id)
    assert [e["request_id"] for e in world.ledger.entries()] == [request_id]  # one send, from the retry
    (result,) = _results(fresh())
    assert result.data["content"] == world.sms.received.read()[request_id]
    _close_and_check(j)


def test_g9_a_failing_lookup_is_treated_as_unsafe_and_nothing_is_reissued(db_path: Path, world: World, fresh) -> None:
    _kill_mid_call(db_path, world, "send_sms", "tool.before_run")
    world.sms.fail_lookups()
    j = fresh()

    (outcome,) = j.recover_effects(world.registry)

    assert (outcome.action, outcome.reason) == (EffectAction.INDETERMINATE, IndeterminateReason.LOOKUP_FAILED)
    assert "unreachable" in outcome.detail
    assert world.ledger.entries() == []
    assert [c.call_id for c in fresh().indeterminate()] == [CALL]
    assert world.inbox.count(call=CALL, reason="lookup_failed") == 1


# -- 3. Unsafe ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("point", "effects_before"), [("tool.after_run", 1), ("tool.before_run", 0)])
def test_g10_unsafe_call_killed_mid_call_becomes_indeterminate_with_a_notification_and_no_retry(
    db_path: Path, world: World, fresh, point: str, effects_before: int
) -> None:
    _kill_mid_call(db_path, world, "send_email", point)
    before = world.ledger.entries()
    assert len(before) == effects_before
    seen: list[Any] = []
    j = fresh()

    (outcome,) = j.recover_effects(world.registry, on_indeterminate=seen.append)  # a state, not an error

    assert (outcome.action, outcome.reason, outcome.notified) == (
        EffectAction.INDETERMINATE,
        IndeterminateReason.UNSAFE,
        True,
    )
    assert world.ledger.entries() == before  # no retry: the ledger is unchanged
    reader = fresh()
    (call,) = reader.indeterminate()
    assert (call.session_id, call.call_id, call.name) == (SESSION, CALL, "send_email")
    assert reader.scan().indeterminate == (call,) and reader.scan().pending_calls == ()
    assert call.notification["acked_ms"] is None and call.notification["data"]["reason"] == "unsafe"
    # the durable outbox row, and both callbacks (the registry's and the argument) were called
    assert [(c.session_id, c.call_id) for c in seen] == [(SESSION, CALL)]
    assert world.inbox.count(session=SESSION, call=CALL) == 1
    (result,) = _results(reader)
    assert result.seq == call.result_seq
    assert result.data["metadata"] == {
        "synthetic": True, "risk": Risk.TOOL_OUTCOME_UNKNOWN.value, "source": "effect_recovery",
        "indeterminate": True, "reason": "unsafe",
    }  # fmt: skip
    assert "MAY have run" in result.data["content"] and "verify before retrying" in result.data["content"]
    assert "no side effects" not in result.data["content"]
    _close_and_check(j)
    assert [c.call_id for c in fresh().indeterminate()] == [CALL]  # closing the turn does not settle it


def test_g10_recovery_never_retries_an_unsafe_call_however_often_it_runs(db_path: Path, world: World, fresh) -> None:
    _kill_mid_call(db_path, world, "send_email", "tool.before_run")
    j = fresh()
    j.recover_effects(world.registry)
    count = j.count(SESSION)
    for _ in range(3):
        assert j.recover_effects(world.registry) == []
    assert j.count(SESSION) == count and world.ledger.entries() == []
    assert world.inbox.count(call=CALL) == 1


# -- 4. Registration ----------------------------------------------------------------------------


def _noop(arguments: Any, context: journal.ToolContext) -> str:
    return "ok"


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"effects": None}, {"effects": "unsafe"}, {"effects": journal.Idempotent}],
    ids=["missing", "none", "the-class-not-an-instance", "a-string"],
)
def test_registering_a_tool_without_an_effect_class_is_refused(kwargs: dict[str, Any]) -> None:
    registry = journal.ToolRegistry()
    with pytest.raises(journal.MissingEffectClass) as refused:
        registry.register("delete_file", _noop, **kwargs)
    assert refused.value.name == "delete_file" and "effect class" in str(refused.value)
    assert "delete_file" not in registry


@pytest.mark.parametrize(
    "build",
    [
        lambda: journal.Idempotent(),
        lambda: journal.Idempotent(key=None),
        lambda: journal.Idempotent(key="pay-1"),
        lambda: journal.Queryable(),
        lambda: journal.Queryable(lookup=None),
    ],
    ids=[
        "idempotent-without-key",
        "idempotent-key-none",
        "idempotent-key-not-callable",
        "queryable-without-lookup",
        "queryable-lookup-none",
    ],
)
def test_an_effect_class_without_what_its_recovery_needs_cannot_be_constructed(build) -> None:
    with pytest.raises(TypeError):
        build()


def test_there_is_no_default_effect_class() -> None:
    assert attrs.fields(journal.Tool).effects.default is attrs.NOTHING
    assert attrs.fields(journal.Idempotent).key.default is attrs.NOTHING
    assert attrs.fields(journal.Queryable).lookup.default is attrs.NOTHING


def test_registering_a_name_twice_is_refused(world: World) -> None:
    with pytest.raises(journal.InvalidArgument):
        world.registry.register("send_email", _noop, effects=journal.Unsafe())


def test_g12_a_call_to_an_unregistered_tool_or_with_an_underivable_key_writes_nothing(
    j: journal.Journal, world: World
) -> None:
    registry = journal.ToolRegistry()
    registry.register("pay_invoice", _noop, effects=journal.Idempotent(key=lambda arguments: None))
    world.request(j, "send_email")
    count = j.count(SESSION)
    with pytest.raises(journal.UnregisteredTool):
        registry.call(j, SESSION, CALL)
    with pytest.raises(journal.UnknownToolCall):
        registry.call(j, SESSION, "nope")
    s2 = world.request(j, "pay_invoice", session="s2")
    count2 = j.count("s2")
    with pytest.raises(journal.InvalidArgument):
        registry.call(j, s2, CALL)
    assert (j.count(SESSION), j.count("s2")) == (count, count2)


# -- 5. Stable keys, idempotent recovery, kills during recovery ---------------------------------


def test_g8_recovering_twice_derives_the_same_key_and_appends_nothing_the_second_time(
    db_path: Path, world: World, fresh
) -> None:
    _kill_mid_call(db_path, world, "pay_invoice", "tool.after_run")
    # first recovery killed after the re-issue, before its result committed: the key is derived twice
    _recover_in_child(db_path, world, crash_at="effect_recovery.before_commit")
    (outcome,) = _recover_in_child(db_path, world)
    assert outcome["action"] == "reissued" and not outcome["key_mismatch"]
    keys = [r["key"] for r in world.keyed.requests.entries()]
    assert len(keys) == 3 and set(keys) == {invoice_key(ARGUMENTS["pay_invoice"])}
    j = fresh()
    count = j.count(SESSION)
    assert j.recover_effects(world.registry) == []
    assert j.count(SESSION) == count
    assert len(world.ledger.entries()) == 1
    assert len(_results(j)) == 1


@pytest.mark.parametrize(
    ("tool", "live_point", "recovery_point"),
    [
        ("pay_invoice", "tool.before_run", "tool.after_run"),  # killed inside the re-issued call
        ("pay_invoice", "tool.after_run", "effect_recovery.after_commit"),
        ("send_sms", "tool.before_run", "tool.after_run"),  # re-issued, landed, killed: next lookup says landed
        ("send_sms", "tool.before_run", "effect_recovery.before_commit"),
    ],
)
def test_g9_a_kill_during_recovery_itself_still_leaves_one_effect(
    db_path: Path, world: World, fresh, tool: str, live_point: str, recovery_point: str
) -> None:
    _kill_mid_call(db_path, world, tool, live_point)
    _recover_in_child(db_path, world, crash_at=recovery_point)
    assert len(world.ledger.entries()) == 1
    j = fresh()
    j.recover_effects(world.registry)
    count = j.count(SESSION)
    assert j.recover_effects(world.registry) == []
    assert j.count(SESSION) == count
    assert len(world.ledger.entries()) == 1
    (result,) = _results(j)
    assert result.data["content"] in {*world.keyed.seen.read().values(), *world.sms.received.read().values()}
    _close_and_check(j)


@pytest.mark.parametrize(
    ("recovery_point", "deliveries"),
    [
        ("effect_recovery.before_commit", 1),  # nothing committed: the next run does it all
        ("effect_recovery.after_commit", 1),  # committed, callback not called: delivered next run
        ("notify.before_commit", 2),  # called, not marked delivered: called again (at least once)
    ],
)
def test_g10_a_kill_during_unsafe_recovery_still_yields_one_indeterminate_result_and_a_delivered_notification(
    db_path: Path, world: World, fresh, recovery_point: str, deliveries: int
) -> None:
    _kill_mid_call(db_path, world, "send_email", "tool.after_run")
    _recover_in_child(db_path, world, crash_at=recovery_point)
    _recover_in_child(db_path, world)
    assert _recover_in_child(db_path, world) == []
    j = fresh()
    assert len(_results(j)) == 1 and [c.call_id for c in j.indeterminate()] == [CALL]
    assert "delivered_ms" in j.indeterminate()[0].notification["data"]
    assert world.inbox.count(call=CALL) == deliveries
    assert len(world.ledger.entries()) == 1


RACER = """
import json, os, sys, time, journal
from tests.effect_tools import World
db, root, go = sys.argv[1:4]
world = World(root)
with journal.open(db) as j:
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    print(json.dumps([o.action.value for o in j.recover_effects(world.registry)]))
"""


def test_g8_two_processes_recovering_at_once_settle_each_call_once(db_path: Path, world: World, tmp_path: Path) -> None:
    with journal.open(db_path) as j:
        for n, tool in enumerate(["send_email", "pay_invoice", "send_email", "pay_invoice"]):
            turn = world.request(j, tool, session=f"s{n}")
            j.dispatch(turn.session_id, CALL, turn=turn, effect=world.registry.tool(tool).effects.kind.value,
                       idempotency_key=invoice_key(ARGUMENTS[tool]) if tool == "pay_invoice" else None)  # fmt: skip
    go = tmp_path / "go"
    racers = [python_child(RACER, str(db_path), str(world.root), str(go)) for _ in range(2)]
    release_together(racers, go)
    actions = []
    for racer in racers:
        out, err = racer.communicate(timeout=60)
        assert racer.returncode == 0, err
        actions += json.loads(out)
    with journal.open(db_path) as j:
        for n in range(4):
            assert len(_results_of(j, f"s{n}")) == 1, [e.to_dict() for e in j.events(f"s{n}")]
        assert len(j.indeterminate()) == 2 and j.scan().pending_calls == ()
    assert actions.count("indeterminate") == 2  # the loser of each Unsafe race saw it settled
    # both sessions asked to pay the same invoice: one key, so one payment; no email was sent
    assert [e["tool"] for e in world.ledger.entries()] == ["pay_invoice"]
    # each indeterminate call reached the operator (at least once: a racer's start-up sweep may repeat one)
    assert {e["session"] for e in world.inbox.entries()} == {"s0", "s2"}


def _results_of(j: journal.Journal, session: str) -> list[journal.Event]:
    return [e for e in j.events(session) if e.type in ("tool_result", "tool_result_late")]


# -- the live path and the edges of recovery ------------------------------------------------------


def test_g6_a_registered_call_records_its_effect_class_key_and_request_id_before_it_runs(
    j: journal.Journal, db_path: Path, world: World
) -> None:
    seen: dict[str, Any] = {}

    def spy(arguments: Any, context: journal.ToolContext) -> str:
        with journal.open(db_path, readonly=True) as reader:  # an independent reader sees the dispatch
            (pending,) = reader.scan().pending_calls
        seen.update(context=context, pending=pending)
        return "ok"

    registry = journal.ToolRegistry()
    registry.register("send_sms", spy, effects=journal.Queryable(lookup=world.sms.lookup))
    turn = world.request(j, "send_sms")
    put = registry.call(j, turn, CALL)
    assert put.won and put.event.data["content"] == "ok"
    context, pending = seen["context"], seen["pending"]
    assert (context.effect, context.recovery, context.idempotency_key) == (EffectKind.QUERYABLE, False, None)
    assert context.request_id and pending.request_id == context.request_id and pending.effect == "queryable"
    assert j.recover_effects(registry) == []


def test_a_tool_that_raises_leaves_its_call_dispatched_and_recovery_retries_it_later(
    j: journal.Journal, world: World
) -> None:
    attempts: list[str | None] = []

    def flaky(arguments: Any, context: journal.ToolContext) -> str:
        attempts.append(context.idempotency_key)
        if len(attempts) < 3:
            raise ConnectionError("provider down")
        return "done"

    registry = journal.ToolRegistry()
    registry.register("pay_invoice", flaky, effects=journal.Idempotent(key=invoice_key))
    turn = world.request(j, "pay_invoice")
    with pytest.raises(ConnectionError):
        registry.call(j, turn, CALL)
    count = j.count(SESSION)
    (failed,) = j.recover_effects(registry)
    assert failed.action is EffectAction.REISSUE_FAILED and "provider down" in failed.detail
    assert j.count(SESSION) == count and len(j.scan().pending_calls) == 1
    (done,) = j.recover_effects(registry)
    assert done.action is EffectAction.REISSUED and done.result.data["content"] == "done"
    assert set(attempts) == {invoice_key(ARGUMENTS["pay_invoice"])}


def test_a_dispatched_call_of_an_unregistered_tool_is_left_to_the_close_policy(
    j: journal.Journal, world: World
) -> None:
    turn = world.request(j, "send_email")
    turn.dispatch(CALL)
    (outcome,) = j.recover_effects(journal.ToolRegistry())
    assert outcome.action is EffectAction.UNREGISTERED and outcome.appended == ()
    (closed,) = j.recover()
    assert closed.appended[0].data["metadata"]["risk"] == "tool_outcome_unknown"
    assert j.indeterminate() == []


@pytest.mark.parametrize(
    ("tool", "dispatch_fields", "reason"),
    [
        ("pay_invoice", {"effect": "unsafe"}, IndeterminateReason.EFFECT_CHANGED),
        ("send_sms", {}, IndeterminateReason.NO_REQUEST_ID),
    ],
    ids=["dispatched-as-unsafe-now-idempotent", "queryable-without-a-recorded-request-id"],
)
def test_g9_a_call_recovery_cannot_make_safe_becomes_indeterminate(
    j: journal.Journal, world: World, tool: str, dispatch_fields: dict[str, str], reason: IndeterminateReason
) -> None:
    turn = world.request(j, tool)
    turn.dispatch(CALL, **dispatch_fields)
    (outcome,) = j.recover_effects(world.registry)
    assert (outcome.action, outcome.reason) == (EffectAction.INDETERMINATE, reason)
    assert world.ledger.entries() == [] and world.sms.lookups.entries() == []


def test_recover_effects_can_be_limited_to_one_session(j: journal.Journal, world: World) -> None:
    for session in ("a", "b"):
        world.request(j, "send_email", session=session).dispatch(CALL)
    assert [o.session_id for o in j.recover_effects(world.registry, session_id="b")] == ["b"]
    assert [p.session_id for p in j.scan().pending_calls] == ["a"]
    with pytest.raises(journal.SessionNotFound):
        j.recover_effects(world.registry, session_id="nope")


# -- the operator path ------------------------------------------------------------------------------


def _indeterminate_call(j: journal.Journal, world: World) -> None:
    world.request(j, "send_email").dispatch(CALL)
    j.recover_effects(world.registry)


def test_g10_an_operator_resolves_an_indeterminate_call_and_acknowledges_its_notification(
    j: journal.Journal, world: World, fresh
) -> None:
    _indeterminate_call(j, world)
    event = j.resolve(SESSION, CALL, outcome="did_not_run", note="checked the mail server")
    assert (event.type, event.data) == (
        "operator_resolution", {"tool_call_id": CALL, "outcome": "did_not_run", "note": "checked the mail server"},
    )  # fmt: skip
    reader = fresh()
    assert reader.indeterminate() == [] and reader.scan().indeterminate == ()
    with reader._store.read() as db:
        assert db.value("SELECT acked_ms FROM notifications WHERE call_id = ?", (CALL,)) == event.time_ms
        assert db.value("SELECT state FROM tool_calls WHERE call_id = ?", (CALL,)) == "resolved"
    assert j.recover_effects(world.registry) == []  # an acknowledged notification is not delivered again
    assert world.inbox.count() == 1


def test_resolve_refuses_a_call_that_is_not_awaiting_an_operator(j: journal.Journal, world: World) -> None:
    _indeterminate_call(j, world)
    j.resolve(SESSION, CALL, outcome=journal.OperatorOutcome.RAN)
    count = j.count(SESSION)
    with pytest.raises(journal.NotIndeterminate):
        j.resolve(SESSION, CALL, outcome="ran")  # already resolved
    with pytest.raises(journal.NotIndeterminate):
        j.resolve(SESSION, "never-requested", outcome="ran")
    with pytest.raises(journal.SessionNotFound):
        j.resolve("nope", CALL, outcome="ran")
    assert j.count(SESSION) == count


@pytest.mark.parametrize(("outcome", "note"), [("maybe", None), ("", None), (None, None), ("ran", 7)])
def test_g12_resolve_refuses_a_bad_outcome_or_note_and_writes_nothing(
    j: journal.Journal, world: World, outcome: Any, note: Any
) -> None:
    _indeterminate_call(j, world)
    count = j.count(SESSION)
    with pytest.raises(journal.InvalidArgument):
        j.resolve(SESSION, CALL, outcome=outcome, note=note)
    assert j.count(SESSION) == count and len(j.indeterminate()) == 1


def test_cli_indeterminate_and_resolve(db_path: Path, world: World) -> None:
    import journal.cli.app
    from journal.cli.operator import indeterminate, resolve

    group = journal.cli.app._Group()
    group.add_command(indeterminate)
    group.add_command(resolve)
    runner = CliRunner()
    env = {"JOURNAL_DB": str(db_path)}
    with journal.open(db_path) as j:
        _indeterminate_call(j, world)
    listed = json.loads(runner.invoke(group, ["indeterminate", "--json"], env=env).output)
    (item,) = listed["indeterminate"]
    assert (item["session_id"], item["call_id"], item["name"]) == (SESSION, CALL, "send_email")
    assert item["notification"]["data"]["reason"] == "unsafe"
    assert CALL in runner.invoke(group, ["indeterminate"], env=env).output
    bad = runner.invoke(group, ["resolve", SESSION, CALL, "--outcome", "maybe"], env=env)
    assert bad.exit_code == 2
    done = runner.invoke(
        group, ["resolve", SESSION, CALL, "--outcome", "ran", "--note", "seen in outbox", "--json"], env=env
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["data"] == {"tool_call_id": CALL, "outcome": "ran", "note": "seen in outbox"}
    assert "no tool call is awaiting an operator" in runner.invoke(group, ["indeterminate"], env=env).output
    again = runner.invoke(group, ["resolve", SESSION, CALL, "--outcome", "ran"], env=env)
    assert again.exit_code == 1 and "not awaiting an operator" in again.output


@pytest.mark.parametrize(("tool", "risk"), [("pay_invoice", None), ("send_email", Risk.TOOL_OUTCOME_UNKNOWN.value)])
def test_recover_with_a_registry_runs_effect_classes_before_the_close_policy(
    db_path: Path, world: World, tool: str, risk: str | None
) -> None:
    _kill_mid_call(db_path, world, tool, "tool.after_run")
    with journal.open(db_path) as j:
        (closed,) = j.recover(registry=world.registry)
        assert [e.type for e in closed.appended] == ["turn_end"]
        (result,) = [e for e in j.events(SESSION) if e.type == "tool_result"]
        assert result.data.get("metadata", {}).get("risk") == risk
        assert j.scan().open_turns == () and j.check() == []
    assert len(world.ledger.entries()) == 1


def test_the_unsafe_class_itself_declares_a_tool_unsafe(world: World) -> None:
    tool = world.registry.register("rm_rf", lambda arguments, context: "gone", effects=journal.Unsafe)
    assert isinstance(tool.effects, journal.Unsafe)
