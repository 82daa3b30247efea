"""Tools and their effect classes (DESIGN §7(1)): what makes re-running a tool after a crash safe.

A tool's author is the only one who knows whether running its tool twice is harmless, so a tool
is registered only with a declared effect class, and each class carries what its recovery needs:

- ``Idempotent(key=...)``: ``key(arguments) -> str`` derives the idempotency key from the
  call's arguments, deterministically. Recovery re-derives it from the **recorded** arguments
  and re-issues the call with it; the provider deduplicates.
- ``Queryable(lookup=...)``: ``lookup(request_id, arguments)`` asks the provider whether the
  request with this id landed: ``Landed(result)`` or ``NeverArrived()``. Recovery records the
  provider's answer, or re-issues with the same request id. A lookup that raises (or answers
  anything else) is treated as Unsafe.
- ``Unsafe()``: never retried, by nothing (there is no flag). After a crash the call becomes
  **indeterminate** (``journal.effects``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from journal.errors import InvalidArgument, MissingEffectClass, UnregisteredTool
from journal.model import EffectKind
from journal.turns import Turn

if TYPE_CHECKING:
    from journal.effects import IndeterminateCall
    from journal.engine import Journal
    from journal.results import PutResult

__all__ = [
    "EffectClass",
    "Idempotent",
    "Landed",
    "NeverArrived",
    "Queryable",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "Unsafe",
]


# -- effect classes ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Idempotent:
    """Safe to re-issue with the same key: ``key(arguments)`` derives it, deterministically,
    from the call's recorded arguments (never from the time, a counter or a random value)."""

    key: Callable[[Any], str] = attrs.field(validator=attrs.validators.is_callable())
    kind: ClassVar[EffectKind] = EffectKind.IDEMPOTENT

    def derive(self, arguments: Any) -> str:
        """The key for these arguments; ``InvalidArgument`` if the derivation gives no string."""
        key = self.key(arguments)
        if not isinstance(key, str) or not key:
            raise InvalidArgument("key", f"the key derivation must return a non-empty str, not {key!r}")
        return key


@attrs.frozen
class Landed:
    """The provider's answer: the request landed, and this is its result (the tool's output)."""

    result: Any = attrs.field(hash=False)
    is_error: bool = attrs.field(default=False, kw_only=True)


@attrs.frozen
class NeverArrived:
    """The provider's answer: no request with this id ever reached it."""


@attrs.frozen(kw_only=True)
class Queryable:
    """The provider can say whether a request landed: ``lookup(request_id, arguments)`` returns
    ``Landed(result)`` or ``NeverArrived()``. Raising means "cannot tell" (treated as Unsafe)."""

    lookup: Callable[[str, Any], Landed | NeverArrived] = attrs.field(validator=attrs.validators.is_callable())
    kind: ClassVar[EffectKind] = EffectKind.QUERYABLE


@attrs.frozen
class Unsafe:
    """Never retried automatically: after a crash the call becomes indeterminate (G10)."""

    kind: ClassVar[EffectKind] = EffectKind.UNSAFE


EffectClass = Idempotent | Queryable | Unsafe
_EFFECT_CLASSES = (Idempotent, Queryable, Unsafe)


# -- the registry ----------------------------------------------------------------------------------


@attrs.frozen
class ToolContext:
    """What a tool gets besides its arguments: where the call is, and what makes a retry safe.

    An Idempotent tool must pass ``idempotency_key`` to its provider; a Queryable tool must
    send ``request_id`` with its request. ``recovery`` is True when recovery re-issues the call.
    """

    session_id: str
    call_id: str
    name: str
    effect: EffectKind
    idempotency_key: str | None = None
    request_id: str | None = None
    recovery: bool = False


ToolFn = Callable[[Any, ToolContext], Any]
OperatorCallback = Callable[["IndeterminateCall"], object]


@attrs.frozen
class Tool:
    """A registered tool: ``fn(arguments, context)`` returns the result's content."""

    name: str
    fn: ToolFn = attrs.field(repr=False)
    effects: EffectClass


class ToolRegistry:
    """The tools an agent may run, each with its declared effect class.

    ``on_indeterminate`` is the operator callback: called (after the commit) with an
    ``IndeterminateCall`` for each call recovery makes indeterminate.
    """

    def __init__(self, *, on_indeterminate: OperatorCallback | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self.on_indeterminate = on_indeterminate

    if TYPE_CHECKING:
        # For a type checker `effects` is required; at run time a missing one is a typed error.
        def register(self, name: str, fn: ToolFn, *, effects: EffectClass) -> Tool: ...

    else:

        def register(self, name, fn, *, effects=None):
            """Register ``fn`` under ``name`` with its effect class (there is no default).

            A missing effect class (or ``None``, or anything that is not ``Idempotent``,
            ``Queryable`` or ``Unsafe``) raises ``MissingEffectClass``.
            """
            return self._register(name, fn, effects)

    def _register(self, name: str, fn: ToolFn, effects: object) -> Tool:
        if not isinstance(name, str) or not name:
            raise InvalidArgument("name", f"must be a non-empty string, not {name!r}")
        if effects is Unsafe:
            effects = Unsafe()  # Unsafe carries nothing: the class itself declares it as well
        if not isinstance(effects, _EFFECT_CLASSES):
            raise MissingEffectClass(name)
        if not callable(fn):
            raise InvalidArgument("fn", f"must be callable as fn(arguments, context), not {fn!r}")
        if name in self._tools:
            raise InvalidArgument("name", f"a tool {name!r} is already registered")
        tool = Tool(name, fn, effects)
        self._tools[name] = tool
        return tool

    def tool(self, name: str) -> Tool:
        """The tool registered under ``name``; raises ``UnregisteredTool``."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnregisteredTool(name) from None

    def get(self, name: str | None) -> Tool | None:
        return self._tools.get(name) if name is not None else None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def call(self, journal: Journal, where: str | Turn, call_id: str) -> PutResult:
        """Run a requested tool call through the journal: dispatch, run, record the result.

        ``where`` is the open ``Turn`` that requested the call (its lease is checked) or a
        session id. The dispatch records what recovery will need (the effect class, the derived
        idempotency key or a new request id) and is committed before the tool runs (G6); the
        tool runs outside any transaction; its result goes through ``put_result`` (G5). Nothing
        is written if the tool is not registered (``UnregisteredTool``) or its key cannot be
        derived. If the tool raises, the exception propagates and the call stays dispatched
        without a result: it may have run, and recovery settles it by its effect class.
        """
        turn = where if isinstance(where, Turn) else None
        session_id = where.session_id if isinstance(where, Turn) else where
        request = journal._requested_call(session_id, call_id)
        # (A requested call has a name: the codec checks it.) UnregisteredTool: nothing is written.
        tool = self.tool(request["name"])
        effects = tool.effects
        key = effects.derive(request.get("arguments")) if isinstance(effects, Idempotent) else None
        # Random, not derived from the call id: a fork re-dispatching an inherited call must not
        # be taken by the provider for the parent's request.
        request_id = uuid.uuid4().hex if isinstance(effects, Queryable) else None
        dispatch = journal.dispatch(
            session_id, call_id, turn=turn, idempotency_key=key, request_id=request_id, effect=effects.kind.value
        )
        context = ToolContext(session_id, call_id, tool.name, effects.kind, key, request_id)
        content = tool.fn(dispatch.arguments, context)
        return dispatch.result(content, name=tool.name)
