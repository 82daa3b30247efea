"""Replay: a recorded session becomes a deterministic test of the agent that made it (DESIGN §18).

A ``Recording`` is what a session's log says happened, turn by turn and step by step: the user's
input of each turn, each model response (the assistant message with its tool calls, stop reason
and usage), the request the model was sent for it, and each call's result. Take one from a
journal (``Recording.load(j, "s-1")``) or from ``journal export --session s-1 -o case.jsonl``
(``Recording.from_export("case.jsonl")``), so a case can live in a test folder without the
database. ``recording.replay(agent)`` runs the agent again, on a fresh journal, against a
``ScriptedModel`` that returns the recorded responses in order and checks what the agent sends:
a request that no longer matches (another message count, another tool, other arguments) raises
``Divergence``, naming the turn and the step, with a diff of what was recorded and what was sent.

What "the request" is. The recorded request of a step is the provider view
(``journal.pure.view.provider_view``) of the log just before the step's assistant message: what
the model actually saw, compactions applied (a ``replace`` event stands for what it replaced),
aborted and errored answers left out, each call's result right after it. A request is compared
as lines (``request_lines``): each message's role and text, each call's name and arguments, each
result's text; ids, timestamps and metadata are not compared.

Forks and crashes. A fork's recording holds its inherited history: the replay plays it from the
first turn. A turn that a crash interrupted is part of the recording: where its log shows the
crash (a call answered by recovery's synthetic result, a model call that never returned), the
replay stops the agent the same way (``RecordedCrash``, a ``BaseException`` nothing in the agent
should catch; until the replay recovers, every write the agent still tries is refused, as a kill
would leave the log), runs the journal's recovery (``recover()``, which writes the synthetic results
and the ``turn_end`` ``interrupted``) and calls the agent again with the turns still to play. So
a session that was itself recovered after a crash replays to the same verdict.

The agent. A replayed agent is a function ``agent(journal, session_id, inputs, model, tools)``:

- ``journal``: a ``journal.Journal`` on the fresh file; ``session_id``: the recording's session
  (created already);
- ``inputs``: the user input of each turn still to play, in order (all of them on a first call;
  after a recorded crash, those after the interrupted turn): play one turn per input;
- ``model``: the ``ScriptedModel``; a plain-API agent calls ``model.respond(messages)`` (the
  request it would send a provider, say ``journal.provider_view(session_id).messages``) and
  records the ``Response`` (``turn.assistant(r.content, **r.fields())``); an openai-agents agent
  uses ``model.openai_agents()`` (a ``agents.models.interface.Model``), a LangGraph one
  ``model.langchain()`` (a LangChain ``BaseChatModel``), a pydantic-ai one ``model.pydantic_ai()``
  (a ``FunctionModel``), an ADK one ``model.adk()`` (a ``BaseLlm``);
- ``tools``: the ``ReplayTools``; ``tools.call(name, arguments, call_id=..., real=fn)`` or a
  wrapped function (``tools.wrap(fn)``) checks each call against the recorded step, then answers
  it from the recording (``tools="recorded"``, the default: nothing real runs) or runs ``fn``
  (``"real"``), per tool if a mapping is given (``{"pay": "recorded", "lookup": "real"}``).

``journal replay SESSION --db PATH --agent module:function`` (or ``--from case.jsonl``) runs
this from a shell; ``--torture N`` and ``journal.testing.replay_torture`` kill the replayed agent
at every crash point it reaches.
"""

from __future__ import annotations

import difflib
import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from journal import crash, transfer
from journal.engine import Journal
from journal.engine import open as open_journal
from journal.errors import InvalidArgument, JournalError
from journal.escape import dumps
from journal.model import Event
from journal.pure.view import Message, provider_view

if TYPE_CHECKING:
    from journal.testing.replay_models import ReplayTools, ScriptedModel

__all__ = [
    "Divergence",
    "RecordedCall",
    "RecordedCrash",
    "RecordedStep",
    "RecordedTurn",
    "Recording",
    "ReplayVerdict",
    "Response",
    "call_line",
    "done_turns",
    "load_agent",
    "play",
    "request_lines",
    "run_replay",
]

Agent = Callable[[Journal, str, list[Any], "ScriptedModel", "ReplayTools"], Any]
TOOL_MODES = ("recorded", "real")


# -- errors ----------------------------------------------------------------------------------------


class Divergence(JournalError):
    """The agent under replay sent what the recording does not hold: ``turn``, ``step``, ``what``
    differs, the ``recorded`` and ``sent`` lines, and ``diff`` (a unified diff of the two)."""

    def __init__(self, turn: int, step: int, what: str, recorded: Sequence[str], sent: Sequence[str]) -> None:
        super().__init__(turn, step, what, tuple(recorded), tuple(sent))
        self.turn, self.step, self.what = turn, step, what
        self.recorded, self.sent = tuple(recorded), tuple(sent)

    @property
    def diff(self) -> list[str]:
        return list(difflib.unified_diff(self.recorded, self.sent, "recorded", "sent", lineterm="", n=2))

    def headline(self) -> str:
        return f"diverged at turn {self.turn} step {self.step}: {self.what}"

    def message(self) -> str:
        return "\n".join([self.headline(), *self.diff])


class RecordedCrash(BaseException):
    """Raised into the agent where the recorded run crashed; the replay recovers and goes on.

    A ``BaseException``, like the process dying that it stands for: an agent's ``except
    Exception`` does not swallow it."""

    def __init__(self, turn: int, step: int, where: str) -> None:
        super().__init__(turn, step, where)
        self.turn, self.step, self.where = turn, step, where

    def __str__(self) -> str:
        return f"the recorded run crashed at turn {self.turn} step {self.step}: {self.where}"


# -- the recording ---------------------------------------------------------------------------------


@attrs.frozen
class RecordedCall:
    """One tool call of a recorded step and what answered it (``answered`` False: nothing did)."""

    id: str
    name: str
    arguments: Any
    dispatched: bool = False
    answered: bool = False
    result: Any = None
    is_error: bool = False
    risk: str | None = None
    """The risk of recovery's synthetic result (``None``: the tool's own result)."""

    @property
    def synthetic(self) -> bool:
        return self.risk is not None

    def line(self) -> str:
        return call_line(self.name, self.arguments)


@attrs.frozen
class Response:
    """A model response as the scripted model returns it (``turn``/``step`` name its place)."""

    turn: int
    step: int
    content: Any
    tool_calls: tuple[dict[str, Any], ...] = ()
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None
    reasoning: Any = None
    metadata: dict[str, Any] | None = attrs.field(default=None, repr=False)
    """The recorded message's metadata (an adapter's own notes); ``fields`` leaves it out."""

    def fields(self) -> dict[str, Any]:
        """The keyword arguments of ``turn.assistant(content, **fields)`` for this response."""
        out: dict[str, Any] = {}
        if self.tool_calls:
            out["tool_calls"] = [dict(c) for c in self.tool_calls]
        for name in ("stop_reason", "usage", "reasoning"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@attrs.frozen
class RecordedStep:
    """One model request and its response, with the results of the calls it asked for."""

    turn: int
    step: int
    request: tuple[str, ...]
    response: Response
    calls: tuple[RecordedCall, ...] = ()


@attrs.frozen
class RecordedTurn:
    """One turn: its input, its steps, how it ended, and where it crashed (if it did)."""

    number: int
    inputs: tuple[Any, ...]
    steps: tuple[RecordedStep, ...]
    reason: str | None
    """``complete``, ``rejected``, ``interrupted`` (a crash, closed by recovery), ``None`` (open)."""
    crash: tuple[str, int, str | None] | None = None
    """Where the recorded run died: ``("tool", step, call_id)`` (in a dispatched call),
    ``("dispatch", step, call_id)`` (before the call's dispatch) or ``("model", step, None)``
    (a model call that never returned)."""

    @property
    def input(self) -> Any:
        """The turn's input: its last user message (``None`` if it had none)."""
        return self.inputs[-1] if self.inputs else None


@attrs.frozen
class Recording:
    """What a session's log says happened, ready to be replayed (see the module's docstring)."""

    session_id: str
    turns: tuple[RecordedTurn, ...]
    events: tuple[Event, ...] = attrs.field(repr=False)
    meta: dict[str, Any] | None = None

    @property
    def inputs(self) -> list[Any]:
        return [t.input for t in self.turns]

    @property
    def steps(self) -> list[RecordedStep]:
        return [s for t in self.turns for s in t.steps]

    @classmethod
    def load(cls, journal: Journal, session_id: str, *, turns: int | None = None) -> Recording:
        """The recording of a session of ``journal`` (a fork's inherited history included);
        ``turns=N``: its first N turns only. ``SessionNotFound`` for an unknown session."""
        if turns is not None and (not isinstance(turns, int) or isinstance(turns, bool) or turns < 1):
            raise InvalidArgument("turns", f"must be an int >= 1 (the first N turns), not {turns!r}")
        info = journal.session(session_id)
        return cls.from_events(session_id, journal.events(session_id), turns=turns, meta=info.meta)

    @classmethod
    def from_export(cls, path: str | os.PathLike[str], session_id: str | None = None) -> Recording:
        """The recording held by a ``journal export`` file (``session_id`` picks one session of
        several). The file is read by ``journal import``'s rules, into a scratch journal that is
        removed afterwards: a damaged file raises its typed error (``InvalidArgument`` or
        ``InvalidEvent`` naming the line) and nothing is written anywhere else."""
        source = Path(path)
        if not source.is_file():
            raise InvalidArgument("export", f"no such file: {os.fspath(path)}")
        scratch = tempfile.mkdtemp(prefix="journal-recording-")
        try:
            with open_journal(os.path.join(scratch, "case.db"), durability="normal") as j, source.open("rb") as f:
                transfer.import_file(j, f)
                found = [s.id for s in j.sessions()]
                if session_id is None:
                    if len(found) != 1:
                        raise InvalidArgument("session", f"the export holds {len(found)} sessions: name one")
                    session_id = found[0]
                return cls.load(j, session_id)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    @classmethod
    def from_events(
        cls, session_id: str, events: Iterable[Event], *, turns: int | None = None, meta: dict[str, Any] | None = None
    ) -> Recording:
        """The recording of a session's events (pure: no journal needed)."""
        log = tuple(events)
        found = _turns(log)
        if turns is not None:
            found = found[:turns]
            if found:
                end = next(e.seq for e in log if e.type == "turn_end" and e.data.get("turn") == found[-1].number)
                log = log[: end + 1]
        return cls(session_id, tuple(found), log, meta)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the recording as a ``journal export`` file (created 0600) that ``from_export`` reads."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            out.write(dumps({"session": {"id": self.session_id, "meta": self.meta}}) + "\n")
            for event in self.events:
                out.write(dumps({"event": event.to_dict()}) + "\n")

    def replay(self, agent: str | Agent, **options: Any) -> ReplayVerdict:
        """``run_replay(self, agent, **options)``."""
        return run_replay(self, agent, **options)


class _OpenTurn:
    def __init__(self, number: int, inputs: list[Any]) -> None:
        self.number, self.inputs = number, inputs
        self.steps: list[tuple[int, Event, tuple[str, ...]]] = []
        self.dispatched: set[str] = set()
        self.step_open = False
        self.unanswered_step = False  # a step_start with no assistant message after it


def _turns(log: Sequence[Event]) -> list[RecordedTurn]:
    results: dict[str, Event] = {}
    for e in log:
        if e.type == "tool_result":
            results.setdefault(str(e.data.get("tool_call_id")), e)
    out: list[RecordedTurn] = []
    pending: list[Any] = []
    current: _OpenTurn | None = None
    for index, e in enumerate(log):
        if e.type == "user_message":
            if current is None:
                pending.append(e.data.get("content"))
            elif not current.steps:
                current.inputs.append(e.data.get("content"))
        elif e.type == "turn_start":
            current, pending = _OpenTurn(int(e.data.get("turn", len(out) + 1)), pending), []
        elif current is None:
            continue
        elif e.type == "step_start":
            current.step_open = current.unanswered_step = True
        elif e.type == "step_end":
            current.step_open = current.unanswered_step = False
        elif e.type == "assistant_message" and e.data.get("stop_reason") not in ("aborted", "error"):
            request = tuple(request_lines(provider_view(log[:index]).messages))
            current.steps.append((len(current.steps) + 1, e, request))
            current.unanswered_step = False
        elif e.type == "tool_call":
            current.dispatched.add(str(e.data.get("id")))
        elif e.type == "turn_end":
            out.append(_close(current, results, e.data.get("reason")))
            current = None
    if current is not None:
        out.append(_close(current, results, None))
    return out


def _close(turn: _OpenTurn, results: Mapping[str, Event], reason: Any) -> RecordedTurn:
    steps: list[RecordedStep] = []
    where: tuple[str, int, str | None] | None = None
    for number, event, request in turn.steps:
        calls = []
        for call in event.data.get("tool_calls") or ():
            cid = str(call.get("id"))
            result = results.get(cid)
            meta = result.data.get("metadata") if result is not None else None
            risk = meta.get("risk") if isinstance(meta, dict) and meta.get("synthetic") else None
            recorded = RecordedCall(
                cid, str(call.get("name")), call.get("arguments"), dispatched=cid in turn.dispatched,
                answered=result is not None, result=None if result is None else result.data.get("content"),
                is_error=bool(result is not None and result.data.get("is_error")), risk=risk,
            )  # fmt: skip
            calls.append(recorded)
            if where is None and reason == "interrupted" and (risk is not None or result is None):
                where = ("tool" if recorded.dispatched else "dispatch", number, cid)
        data = event.data
        response = Response(
            turn.number, number, data.get("content"), tuple(dict(c) for c in data.get("tool_calls") or ()),
            data.get("stop_reason"), data.get("usage"), data.get("reasoning"), data.get("metadata"),
        )  # fmt: skip
        steps.append(RecordedStep(turn.number, number, request, response, tuple(calls)))
    if where is None and reason == "interrupted":
        where = ("model", len(steps) + 1, None)
    return RecordedTurn(turn.number, tuple(turn.inputs), tuple(steps), None if reason is None else str(reason), where)


# -- requests as lines ----------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
        content = "".join(p["text"] for p in content)  # openai-agents' and LangChain's text parts
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True, ensure_ascii=False)


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def call_line(name: str, arguments: Any) -> str:
    """How a tool call is compared and shown: its name and its arguments as sorted JSON."""
    return f"call {name} {json.dumps(_arguments(arguments), sort_keys=True, ensure_ascii=False)}"


def request_lines(messages: Iterable[Any]) -> list[str]:
    """A request as the lines a replay compares: ``journal.Message``s (a provider view), dicts
    with ``role``/``content``/``tool_calls``/``tool_call_id`` (a plain agent's, or LangChain's as
    ``replay_models`` gives them), or openai-agents input items (``function_call`` and
    ``function_call_output`` items, messages). A run of calls and results is shown calls first,
    then results, so each framework's ordering of one batch compares equal."""
    out: list[str] = []
    calls: list[str] = []
    answers: list[str] = []

    def flush() -> None:
        out.extend(calls + answers)
        calls.clear()
        answers.clear()

    for m in messages:
        if isinstance(m, Message):
            role, content, tool_calls = m.role, m.content, m.tool_calls
        elif isinstance(m, Mapping):
            kind = m.get("type")
            if kind == "function_call":
                calls.append(call_line(str(m.get("name")), m.get("arguments")))
                continue
            if kind == "function_call_output":
                answers.append(f"result: {json.dumps(_text(m.get('output')), ensure_ascii=False)}")
                continue
            if kind in ("reasoning",):
                continue
            role, content, tool_calls = str(m.get("role")), m.get("content"), m.get("tool_calls") or ()
        else:
            raise InvalidArgument("messages", f"cannot compare a {type(m).__name__} (give messages or dicts)")
        if role == "tool":
            answers.append(f"result: {json.dumps(_text(content), ensure_ascii=False)}")
            continue
        flush()
        if role == "developer":
            role = "system"
        if not (tool_calls and content in (None, "", [])):
            out.append(f"{role}: {json.dumps(_text(content), ensure_ascii=False)}")
        calls.extend(call_line(str(c.get("name")), c.get("arguments", c.get("args"))) for c in tool_calls)
    flush()
    return out


# -- running a replay -----------------------------------------------------------------------------


@attrs.frozen
class ReplayVerdict:
    """What a replay found: ``matched``, or the ``divergence``; and what it played."""

    session_id: str
    matched: bool
    turns: int
    steps: int
    """Recorded responses the agent was given."""
    recorded_steps: int
    real_calls: int
    recorded_calls: int
    crashes: tuple[str, ...] = ()
    """The recorded crashes the replay reproduced (each followed by ``recover()``)."""
    recovery_differs: tuple[str, ...] = ()
    """Calls whose synthetic result after a reproduced crash has another risk than the recording's."""
    divergence: Divergence | None = None
    path: str | None = None
    """The replay's journal (``into``), or ``None`` when it was a temporary one."""

    def to_dict(self) -> dict[str, Any]:
        d = self.divergence
        return {
            "session_id": self.session_id,
            "verdict": "matched" if self.matched else "diverged",
            "matched": self.matched,
            "turns": self.turns,
            "steps": self.steps,
            "recorded_steps": self.recorded_steps,
            "real_calls": self.real_calls,
            "recorded_calls": self.recorded_calls,
            "crashes": list(self.crashes),
            "recovery_differs": list(self.recovery_differs),
            "divergence": None
            if d is None
            else {
                "turn": d.turn,
                "step": d.step,
                "what": d.what,
                "recorded": list(d.recorded),
                "sent": list(d.sent),
                "diff": d.diff,
            },
            "path": self.path,
        }

    def lines(self) -> list[str]:
        """The verdict for people (stored content in it: print each line escaped)."""
        head = f"replay of {self.session_id}: "
        if self.divergence is not None:
            out = [head + self.divergence.headline(), *self.divergence.diff]
        else:
            out = [head + f"matched ({self.turns} turn(s), {self.steps} step(s))"]
        out.append(f"  tool calls: {self.recorded_calls} answered from the recording, {self.real_calls} run for real")
        out += [f"  reproduced a recorded crash: {c}" for c in self.crashes]
        out += [f"  recovery differs: {c}" for c in self.recovery_differs]
        if self.path is not None:
            out.append(f"  the replayed journal: {self.path}")
        return out


def load_agent(spec: str | Agent) -> Agent:
    """The agent function named ``"package.module:function"`` (a callable is returned as it is);
    ``InvalidArgument`` when it does not import or is not callable."""
    if callable(spec):
        return spec
    module, sep, attr = str(spec).partition(":")
    if not sep or not module or not attr:
        raise InvalidArgument("agent", f"is named 'module:function', not {spec!r}")
    try:
        target: Any = importlib.import_module(module)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception as exc:  # an agent module's own import error is the user's to see, in one line
        raise InvalidArgument("agent", f"{spec!r} does not import: {type(exc).__name__}: {exc}") from None
    if not callable(target):
        raise InvalidArgument("agent", f"{spec!r} is not callable")
    agent: Agent = target
    return agent


def done_turns(j: Journal, session_id: str) -> int:
    """How many turns the session's log has started (the documented resume point)."""
    return len(j.events(session_id, types=["turn_start"]))


def play(
    j: Journal,
    recording: Recording,
    agent: Agent,
    model: ScriptedModel,
    tools: ReplayTools,
    *,
    session_id: str,
) -> tuple[list[str], list[str]]:
    """Run the agent on ``session_id`` from the turns its log holds to the recording's end,
    reproducing each recorded crash with ``recover()``; returns the crashes and recovery
    differences. Raises ``Divergence``."""
    crashes: list[str] = []
    differs: list[str] = []
    with crash.observing(model._observe):
        for _ in range(len(recording.turns) + 2):
            done = done_turns(j, session_id)
            model.start(done)
            try:
                agent(j, session_id, list(recording.inputs[done:]), model, tools)
            except RecordedCrash as stop:
                model._revive()
                crashes.append(str(stop))
                for result in j.recover(session_id):
                    differs += _risks(recording, result.appended)
                continue
            model.finish()
            return crashes, differs
    raise Divergence(len(recording.turns), 0, "the agent did not get past a recorded crash", [], [])


def _risks(recording: Recording, appended: Sequence[Event]) -> list[str]:
    recorded = {c.id: c.risk for s in recording.steps for c in s.calls}
    out = []
    for e in appended:
        meta = e.data.get("metadata")
        if e.type == "tool_result" and isinstance(meta, dict):
            cid = str(e.data.get("tool_call_id"))
            if cid in recorded and recorded[cid] != meta.get("risk"):
                out.append(f"call {cid}: recorded {recorded[cid]}, replayed {meta.get('risk')}")
    return out


def run_replay(
    recording: Recording,
    agent: str | Agent,
    *,
    into: str | os.PathLike[str] | None = None,
    tools: str | Mapping[str, str] = "recorded",
    real: Mapping[str, Callable[..., Any]] | None = None,
    check: bool = True,
) -> ReplayVerdict:
    """Replay ``recording`` with ``agent`` on a fresh journal: a temporary one, removed after, or
    ``into`` (a path or DSN; the session must not exist there: ``SessionExists``, nothing written).

    The verdict says ``matched`` or holds the ``Divergence``; an error the agent raises itself
    propagates."""
    from journal.testing.replay_models import ReplayTools, ScriptedModel

    run = load_agent(agent)
    scratch = tempfile.mkdtemp(prefix="journal-replay-") if into is None else None
    path = os.path.join(scratch, "replay.db") if scratch is not None else os.fspath(into)  # type: ignore[arg-type]
    try:
        with open_journal(path) as j:
            j.create_session(recording.session_id, meta=recording.meta)
            model = ScriptedModel(recording, journal=j, check=check)
            answer = ReplayTools(model, tools, real)
            divergence = None
            crashes: list[str] = []
            differs: list[str] = []
            try:
                crashes, differs = play(j, recording, run, model, answer, session_id=recording.session_id)
            except Divergence as exc:
                divergence = exc
            turns = done_turns(j, recording.session_id)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return ReplayVerdict(
        recording.session_id, divergence is None, turns, model.served, len(recording.steps), answer.real_calls,
        answer.recorded_calls, tuple(crashes), tuple(differs), divergence, None if into is None else path,
    )  # fmt: skip
