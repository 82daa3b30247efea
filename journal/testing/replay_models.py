"""The scripted model of a replay and its tools: the plain API, openai-agents, LangChain, pydantic-ai, ADK.

``ScriptedModel`` returns a ``Recording``'s responses in order and checks each request the agent
sends (``Divergence``, naming the turn and step, with the diff); ``ReplayTools`` checks each tool
call against the recorded step and answers it from the recording or runs it for real.
``ScriptedModel.openai_agents()``, ``.langchain()``, ``.pydantic_ai()`` and ``.adk()`` give the
same script in the frameworks' shapes: an openai-agents ``Model`` (output items with the recorded
call ids), a LangChain ``BaseChatModel`` (an ``AIMessage`` with its tool calls), a pydantic-ai
``FunctionModel`` (a ``ModelResponse`` of text and ``ToolCallPart``s) and a Google ADK
``BaseLlm`` (a ``Content`` of text and ``FunctionCall``s, the recorded ids kept). Their classes
are built on first use, so importing this module (or ``journal.testing``) imports no framework.
None streams, and none opens a connection.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from journal import crash
from journal.engine import Journal
from journal.errors import InvalidArgument
from journal.testing.ledger import Ledger
from journal.testing.replay import (
    TOOL_MODES,
    Divergence,
    RecordedCall,
    RecordedCrash,
    RecordedStep,
    Recording,
    Response,
    call_line,
    request_lines,
)

__all__ = ["ReplayTools", "ScriptedModel"]  # and, built on first use, OpenAIAgentsModel and LangChainModel


# -- the scripted model ---------------------------------------------------------------------------


class ScriptedModel:
    """Returns the recording's responses in order and checks each request (``Divergence``).

    Bound to the replay's journal and session (``journal``, ``session_id``), it follows the
    agent's turns in the log: a request in a turn the recording ended raises ``Divergence``.
    ``check=False`` returns the responses without comparing the requests (tool calls are still
    checked): what a resumed run after a crash the recording does not hold needs."""

    def __init__(
        self, recording: Recording, *, journal: Journal | None = None, session_id: str | None = None, check: bool = True
    ) -> None:
        self.recording = recording
        self.journal = journal
        self.session_id = session_id if session_id is not None else recording.session_id
        self.check = check
        self.current: RecordedStep | None = None
        self.served = 0
        self._turn = 0  # index into recording.turns
        self._step = 0  # steps of that turn served
        self._crash_at_dispatch = False
        self._dead: RecordedCrash | None = None  # the crash reproduced: no write commits until recovery
        self._frameworks: dict[str, Any] = {}

    def start(self, done_turns: int) -> None:
        """Go to the first step of turn ``done_turns + 1`` (the turns before it are in the log)."""
        self._turn, self._step, self.current = done_turns, 0, None

    def _place(self) -> tuple[int, int]:
        turn = self.recording.turns[self._turn].number if self._turn < len(self.recording.turns) else self._turn + 1
        return turn, self._step + 1

    def _follow_log(self) -> None:
        """Move to the turn the agent is in, by the log: the turn it opened last, or the one after
        the last it closed (an adapter may open a turn only with the model's answer). With no
        turns in the log, to the next turn once this one's steps are served."""
        if self.journal is not None:
            kinds = ["turn_start", "turn_end"]
            last = self.journal.events(self.session_id, types=kinds, newest_first=True, limit=1)
            if last:
                number = int(last[0].data.get("turn", 0) or 0)
                index = number - 1 if last[0].type == "turn_start" else number
                if index > self._turn:
                    self._turn, self._step = index, 0
                return
        if self._turn < len(self.recording.turns):
            turn = self.recording.turns[self._turn]
            if self._step >= len(turn.steps) and self._step > 0 and (turn.crash is None or turn.crash[0] != "model"):
                self._turn, self._step = self._turn + 1, 0

    def respond(self, messages: Any = None) -> Response:
        """The next recorded response; ``messages`` (the request) is checked against the recording."""
        if hasattr(messages, "messages") and not isinstance(messages, (list, tuple)):
            messages = messages.messages  # a ProviderView
        sent = request_lines(messages) if messages is not None else None
        self._follow_log()
        turn_number, step_number = self._place()
        if self._turn >= len(self.recording.turns):
            raise Divergence(turn_number, step_number, "the recording has no such turn", ["(the recording ends)"],
                             sent or [])  # fmt: skip
        turn = self.recording.turns[self._turn]
        if self._step >= len(turn.steps):
            if turn.crash is not None and turn.crash[0] == "model":
                raise self._die(RecordedCrash(turn.number, step_number, "the model call never returned"))
            recorded = [f"(turn {turn.number} ended after {len(turn.steps)} step(s): {turn.reason or 'open'})"]
            raise Divergence(turn.number, step_number, "the agent asked for a step the recording does not have",
                             recorded, sent or [])  # fmt: skip
        step = turn.steps[self._step]
        if self.check and sent is not None and list(step.request) != sent:
            raise Divergence(turn.number, step.step, _what(step.request, sent), step.request, sent)
        self._step += 1
        self.current = step
        self.served += 1
        self._arm_after(step, 0)
        return step.response

    __call__ = respond

    def finish(self) -> None:
        """Raise ``Divergence`` if the agent stopped before playing every recorded step."""
        for index in range(self._turn, len(self.recording.turns)):
            turn = self.recording.turns[index]
            start = self._step if index == self._turn else 0
            if start < len(turn.steps):
                step = turn.steps[start]
                raise Divergence(turn.number, step.step, "the agent stopped before this step", step.request,
                                 ["(no request)"])  # fmt: skip

    def _arm_after(self, step: RecordedStep, served_calls: int) -> None:
        """Arm the recorded crash before a dispatch when the next call of the step is where it was."""
        turn = self.recording.turns[self._turn]
        if turn.crash is None or turn.crash[0] != "dispatch" or turn.crash[1] != step.step:
            return
        ids = [c.id for c in step.calls]
        if turn.crash[2] in ids and ids.index(turn.crash[2]) == served_calls:
            self._crash_at_dispatch = True

    def _die(self, stop: RecordedCrash) -> RecordedCrash:
        """From now until the replay recovers, the agent's process is dead: every write it tries
        is refused (``_observe``), as a kill leaves the log -- so the agent's own clean-up (a
        ``with turn.step()`` closing its step) cannot write what the recorded run never wrote."""
        self._dead = stop
        return stop

    def _revive(self) -> None:
        self._dead = None
        self._crash_at_dispatch = False

    def _observe(self, point: str) -> None:
        # Inside a write's transaction, before its COMMIT: raising rolls it back, as a kill
        # there would leave it (journal.store.base says an observer may raise here).
        if not point.endswith(".before_commit"):
            return
        if self._dead is not None:
            raise self._dead
        if point == "dispatch.before_commit" and self._crash_at_dispatch:
            self._crash_at_dispatch = False
            place = self.current
            raise self._die(RecordedCrash(place.turn if place else 0, place.step if place else 0, "before a dispatch"))

    def openai_agents(self) -> Any:
        """This script as an openai-agents ``Model`` (``journal.testing.replay_models``)."""
        if "openai" not in self._frameworks:
            self._frameworks["openai"] = _openai()(self)
        return self._frameworks["openai"]

    def langchain(self) -> Any:
        """This script as a LangChain ``BaseChatModel`` (``journal.testing.replay_models``)."""
        if "langchain" not in self._frameworks:
            self._frameworks["langchain"] = _langchain()(script=self)
        return self._frameworks["langchain"]

    def pydantic_ai(self) -> Any:
        """This script as a pydantic-ai model (a ``FunctionModel``; ``journal.testing.replay_models``)."""
        if "pydantic_ai" not in self._frameworks:
            self._frameworks["pydantic_ai"] = _pydantic_ai()(self)
        return self._frameworks["pydantic_ai"]

    def adk(self) -> Any:
        """This script as a Google ADK ``BaseLlm`` (``journal.testing.replay_models``)."""
        if "adk" not in self._frameworks:
            self._frameworks["adk"] = _adk()(script=self)
        return self._frameworks["adk"]


def _what(recorded: Sequence[str], sent: Sequence[str]) -> str:
    if len(recorded) != len(sent):
        return f"the request has {len(sent)} message line(s), the recording {len(recorded)}"
    return "the request differs from the recorded one"


# -- tools ----------------------------------------------------------------------------------------


class ReplayTools:
    """Checks each tool call against the recorded step, then answers it (see the module's docstring).

    ``policy``: ``"recorded"`` or ``"real"``, or a mapping of tool names to those (unnamed tools:
    ``"recorded"``). ``real``: the real implementations by name (or pass ``real=`` per call).
    With a ``ledger`` each call served writes one entry (the torture campaign's witness), between
    the tool crash points ``tool.before_run`` and ``tool.after_run``."""

    def __init__(
        self,
        model: ScriptedModel,
        policy: str | Mapping[str, str] = "recorded",
        real: Mapping[str, Callable[..., Any]] | None = None,
        *,
        ledger: Ledger | None = None,
    ) -> None:
        modes = [policy] if isinstance(policy, str) else list(policy.values())
        bad = [m for m in modes if m not in TOOL_MODES]
        if bad or not isinstance(policy, (str, Mapping)):
            raise InvalidArgument("tools", f'each mode must be "recorded" or "real", not {bad[0]!r}' if bad else "")
        self.model, self.policy, self.real = model, policy, dict(real or {})
        self.ledger = ledger
        self.real_calls = 0
        self.recorded_calls = 0
        self._served: dict[tuple[int, int], set[str]] = {}

    def mode(self, name: str) -> str:
        return self.policy if isinstance(self.policy, str) else self.policy.get(name, "recorded")

    def call(
        self, name: str, arguments: Any = None, *, call_id: str | None = None, real: Callable[..., Any] | None = None
    ) -> Any:
        """Check the call, then answer it: the recorded result, or ``real(**arguments)``."""
        recorded = self._begin(name, arguments, call_id)
        if self.mode(name) == "recorded":
            return self._end(recorded, arguments, recorded.result)
        return self._end(recorded, arguments, self._real(name, real)(**(arguments or {})))

    def wrap(self, fn: Callable[..., Any], *, name: str | None = None) -> Callable[..., Any]:
        """``fn`` with every call checked and answered as ``call`` does (sync or async ``fn``;
        its signature and docstring are kept, so a framework builds the same tool schema)."""
        tool = name or fn.__name__
        signature = inspect.signature(fn)

        def arguments_of(args: Any, kwargs: Any) -> dict[str, Any]:
            bound = signature.bind(*args, **kwargs)
            return dict(bound.arguments)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
                arguments = arguments_of(args, kwargs)
                recorded = self._begin(tool, arguments, None)
                if self.mode(tool) == "recorded":
                    return self._end(recorded, arguments, recorded.result)
                return self._end(recorded, arguments, await fn(*args, **kwargs))

            return wrapped_async

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            arguments = arguments_of(args, kwargs)
            recorded = self._begin(tool, arguments, None)
            if self.mode(tool) == "recorded":
                return self._end(recorded, arguments, recorded.result)
            return self._end(recorded, arguments, fn(*args, **kwargs))

        return wrapped

    def _real(self, name: str, real: Callable[..., Any] | None) -> Callable[..., Any]:
        fn = real if real is not None else self.real.get(name)
        if fn is None:
            raise InvalidArgument("tools", f"{name!r} is to run for real, but no implementation of it was given")
        return fn

    def _begin(self, name: str, arguments: Any, call_id: str | None) -> RecordedCall:
        step = self.model.current
        sent = [call_line(name, arguments)]
        if step is None:
            raise Divergence(*self.model._place(), "a tool call before any model response", ["(no call)"], sent)
        served = self._served.setdefault((step.turn, step.step), set())
        left = [c for c in step.calls if c.id not in served]
        match = next((c for c in left if c.id == call_id), None) if call_id is not None else None
        match = match or next((c for c in left if c.line() == sent[0]), None)
        if match is None or match.line() != sent[0]:
            recorded = [c.line() for c in left] or ["(no more calls in this step)"]
            same = [c for c in left if c.name == name]
            what = (
                f"the call to {name!r} has other arguments" if same else f"the recording has no call to {name!r} here"
            )
            raise Divergence(step.turn, step.step, what, recorded, sent)
        served.add(match.id)
        turn = self.model.recording.turns[self.model._turn]
        if turn.crash is not None and turn.crash[0] == "tool" and turn.crash[2] == match.id:
            where = f"inside the call {match.id!r} to {name!r}, after its dispatch"
            raise self.model._die(RecordedCrash(step.turn, step.step, where))
        if self.mode(name) == "recorded" and not match.answered:
            raise Divergence(step.turn, step.step, f"the recording holds no result for the call {match.id!r}",
                             ["(no result)"], sent)  # fmt: skip
        crash.reached("tool.before_run")
        return match

    def _end(self, recorded: RecordedCall, arguments: Any, out: Any) -> Any:
        if self.mode(recorded.name) == "recorded":
            self.recorded_calls += 1
        else:
            self.real_calls += 1
        if self.ledger is not None:
            self.ledger.record(session=self.model.session_id, call=recorded.id, tool=recorded.name, arguments=arguments)
        crash.reached("tool.after_run")
        step = self.model.current
        if step is not None:
            self.model._arm_after(step, len(self._served.get((step.turn, step.step), ())))
        return out


# -- the frameworks' shapes -----------------------------------------------------------------------


@functools.cache
def _openai() -> type:
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.testing.model import assistant_message, function_call
    from agents.usage import Usage

    class OpenAIAgentsModel(Model):
        """An openai-agents ``Model`` answering from the recording (``get_response`` only)."""

        def __init__(self, script: ScriptedModel) -> None:
            self.script = script

        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            items = [{"role": "user", "content": input}] if isinstance(input, str) else [dict(i) for i in input]
            response = self.script.respond(items)
            output: list[Any] = []
            if response.content not in (None, "") or not response.tool_calls:
                text = response.content if isinstance(response.content, str) else str(response.content or "")
                output.append(assistant_message(text))
            ids = _call_items(response)
            for call in response.tool_calls:
                cid = str(call.get("id"))
                output.append(function_call(str(call.get("name")), call.get("arguments") or {}, call_id=cid,
                                            item_id=ids.get(cid)))  # fmt: skip
            usage = response.usage or {}
            tokens_in, tokens_out = int(usage.get("input", 0) or 0), int(usage.get("output", 0) or 0)
            counted = Usage(
                requests=1, input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out
            )
            return ModelResponse(output=output, usage=counted, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the replay's scripted model does not stream: use Runner.run")

    return OpenAIAgentsModel


def _call_items(response: Response) -> dict[str, str]:
    """The recorded output items' ids of the calls (the openai-agents adapter keeps them)."""
    meta = response.metadata if isinstance(response.metadata, dict) else {}
    items = (meta.get("openai_agents") or {}).get("call_items") or {}
    return {str(cid): str(item["id"]) for cid, item in items.items() if isinstance(item, dict) and "id" in item}


@functools.cache
def _langchain() -> type:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class LangChainModel(BaseChatModel):
        """A LangChain chat model answering from the recording (``_generate`` only)."""

        script: Any

        @property
        def _llm_type(self) -> str:
            return "journal-replay"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self  # the recorded answers already name their tools

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            response = self.script.respond([_as_dict(m) for m in messages])
            calls = [
                {"id": str(c.get("id")), "name": str(c.get("name")), "args": c.get("arguments") or {}}
                for c in response.tool_calls
            ]
            content = response.content if response.content is not None else ""
            answer = AIMessage(content=content, tool_calls=calls)
            return ChatResult(generations=[ChatGeneration(message=answer)])

    return LangChainModel


def _as_dict(message: Any) -> dict[str, Any]:
    """A LangChain message as ``request_lines`` reads it."""
    role = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}.get(message.type, message.type)
    calls = [{"name": c.get("name"), "arguments": c.get("args")} for c in getattr(message, "tool_calls", None) or ()]
    return {"role": role, "content": message.content, "tool_calls": calls}


@functools.cache
def _pydantic_ai() -> Callable[[ScriptedModel], Any]:
    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    def build(script: ScriptedModel) -> Any:
        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            response = script.respond(_pydantic_dicts(messages, ModelRequest))
            parts: list[Any] = []
            if response.content not in (None, "") or not response.tool_calls:
                text = response.content if isinstance(response.content, str) else json.dumps(response.content)
                parts.append(TextPart(text or ""))
            for call in response.tool_calls:
                parts.append(
                    ToolCallPart(str(call.get("name")), call.get("arguments") or {}, tool_call_id=str(call.get("id")))
                )
            usage = response.usage or {}
            counted = RequestUsage(
                input_tokens=int(usage.get("input", 0) or 0), output_tokens=int(usage.get("output", 0) or 0)
            )
            return ModelResponse(parts=parts, usage=counted, model_name="journal-replay")

        return FunctionModel(answer, model_name="journal-replay")

    return build


def _pydantic_dicts(messages: Sequence[Any], request_type: type) -> list[dict[str, Any]]:
    """pydantic-ai messages as ``request_lines`` reads them: a request's system and user prompts
    and tool returns (a retry prompt is a tool's answer), a response's text and tool calls."""
    out: list[dict[str, Any]] = []
    for message in messages:
        parts: list[Any] = list(message.parts)
        if isinstance(message, request_type):
            for part in parts:
                kind = getattr(part, "part_kind", "")
                if kind == "system-prompt":
                    out.append({"role": "system", "content": part.content})
                elif kind == "user-prompt":
                    out.append({"role": "user", "content": part.content})
                elif kind == "tool-return":
                    out.append({"role": "tool", "content": part.content})
                elif kind == "retry-prompt":
                    out.append({"role": "tool", "content": part.model_response()})
            continue
        texts = [p.content for p in parts if getattr(p, "part_kind", "") == "text"]
        calls = [
            {"name": p.tool_name, "arguments": p.args_as_dict()}
            for p in parts
            if getattr(p, "part_kind", "") == "tool-call"
        ]
        out.append({"role": "assistant", "content": "".join(texts), "tool_calls": calls})
    return out


@functools.cache
def _adk() -> type:
    from collections.abc import AsyncGenerator

    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class AdkModel(BaseLlm):
        """A Google ADK ``BaseLlm`` answering from the recording (no streaming)."""

        script: Any = None
        model: str = "journal-replay"

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            response = self.script.respond(_adk_dicts(llm_request.contents or []))
            parts: list[Any] = []
            if response.content not in (None, "") or not response.tool_calls:
                text = response.content if isinstance(response.content, str) else json.dumps(response.content)
                parts.append(types.Part(text=text or ""))
            for call in response.tool_calls:
                parts.append(
                    types.Part(
                        function_call=types.FunctionCall(
                            id=str(call.get("id")), name=str(call.get("name")), args=call.get("arguments") or {}
                        )
                    )
                )
            yield LlmResponse(content=types.Content(role="model", parts=parts))

    return AdkModel


def _adk_dicts(contents: Sequence[Any]) -> list[dict[str, Any]]:
    """ADK request contents as ``request_lines`` reads them: text of the user and of the model,
    the model's function calls, the function responses as tools' answers."""
    out: list[dict[str, Any]] = []
    for content in contents:
        parts = list(content.parts or [])
        texts = [p.text for p in parts if p.text and not p.thought]
        calls = [
            {"name": p.function_call.name, "arguments": dict(p.function_call.args or {})}
            for p in parts
            if p.function_call
        ]
        answers = [p.function_response.response for p in parts if p.function_response is not None]
        if content.role == "model":
            out.append({"role": "assistant", "content": "\n".join(texts), "tool_calls": calls})
            continue
        if texts:
            out.append({"role": "user", "content": "\n".join(texts)})
        out.extend({"role": "tool", "content": answer} for answer in answers)
    return out


def __getattr__(name: str) -> Any:
    # The classes are built on first use, so importing this module needs neither framework.
    if name == "OpenAIAgentsModel":
        return _openai()
    if name == "LangChainModel":
        return _langchain()
    raise AttributeError(name)
