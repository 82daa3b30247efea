"""Replay (DESIGN §18): a recorded session, from a journal or an export file, replayed by the agent
that made it against a scripted model: matched, or a ``Divergence`` naming the turn and step."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import journal
from journal import transfer
from journal.cli import main as journal_cli
from journal.testing import Divergence, Recording
from journal.testing.replay import load_agent, request_lines, run_replay
from journal.testing.replay_models import ReplayTools, ScriptedModel

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import replay_plain as plain  # noqa: E402


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the recorded session's journal is: a file, or a DSN naming a fresh PostgreSQL schema."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_dsn"))
    return str(tmp_path / "recorded.db")


class NoNetwork(AssertionError):
    pass


@contextlib.contextmanager
def no_network() -> Iterator[None]:
    """Any connection attempt in the block fails the test (a replay must need no provider)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NoNetwork(f"a replay opened a connection: {args[1:]!r}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket.socket, "connect_ex", refuse)
        patch.setattr(socket, "create_connection", refuse)
        yield


def _record_plain(target: str) -> Recording:
    with journal.open(target) as j:
        plain.record(j)
        return Recording.load(j, plain.SESSION)


def _payments() -> int:
    return len(plain.paid)


# -- the plain API --------------------------------------------------------------------------------


def test_a_plain_api_session_replays_matched_with_no_network_and_no_real_tool_call(target: str) -> None:
    recording = _record_plain(target)  # recorded on either backend; the replay runs on a fresh file
    paid = _payments()
    with no_network():
        verdict = recording.replay(plain.agent)
    assert verdict.matched, verdict.divergence
    assert (verdict.turns, verdict.steps, verdict.recorded_steps) == (3, 7, 7)
    assert (verdict.real_calls, verdict.recorded_calls) == (0, 4)
    assert _payments() == paid  # nothing was paid again


def test_the_recording_holds_inputs_responses_calls_and_results_per_turn_and_step(target: str) -> None:
    recording = _record_plain(target)
    assert recording.inputs == plain.INPUTS
    first = recording.turns[0]
    assert (first.number, first.reason, len(first.steps)) == (1, "complete", 3)
    lookup, payment, answer = first.steps
    assert lookup.response.tool_calls[0]["name"] == "lookup" and lookup.response.stop_reason == "tool_use"
    assert lookup.response.usage == {"input": 10, "output": 5}
    assert payment.calls[0].arguments == {"invoice": "A-1", "cents": 1200}
    assert payment.calls[0].result == "paid 1200 cents for A-1" and payment.calls[0].dispatched
    assert answer.response.content == "Done: paid 1200 cents for A-1."
    assert answer.request[0] == 'user: "Pay invoice A-1"' and answer.request[-1].startswith("result:")


def test_an_export_file_is_the_same_recording_as_the_journal_it_came_from(target: str, tmp_path: Path) -> None:
    with journal.open(target) as j:
        plain.record(j)
        loaded = Recording.load(j, plain.SESSION)
        transfer.export_file(j, str(tmp_path / "case.jsonl"), [plain.SESSION])
    exported = Recording.from_export(tmp_path / "case.jsonl")
    assert exported.turns == loaded.turns and exported.session_id == plain.SESSION
    assert exported.replay(plain.agent).matched
    exported.save(tmp_path / "again.jsonl")
    assert Recording.from_export(tmp_path / "again.jsonl").turns == loaded.turns


def test_a_changed_tool_argument_diverges_at_its_turn_and_step_with_the_diff(target: str) -> None:
    recording = _record_plain(target)
    verdict = recording.replay(plain.agent_with_a_tip)
    assert not verdict.matched
    d = verdict.divergence
    assert d is not None and (d.turn, d.step) == (1, 2)
    assert "pay" in d.what and "other arguments" in d.what
    assert d.recorded == ('call pay {"cents": 1200, "invoice": "A-1"}',)
    assert d.sent == ('call pay {"cents": 1201, "invoice": "A-1"}',)
    assert (
        '-call pay {"cents": 1200, "invoice": "A-1"}' in d.diff
        and '+call pay {"cents": 1201, "invoice": "A-1"}' in d.diff
    )
    assert "diverged at turn 1 step 2" in str(d)
    again = pickle.loads(pickle.dumps(d))
    assert (again.turn, again.step, again.recorded, again.sent) == (1, 2, d.recorded, d.sent)


def test_a_request_with_another_message_count_diverges_at_that_step(tmp_path: Path) -> None:
    recording = _record_plain(str(tmp_path / "r.db"))

    def forgetful(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
        for text in inputs:  # sends only the last message: the history is missing
            with j.turn(session_id) as turn:
                j.append(session_id, "user_message", {"content": text})
                with turn.step():
                    model.respond(j.provider_view(session_id).messages[-1:])

    verdict = recording.replay(forgetful)
    d = verdict.divergence
    assert d is not None and (d.turn, d.step) == (2, 1)  # turn 1's first request was its last message alone
    assert "message line(s)" in d.what


def test_an_agent_that_stops_early_or_asks_an_extra_step_diverges(tmp_path: Path) -> None:
    recording = _record_plain(str(tmp_path / "r.db"))

    def two_turns(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
        plain.agent(j, session_id, inputs[:2], model, tools)

    d = recording.replay(two_turns).divergence
    assert d is not None and (d.turn, d.step) == (3, 1) and "stopped before" in d.what

    def one_more(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
        with j.turn(session_id) as turn:  # turn 1 had 3 steps: this agent asks for a 4th
            j.append(session_id, "user_message", {"content": inputs[0]})
            for _ in range(4):
                with turn.step():
                    reply = model.respond(j.provider_view(session_id).messages)
                    turn.assistant(reply.content, **reply.fields())
                    for call in reply.tool_calls:
                        with turn.dispatch(call["id"]):
                            output = tools.call(call["name"], call["arguments"], call_id=call["id"])
                            turn.put_result(call["id"], output, name=call["name"])

    d = recording.replay(one_more).divergence
    assert d is not None and (d.turn, d.step) == (1, 4) and "does not have" in d.what
    assert d.recorded == ("(turn 1 ended after 3 step(s): complete)",)


def test_tools_can_run_for_real_per_tool(tmp_path: Path) -> None:
    recording = _record_plain(str(tmp_path / "r.db"))
    looked: list[str] = []

    def lookup(invoice: str) -> str:
        looked.append(invoice)
        return plain.lookup(invoice)

    def agent(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: ReplayTools) -> None:
        tools.real["lookup"] = lookup  # the agent's real implementation, used where the policy says real
        plain.agent(j, session_id, inputs, model, _NoReal(tools))

    paid = _payments()
    verdict = recording.replay(agent, tools={"lookup": "real", "pay": "recorded"})
    assert verdict.matched, verdict.divergence
    assert (verdict.real_calls, verdict.recorded_calls) == (2, 2)
    assert looked == ["A-1", "B-2"] and _payments() == paid
    all_real = recording.replay(plain.agent, tools="real")
    assert all_real.matched and all_real.real_calls == 4 and _payments() == paid + 2
    with pytest.raises(journal.InvalidArgument):
        recording.replay(plain.agent, tools={"pay": "sometimes"})


class _NoReal:
    """Passes calls on without the example's own ``real=``, so the policy's table is used."""

    def __init__(self, tools: ReplayTools) -> None:
        self.tools = tools

    def call(self, name: str, arguments: Any, *, call_id: str, real: Any) -> Any:
        return self.tools.call(name, arguments, call_id=call_id)


# -- a session recovered after a real crash -------------------------------------------------------

_KILLED_CHILD = """
import os, signal, sys
sys.path.insert(0, {examples!r})
import journal, replay_plain as rp

class KillingTools:
    def call(self, name, arguments, *, call_id, real):
        out = real(**arguments)
        if name == "pay" and arguments["invoice"] == "B-2":
            os.kill(os.getpid(), signal.SIGKILL)  # after the payment, before its result
        return out

with journal.open(os.environ["RECORDED"]) as j:
    j.create_session(rp.SESSION)
    rp.agent(j, rp.SESSION, rp.INPUTS, rp.ShopModel(), KillingTools())
"""


def record_with_a_crash(target: str) -> None:
    """The plain agent SIGKILLed inside pay(B-2), then recovered and carried on (turn 3)."""
    code = _KILLED_CHILD.format(examples=str(EXAMPLES))
    env = {**os.environ, "RECORDED": target, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    with journal.open(target) as j:
        assert j.recover()  # the synthetic result ("MAY have run") and turn_end interrupted
        plain.agent(j, plain.SESSION, plain.INPUTS[2:], plain.ShopModel(), plain.RealTools())


def test_a_session_recovered_after_a_real_crash_replays_to_the_same_verdict(target: str, tmp_path: Path) -> None:
    record_with_a_crash(target)
    with journal.open(target) as j:
        recording = Recording.load(j, plain.SESSION)
        recorded_repair = [(e.type, e.data) for e in j.events(plain.SESSION) if e.type in ("tool_result", "turn_end")]
    second = recording.turns[1]
    assert second.reason == "interrupted" and second.crash == ("tool", 2, "call-4")
    assert second.steps[1].calls[0].risk == "tool_outcome_unknown"
    paid = _payments()
    verdict = recording.replay(plain.agent, into=tmp_path / "replayed.db")
    assert verdict.matched, verdict.divergence
    assert len(verdict.crashes) == 1 and "call-4" in verdict.crashes[0] and verdict.recovery_differs == ()
    assert _payments() == paid
    with journal.open(tmp_path / "replayed.db") as j:
        replayed = [(e.type, e.data) for e in j.events(plain.SESSION) if e.type in ("tool_result", "turn_end")]
        assert not j.scan().open_turns and not j.check()
    assert replayed == recorded_repair  # the same results, the same synthetic one, the same interrupted turn


# -- forks, compactions, part of a session --------------------------------------------------------


def test_a_forks_recording_holds_its_inherited_history(target: str) -> None:
    with journal.open(target) as j:
        plain.record(j)
        first_end = next(e.seq for e in j.events(plain.SESSION) if e.type == "turn_end")
        j.fork(plain.SESSION, first_end, id="shop-1.retry")
        plain.agent(j, "shop-1.retry", ["Pay invoice B-2"], plain.ShopModel(), plain.RealTools())
        recording = Recording.load(j, "shop-1.retry")
    assert recording.inputs == ["Pay invoice A-1", "Pay invoice B-2"]
    verdict = recording.replay(plain.agent)
    assert verdict.matched and verdict.turns == 2


def _compacting(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
    """The plain agent, which folds the conversation into a summary before each third turn."""
    for text in inputs:
        turns = len(j.events(session_id, types=["turn_start"]))
        if turns == 2:
            last = j.session(session_id).count - 1
            summary = {"content": "Summary: A-1 and B-2 are paid.", "surface_op": ["replace", 0, last]}
            j.append(session_id, "system_message", summary)
        plain.agent(j, session_id, [text], model, tools)


def test_a_compacted_session_replays_what_the_model_saw(tmp_path: Path) -> None:
    with journal.open(tmp_path / "r.db") as j:
        j.create_session(plain.SESSION)
        _compacting(j, plain.SESSION, plain.INPUTS, plain.ShopModel(), plain.RealTools())
        recording = Recording.load(j, plain.SESSION)
    third = recording.turns[2].steps[0]
    assert third.request == ('system: "Summary: A-1 and B-2 are paid."', 'user: "Thanks!"')
    assert recording.replay(_compacting).matched
    d = recording.replay(plain.agent).divergence  # the agent without its compaction sends it all
    assert d is not None and (d.turn, d.step) == (3, 1)


def test_the_first_turns_of_a_session_replay_alone(tmp_path: Path) -> None:
    with journal.open(tmp_path / "r.db") as j:
        plain.record(j)
        recording = Recording.load(j, plain.SESSION, turns=2)
        with pytest.raises(journal.InvalidArgument):
            Recording.load(j, plain.SESSION, turns=0)
    assert recording.inputs == plain.INPUTS[:2]
    assert recording.replay(plain.agent).matched


# -- bad input ------------------------------------------------------------------------------------


def test_an_unknown_session_is_refused_with_session_not_found(target: str) -> None:
    with journal.open(target) as j:
        with pytest.raises(journal.SessionNotFound):
            Recording.load(j, "nobody")
        assert j.sessions() == []


def test_a_corrupt_export_file_is_refused_naming_its_line_and_nothing_is_written(tmp_path: Path) -> None:
    good = tmp_path / "case.jsonl"
    with journal.open(tmp_path / "r.db") as j:
        plain.record(j)
        transfer.export_file(j, str(good), [plain.SESSION])
    lines = good.read_text().splitlines()
    cases = {
        "not JSON": "{oops",
        "a seq out of order": json.dumps({"event": {**json.loads(lines[3])["event"], "seq": 99}}),
        "an unknown event type": json.dumps({"event": {**json.loads(lines[3])["event"], "type": "nonsense"}}),
    }
    for problem, bad_line in cases.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join([*lines[:3], bad_line, *lines[4:]]) + "\n")
        before = sorted(tmp_path.iterdir())
        with pytest.raises((journal.InvalidArgument, journal.InvalidEvent)) as caught:
            Recording.from_export(bad)
        assert "line 4" in str(caught.value), problem
        assert sorted(tmp_path.iterdir()) == before
    with pytest.raises(journal.InvalidArgument, match="no such file"):
        Recording.from_export(tmp_path / "missing.jsonl")


def test_an_agent_spec_that_does_not_import_is_refused() -> None:
    for spec in ("no_such_module:agent", "replay_plain:no_such_function", "replay_plain", "replay_plain:PRICES"):
        with pytest.raises(journal.InvalidArgument):
            load_agent(spec)
    assert load_agent("replay_plain:agent") is plain.agent


def test_into_an_existing_session_is_refused_before_the_agent_runs(tmp_path: Path) -> None:
    recording = _record_plain(str(tmp_path / "r.db"))
    with journal.open(tmp_path / "into.db") as j:
        j.create_session(plain.SESSION)
    with pytest.raises(journal.SessionExists):
        run_replay(recording, plain.agent, into=tmp_path / "into.db")
    with journal.open(tmp_path / "into.db") as j:
        assert j.session(plain.SESSION).count == 0


# -- the command ----------------------------------------------------------------------------------


def _cli(*args: str) -> Any:
    return CliRunner().invoke(journal_cli, list(args))


def test_journal_replay_prints_matched_or_the_divergence_with_exit_status_0_or_1(target: str, tmp_path: Path) -> None:
    with journal.open(target) as j:
        plain.record(j)
    done = _cli("replay", plain.SESSION, "--db", target, "--agent", "replay_plain:agent")
    assert done.exit_code == 0, done.output
    assert "replay of shop-1: matched (3 turn(s), 7 step(s))" in done.output
    assert "4 answered from the recording, 0 run for real" in done.output
    done = _cli("replay", plain.SESSION, "--db", target, "--agent", "replay_plain:agent_with_a_tip", "--json")
    assert done.exit_code == 1
    document = json.loads(done.output)
    assert document["verdict"] == "diverged" and document["matched"] is False
    assert {k: document["divergence"][k] for k in ("turn", "step")} == {"turn": 1, "step": 2}
    assert '+call pay {"cents": 1201, "invoice": "A-1"}' in document["divergence"]["diff"]
    assert set(document) == {"session_id", "verdict", "matched", "turns", "steps", "recorded_steps", "real_calls",
                             "recorded_calls", "crashes", "recovery_differs", "divergence", "path"}  # fmt: skip
    text = _cli("replay", plain.SESSION, "--db", target, "--agent", "replay_plain:agent_with_a_tip")
    assert text.exit_code == 1 and "diverged at turn 1 step 2" in text.output and "+call pay" in text.output


def test_journal_replay_from_a_case_file_into_a_journal_of_your_choice(tmp_path: Path) -> None:
    with journal.open(tmp_path / "r.db") as j:
        plain.record(j)
        transfer.export_file(j, str(tmp_path / "case.jsonl"), [plain.SESSION])
    into = tmp_path / "replayed.db"
    done = _cli("replay", "--from", str(tmp_path / "case.jsonl"), "--agent", "replay_plain:agent", "--into", str(into),
                "--json")  # fmt: skip
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["path"] == str(into)
    with journal.open(into) as j:
        assert len(j.events(plain.SESSION, types=["turn_end"])) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nobody", "--db", "{db}"], "no session 'nobody'"),
        (["--from", "{bad}"], "line 1: not JSON"),
        (["--from", "{missing}"], "no such file"),
        (["shop-1", "--db", "{missing}"], "no such journal"),
        (["shop-1", "--db", "{db}", "--agent", "no_such_module:agent"], "does not import"),
        (["--from", "{case}", "--into", "{db}"], "exists"),
    ],
    ids=[
        "unknown-session",
        "corrupt-export",
        "missing-export",
        "missing-journal",
        "agent-not-importing",
        "into-exists",
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    with journal.open(tmp_path / "r.db") as j:
        plain.record(j)
        transfer.export_file(j, str(tmp_path / "case.jsonl"), [plain.SESSION])
    (tmp_path / "bad.jsonl").write_text('{"bad\n')
    paths = {"db": tmp_path / "r.db", "bad": tmp_path / "bad.jsonl", "missing": tmp_path / "missing",
             "case": tmp_path / "case.jsonl"}  # fmt: skip
    filled = [a.format(**paths) for a in args]
    if "--agent" not in filled:
        filled += ["--agent", "replay_plain:agent"]

    def files() -> dict[Path, int]:  # a read-only open may leave SQLite's -wal/-shm: not the journal's content
        return {p: p.stat().st_mtime_ns for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))}

    before = files()
    done = (
        _cli("replay", *filled, "--into", str(tmp_path / "out.db"))
        if "--into" not in filled
        else _cli("replay", *filled)
    )
    assert done.exit_code == 2, done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("journal: ") and message in lines[0]
    assert files() == before  # no --into file, nothing touched


def test_usage_errors_name_what_is_missing() -> None:
    assert _cli("replay", "--agent", "replay_plain:agent").exit_code == 2
    assert _cli("replay", "--db", "x.db", "--agent", "replay_plain:agent").exit_code == 2
    assert _cli("replay", "s", "--db", "x", "--agent", "a:b", "--tool", "pay").exit_code == 2


# -- requests as lines ----------------------------------------------------------------------------


def test_request_lines_read_a_provider_view_dicts_and_openai_items_alike() -> None:
    view = [
        journal.Message("user", "pay"),
        journal.Message(
            "assistant",
            "",
            tool_calls=(
                {"id": "c1", "name": "pay", "arguments": {"n": 1}},
                {"id": "c2", "name": "log", "arguments": {}},
            ),
        ),
        journal.Message("tool", "ok 1", tool_call_id="c1"),
        journal.Message("tool", "ok 2", tool_call_id="c2"),
    ]
    items = [
        {"role": "user", "content": "pay"},
        {"type": "function_call", "call_id": "c1", "name": "pay", "arguments": '{"n":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "ok 1"},
        {"type": "function_call", "call_id": "c2", "name": "log", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "ok 2"},
    ]
    assert (
        request_lines(view)
        == request_lines(items)
        == ['user: "pay"', 'call pay {"n": 1}', "call log {}", 'result: "ok 1"', 'result: "ok 2"']
    )
    with pytest.raises(journal.InvalidArgument):
        request_lines([object()])


def test_a_tool_call_before_any_response_diverges(tmp_path: Path) -> None:
    recording = _record_plain(str(tmp_path / "r.db"))
    tools = ReplayTools(ScriptedModel(recording))
    with pytest.raises(Divergence, match="before any model response"):
        tools.call("pay", {"invoice": "A-1", "cents": 1200})


# -- openai-agents --------------------------------------------------------------------------------


def _record_openai(target: str) -> Recording:
    import replay_openai_agents as oa

    oa.payments.clear()  # the example's tool crashes on the first B-2 payment
    with journal.open(target) as j:
        oa.record(j)
        return Recording.load(j, oa.SESSION)


def test_an_openai_agents_session_recovered_after_a_crash_replays_matched_offline(target: str) -> None:
    import replay_openai_agents as oa

    recording = _record_openai(target)
    assert [t.reason for t in recording.turns] == ["complete", "interrupted", "complete"]
    assert recording.turns[1].crash == ("tool", 1, "call-2")
    paid = len(oa.payments)
    with no_network():
        verdict = recording.replay(oa.agent)
    assert verdict.matched, verdict.divergence
    assert (verdict.steps, verdict.real_calls, verdict.recorded_calls) == (4, 0, 1)
    assert len(verdict.crashes) == 1 and "call-2" in verdict.crashes[0]
    assert len(oa.payments) == paid


def test_an_openai_agents_agent_sending_another_request_diverges_at_that_step(tmp_path: Path) -> None:
    import replay_openai_agents as oa

    recording = _record_openai(str(tmp_path / "r.db"))

    def polite(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
        oa.agent(j, session_id, [*inputs[:1], *(f"{text}, please" for text in inputs[1:])], model, tools)

    d = recording.replay(polite).divergence
    assert d is not None and (d.turn, d.step) == (2, 1)
    assert '-user: "Please pay invoice B-2"' in d.diff and '+user: "Please pay invoice B-2, please"' in d.diff


# -- LangGraph ------------------------------------------------------------------------------------


class _Paying:
    """LangGraph's production model, offline: to a user message one ``pay`` call, to a result an answer."""

    def __new__(cls) -> Any:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult

        class Paying(BaseChatModel):
            @property
            def _llm_type(self) -> str:
                return "offline"

            def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
                if messages[-1].type == "human":
                    ref = f"call-{len(messages)}"
                    args = {"cents": 100 * len(messages), "ref": ref}
                    answer = AIMessage(content="", tool_calls=[{"id": ref, "name": "pay", "args": args}])
                else:
                    answer = AIMessage(content="done: " + str(messages[-1].content))
                return ChatResult(generations=[ChatGeneration(message=answer)])

        return Paying()


lg_paid: list[str] = []


def pay(cents: int, ref: str) -> str:
    """Pay an amount, in cents, once per ref."""
    lg_paid.append(ref)
    return f"paid {cents} for {ref}"


def lg_agent(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
    """A LangGraph agent -> tools loop on a ``JournalSaver``; ``model.langchain()`` is its model."""
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from journal.adapters.langgraph import JournalSaver

    llm = model.langchain()
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [llm.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([tool(tools.wrap(pay))]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=JournalSaver(j))
    for text in inputs:
        graph.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": session_id}}, durability="sync")


class _Live:
    def langchain(self) -> Any:
        return _Paying()

    def wrap(self, fn: Any) -> Any:
        return fn


def _two_bills(target: Any, session_id: str, agent: Any, live: Any, paid: list[str]) -> None:
    """Record two one-tool turns with ``live``'s model and tools, replay them with the same agent
    (matched, offline, nothing paid), then with the second input changed (diverged at turn 2)."""
    with journal.open(target) as j:
        agent(j, session_id, ["Pay the first bill", "Pay the second bill"], live, live)
        recording = Recording.load(j, session_id)
    assert recording.inputs == ["Pay the first bill", "Pay the second bill"]
    assert [len(t.steps) for t in recording.turns] == [2, 2]
    before = len(paid)
    with no_network():
        verdict = recording.replay(agent)
    assert verdict.matched, verdict.divergence
    assert (verdict.steps, verdict.real_calls, verdict.recorded_calls) == (4, 0, 2) and len(paid) == before

    def rephrased(j: journal.Journal, sid: str, inputs: list[Any], model: Any, tools: Any) -> None:
        agent(j, sid, [inputs[0], "Pay the other bill"], model, tools)

    d = recording.replay(rephrased).divergence
    assert d is not None and (d.turn, d.step) == (2, 1) and '+user: "Pay the other bill"' in d.diff


def test_a_langgraph_session_replays_matched_offline_and_a_changed_input_diverges(target: str) -> None:
    pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")
    _two_bills(target, "thread-1", lg_agent, _Live(), lg_paid)


_KILLED_AT_A_POINT = """
import os, sys
sys.path.insert(0, {examples!r})
import journal, replay_plain as rp

with journal.open(os.environ["RECORDED"]) as j:
    j.create_session(rp.SESSION)
    rp.agent(j, rp.SESSION, rp.INPUTS, rp.ShopModel(), rp.RealTools())
"""


@pytest.mark.parametrize(
    ("point", "risk"),
    [("assistant.after_commit:1", "tool_outcome_unknown"), ("assistant.after_commit:5", "tool_not_started")],
    ids=["answer-then-kill-no-dispatch-in-the-turn", "answer-then-kill-after-another-dispatch"],
)
def test_a_crash_before_a_dispatch_replays_to_the_same_risk_and_log(tmp_path: Path, point: str, risk: str) -> None:
    recorded = str(tmp_path / "recorded.db")
    env = {**os.environ, "RECORDED": recorded, "JOURNAL_CRASH_AT": point, "PYTHONPATH": os.pathsep.join(sys.path)}
    code = _KILLED_AT_A_POINT.format(examples=str(EXAMPLES))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    with journal.open(recorded) as j:
        j.recover()
        turns = len(j.events(plain.SESSION, types=["turn_start"]))
        plain.agent(j, plain.SESSION, plain.INPUTS[turns:], plain.ShopModel(), plain.RealTools())
        recording = Recording.load(j, plain.SESSION)
        kinds = ("tool_call", "tool_result", "step_end", "turn_end")
        before = [(e.type, e.data) for e in j.events(plain.SESSION) if e.type in kinds]
    crashed = next(t for t in recording.turns if t.reason == "interrupted")
    assert crashed.crash is not None and crashed.crash[0] == "dispatch"
    assert [c.risk for s in crashed.steps for c in s.calls if c.synthetic] == [risk]
    verdict = recording.replay(plain.agent, into=tmp_path / "replayed.db")
    assert verdict.matched, verdict.divergence
    assert verdict.recovery_differs == () and len(verdict.crashes) == 1
    with journal.open(tmp_path / "replayed.db") as j:
        after = [(e.type, e.data) for e in j.events(plain.SESSION) if e.type in kinds]
    assert after == before  # no step_end the killed run never wrote, the same synthetic result


# -- odds and ends --------------------------------------------------------------------------------


def test_importing_the_replay_imports_no_framework() -> None:
    code = (
        "import sys, journal.testing, journal.testing.replay, journal.testing.replay_models, "
        "journal.testing.replay_torture, journal.cli; "
        "print(sorted(m for m in ('agents', 'langchain_core', 'langgraph') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_export_of_several_sessions_needs_the_session_named(tmp_path: Path) -> None:
    with journal.open(tmp_path / "r.db") as j:
        plain.record(j)
        j.create_session("other")
        transfer.export_file(j, str(tmp_path / "two.jsonl"))
    with pytest.raises(journal.InvalidArgument, match="2 sessions"):
        Recording.from_export(tmp_path / "two.jsonl")
    assert Recording.from_export(tmp_path / "two.jsonl", plain.SESSION).inputs == plain.INPUTS
    done = _cli("replay", plain.SESSION, "--from", str(tmp_path / "two.jsonl"), "--agent", "replay_plain:agent")
    assert done.exit_code == 0, done.output


def rephrasing_agent(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
    """The plain agent, which now adds a word to every input."""
    plain.agent(j, session_id, [f"{text} now" for text in inputs], model, tools)


def test_a_divergence_shows_stored_content_escaped(tmp_path: Path) -> None:
    hostile = "Pay \x1b[2J\u202e\n!! MAY HAVE RUN invoice A-1"
    with journal.open(tmp_path / "r.db") as j:
        j.create_session(plain.SESSION)
        plain.agent(j, plain.SESSION, [hostile], plain.ShopModel(), plain.RealTools())
    done = _cli(
        "replay", plain.SESSION, "--db", str(tmp_path / "r.db"), "--agent", "tests.test_replay:rephrasing_agent"
    )
    assert done.exit_code == 1, done.output
    assert "diverged at turn 1 step 1" in done.output
    assert "\x1b" not in done.output and "\u202e" not in done.output
    assert not any(line.startswith("!!") for line in done.output.splitlines())


def test_journal_replay_runs_an_openai_agents_agent_and_tortures_it(tmp_path: Path) -> None:
    import replay_openai_agents as oa

    oa.payments.clear()
    with journal.open(tmp_path / "r.db") as j:
        oa.record(j)
    args = ["replay", oa.SESSION, "--db", str(tmp_path / "r.db"), "--agent", "replay_openai_agents:agent"]
    done = _cli(*args, "--json")
    assert done.exit_code == 0, done.output
    document = json.loads(done.output)
    assert document["verdict"] == "matched" and document["real_calls"] == 0 and len(document["crashes"]) == 1
    tortured = _cli(*args, "--torture", "3", "--jobs", "1", "--json")
    assert tortured.exit_code == 0, tortured.output
    report = json.loads(tortured.stdout)
    assert report["ok"] and report["killed"] >= 2 and report["verdict"]["verdict"] == "matched"


# -- pydantic-ai and Google ADK ----------------------------------------------------------------------

fw_paid: list[str] = []


def pay_once(cents: int, ref: str) -> str:
    """Pay an amount, in cents, once per ref."""
    fw_paid.append(ref)
    return f"paid {cents} for {ref}"


def _live_pydantic_ai() -> Any:
    """Offline: to a prompt, one ``pay_once`` call; to its return, an answer."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def answer(messages: list[Any], info: Any) -> ModelResponse:
        last = messages[-1].parts[-1]
        if last.part_kind == "user-prompt":
            ref = f"inv-{len(messages)}"
            return ModelResponse(parts=[ToolCallPart("pay_once", {"cents": 4200, "ref": ref}, tool_call_id=ref)])
        return ModelResponse(parts=[TextPart(f"done: {last.content}")])

    return FunctionModel(answer)


def pa_agent(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
    """A pydantic-ai agent on ``JournalAgent``; ``model.pydantic_ai()`` is its model."""
    from pydantic_ai import Agent

    from journal.adapters.pydantic_ai import JournalAgent

    jagent = JournalAgent(Agent(model.pydantic_ai(), tools=[tools.wrap(pay_once)]), j)
    for text in inputs:
        jagent.run_sync(text, session_id=session_id)


class _LiveFrameworks:
    def pydantic_ai(self) -> Any:
        return _live_pydantic_ai()

    def adk(self) -> Any:
        return _live_adk()

    def wrap(self, fn: Any) -> Any:
        return fn


def test_a_pydantic_ai_session_replays_matched_offline_and_a_changed_input_diverges(target: str) -> None:
    pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")
    _two_bills(target, "user-42", pa_agent, _LiveFrameworks(), fw_paid)


def _live_adk() -> Any:
    """Offline: to a user's text, one ``pay_once`` call; to its response, an answer."""
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class Live(BaseLlm):
        model: str = "live"

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            last = llm_request.contents[-1].parts[-1]
            if last.function_response is None:
                ref = f"inv-{len(llm_request.contents)}"
                call = types.FunctionCall(id=ref, name="pay_once", args={"cents": 4200, "ref": ref})
                yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
            else:
                text = f"done: {last.function_response.response}"
                yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))

    return Live()


def adk_agent(j: journal.Journal, session_id: str, inputs: list[Any], model: Any, tools: Any) -> None:
    """An ADK ``LlmAgent`` with ``JournalPlugin`` on ``JournalSessionService``; ``model.adk()`` is its model."""
    import asyncio

    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.genai import types

    from journal.adapters.adk import JournalPlugin, JournalSessionService

    service = JournalSessionService(j)
    agent = LlmAgent(name="cashier", model=model.adk(), instruction="Pay once.", tools=[tools.wrap(pay_once)])
    runner = Runner(app=App(name="shop", root_agent=agent, plugins=[JournalPlugin(service)]), session_service=service)

    async def go() -> None:
        # On the replay's journal the session exists already (the recording's, meta and all).
        if await service.get_session(app_name="shop", user_id="u1", session_id="s1") is None:
            await service.create_session(app_name="shop", user_id="u1", session_id="s1")
        for text in inputs:
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for _ in runner.run_async(user_id="u1", session_id="s1", new_message=message):
                pass

    asyncio.run(go())


def test_an_adk_session_replays_matched_offline_and_a_changed_input_diverges(tmp_path: Path) -> None:
    pytest.importorskip("google.adk", reason="the adk extra is not installed")
    from journal.adapters.adk import journal_session_id

    _two_bills(tmp_path / "j.db", journal_session_id("shop", "u1", "s1"), adk_agent, _LiveFrameworks(), fw_paid)
