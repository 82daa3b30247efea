"""``JournalSessionService`` against ADK's own services, call for call (see README.md here).

One script of calls (``_script``) runs against the journal's service (SQLite and PostgreSQL),
``InMemorySessionService`` and ``DatabaseSessionService`` (sqlite+aiosqlite); each step records
a normalised outcome (the session, its events, its state, or the error's type), and the journal's
record must equal each reference's on the steps that reference takes part in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.adk.sessions.session import Session
from google.genai import types

from journal.adapters.adk import JournalSessionService

APP = "contract"
BOTH, DATABASE = ("in_memory", "database"), ("database",)


def _event(ts: float, author: str = "user", *, delta: dict[str, Any] | None = None, **content: Any) -> Event:
    parts = []
    if "text" in content:
        parts.append(types.Part(text=content["text"]))
    if "call" in content:
        parts.append(types.Part(function_call=types.FunctionCall(id=content["call"], name="pay", args={"cents": 1})))
    if "answer" in content:
        response = types.FunctionResponse(id=content["answer"], name="pay", response={"result": "paid"})
        parts.append(types.Part(function_response=response))
    role = "user" if author == "user" or "answer" in content else "model"
    return Event(
        id=f"event-{ts}",
        invocation_id="inv-1",
        author=author,
        timestamp=ts,
        content=types.Content(role=role, parts=parts) if parts else None,
        actions=EventActions(state_delta=delta or {}),
    )


def _session(s: Session | None) -> Any:
    if s is None:
        return None
    return {
        "id": s.id,
        "app": s.app_name,
        "user": s.user_id,
        "state": s.state,
        "events": [e.model_dump(exclude={"actions": {"state_delta"}}) for e in s.events],
        "deltas": [e.actions.state_delta for e in s.events],
        "time": s.last_update_time if s.events else "fresh",
    }


async def _outcome(step: Callable[[], Any]) -> Any:
    try:
        return ("ok", await step())
    except Exception as exc:  # the error's type is the contract
        return ("error", type(exc).__name__)


async def _script(service: BaseSessionService) -> list[tuple[str, tuple[str, ...], Any]]:
    """The calls, each with the references it is compared with, and what came back."""
    out: list[tuple[str, tuple[str, ...], Any]] = []

    async def step(name: str, refs: tuple[str, ...], call: Callable[[], Any], shape: Callable[[Any], Any]) -> Any:
        got = await _outcome(call)
        out.append((name, refs, (got[0], shape(got[1]) if got[0] == "ok" else got[1])))
        return got[1] if got[0] == "ok" else None

    def get(user: str, sid: str, config: GetSessionConfig | None = None) -> Callable[[], Any]:
        return lambda: service.get_session(app_name=APP, user_id=user, session_id=sid, config=config)

    await step("get a missing session", BOTH, get("u1", "nope"), _session)
    s1 = await step(
        "create with an id and state in every scope",
        BOTH,
        lambda: service.create_session(
            app_name=APP, user_id="u1", session_id="s1", state={"app:a": 1, "user:b": 2, "c": 3, "temp:d": 4}
        ),
        _session,
    )
    await step(
        "create the same id again",
        BOTH,
        lambda: service.create_session(app_name=APP, user_id="u1", session_id="s1"),
        _session,
    )
    generated = await step(
        "create with a generated id",
        BOTH,
        lambda: service.create_session(app_name=APP, user_id="u2"),
        lambda s: (bool(s.id), s.state),
    )
    await step(
        "get the generated session", BOTH, lambda: get("u2", generated.id)(), lambda s: (s.id == generated.id, s.state)
    )
    script = [
        _event(100.0, text="Pay the invoice.", delta={"app:a": 10, "user:b": 20, "c": 30, "temp:t": 1}),
        _event(101.0, author="cashier", call="call-1"),
        _event(102.0, author="cashier", answer="call-1", delta={"paid": True}),
        _event(103.0, author="cashier", text="Paid."),
    ]
    for index, event in enumerate(script):
        await step(
            f"append event {index}",
            BOTH,
            lambda e=event: service.append_event(s1, e),
            lambda e: (e.model_dump(), s1.state),
        )
    partial = _event(104.0, author="cashier", text="Pa")
    partial.partial = True
    await step("append a partial event", BOTH, lambda: service.append_event(s1, partial), lambda e: e.model_dump())
    await step("get the session", BOTH, get("u1", "s1"), _session)
    for n in (0, 1, 3):
        await step(f"num_recent_events={n}", BOTH, get("u1", "s1", GetSessionConfig(num_recent_events=n)), _session)
    await step("after_timestamp=102", BOTH, get("u1", "s1", GetSessionConfig(after_timestamp=102.0)), _session)
    await step(
        "both filters",
        BOTH,
        get("u1", "s1", GetSessionConfig(num_recent_events=3, after_timestamp=102.5)),
        _session,
    )
    s3 = await step(
        "a second session of the user sees app: and user:",
        BOTH,
        lambda: service.create_session(app_name=APP, user_id="u1", session_id="s3"),
        _session,
    )
    await step("append to it", BOTH, lambda: service.append_event(s3, _event(90.0, text="hi")), lambda e: s3.state)
    await step(
        "another user sees app: only",
        BOTH,
        lambda: service.create_session(app_name=APP, user_id="u3", session_id="s4", state={"user:z": 1}),
        _session,
    )
    await step("user state", BOTH, lambda: service.get_user_state(app_name=APP, user_id="u1"), lambda state: state)
    await step(
        "list one user's sessions (oldest update first)",
        BOTH,
        lambda: service.list_sessions(app_name=APP, user_id="u1"),
        lambda r: [(s.id, s.user_id, s.state, s.last_update_time, s.events) for s in r.sessions],
    )
    await step(
        "list every user's sessions",
        BOTH,
        lambda: service.list_sessions(app_name=APP),
        lambda r: sorted((s.id, s.user_id, s.state) for s in r.sessions if s.id != generated.id),
    )
    await step(
        "list another app",
        BOTH,
        lambda: service.list_sessions(app_name="other"),
        lambda r: r.sessions,
    )
    stale = await step("read a copy", BOTH, get("u1", "s1"), lambda s: s.id)
    await step("append through the fresh copy", BOTH, lambda: service.append_event(s1, _event(110.0)), lambda e: None)
    await step(
        "append through the stale copy",
        DATABASE,
        lambda: service.append_event(stale, _event(111.0)),
        lambda e: None,
    )
    await step("delete", BOTH, lambda: service.delete_session(app_name=APP, user_id="u1", session_id="s1"), repr)
    await step("get the deleted session", BOTH, get("u1", "s1"), _session)
    await step(
        "append to the deleted session",
        BOTH,
        lambda: service.append_event(s1, _event(120.0)),
        lambda e: None,
    )
    await step(
        "delete a missing session",
        BOTH,
        lambda: service.delete_session(app_name=APP, user_id="u1", session_id="never"),
        repr,
    )
    await step(
        "the scopes outlive the deleted session",
        BOTH,
        get("u1", "s3"),
        lambda s: s.state,
    )
    return out


def _run(make: Callable[[], BaseSessionService]) -> list[tuple[str, tuple[str, ...], Any]]:
    async def go() -> list[tuple[str, tuple[str, ...], Any]]:
        service = make()
        try:
            return await _script(service)
        finally:
            close = getattr(service, "close", None)
            if close is not None:
                await close()

    return asyncio.run(go())


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_dsn"))
    return str(tmp_path / "j.db")


@pytest.mark.parametrize("reference", ["in_memory", "database"])
def test_journal_session_service_answers_every_call_as_adks_own_services_do(
    target: str, tmp_path: Path, reference: str
) -> None:
    theirs = _run(
        InMemorySessionService
        if reference == "in_memory"
        else lambda: DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}")
    )
    ours = _run(lambda: JournalSessionService(target))
    assert [name for name, _, _ in ours] == [name for name, _, _ in theirs]
    compared = 0
    for (name, refs, got), (_, _, expected) in zip(ours, theirs, strict=True):
        if reference in refs:
            assert got == expected, name
            compared += 1
    assert compared >= 25
