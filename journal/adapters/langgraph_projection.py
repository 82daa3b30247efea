"""What recovery wrote, shown in LangGraph's shape: pure functions over a checkpoint (no I/O).

The typed log is the truth (DESIGN §14). When the head checkpoint of a thread holds an
``AIMessage`` whose tool calls have no ``ToolMessage`` in the messages channel, and each of them is
answered elsewhere — by a ``ToolMessage`` a task stored before the crash (a pending write), or by
the journal's ``tool_result`` (a synthetic one saying the call MAY have run) — the read puts the
answers in the channel right after that call's answers so far, before anything later. Then:

- ``graph.invoke(new input)`` builds on channel values that answer every call (LangGraph drops
  the pending writes of a checkpoint when new input arrives, so answers there alone would leave
  the model an unanswered call);
- the stopped tool task reads as run in the head itself (``JournalSaver._fold``: the tool node
  has seen its trigger, the edge back to the node that asked holds a value), so ``invoke(None)``
  and a run from the head's own config (which LangGraph replays, running again any task still
  pending there) go on to that node: neither runs the tool again nor stops short of the model.
  When the records do not tell which node asked, the task is shown finished by its pending
  writes instead (``projected_writes``), which a replay does not apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolMessage

ANSWER_ID = "journal-result:"  # the id of an answer read from the journal: stable, so a re-read replaces it
BRANCH = "branch:to:"  # LangGraph's trigger channel of a node in a StateGraph
_NOT_NODES = ("__input__", "__interrupt__", "__start__")


def unanswered(messages: Sequence[Any]) -> list[str]:
    """The ids of the tool calls of ``messages`` that no later ``ToolMessage`` answers, in order."""
    answered = {m.tool_call_id for m in messages if getattr(m, "type", None) == "tool"}
    out: list[str] = []
    for message in messages:
        if getattr(message, "type", None) in ("ai", "AIMessageChunk"):
            out.extend(
                c["id"] for c in getattr(message, "tool_calls", None) or () if c.get("id") and c["id"] not in answered
            )
    return out


def tool_message(call_id: str, result: Mapping[str, Any]) -> ToolMessage:
    """The journal's ``tool_result`` for ``call_id`` as LangGraph's ``ToolMessage``; mirrored back
    it reads as that same result (G5: nothing written twice)."""
    metadata = result.get("metadata")
    return ToolMessage(
        content=result.get("content", ""),
        tool_call_id=call_id,
        name=result.get("name"),
        status="error" if result.get("is_error") else "success",
        response_metadata={"journal": dict(metadata)} if isinstance(metadata, Mapping) else {},
        id=ANSWER_ID + call_id,
    )


def answer(
    messages: Sequence[Any], saved: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]
) -> tuple[list[Any], list[Any]] | None:
    """``messages`` with every unanswered call of an ``AIMessage`` answered, and the answers added.

    ``saved``: the ``ToolMessage`` a task stored for a call (preferred: it is what the tool
    returned); ``results``: the journal's result data by call id. An ``AIMessage`` is answered
    only when each of its unanswered calls has an answer (a call without one is left as it is:
    a run in flight, or a human approval awaited). ``None`` when nothing is added."""
    answered = {m.tool_call_id for m in messages if getattr(m, "type", None) == "tool"}
    out: list[Any] = []
    added: list[Any] = []
    owed: list[Any] = []  # the answers of the last AIMessage, placed after its own answers so far

    def flush() -> None:
        out.extend(owed)
        added.extend(owed)
        owed.clear()

    for message in messages:
        kind = getattr(message, "type", None)
        if owed and kind != "tool":
            flush()
        out.append(message)
        if kind not in ("ai", "AIMessageChunk"):
            continue
        calls = [c["id"] for c in getattr(message, "tool_calls", None) or () if c.get("id") and c["id"] not in answered]
        if calls and all(c in saved or c in results for c in calls):
            owed.extend(saved[c] if c in saved else tool_message(c, results[c]) for c in dict.fromkeys(calls))
    flush()
    return (out, added) if added else None


def superseded(messages: Sequence[Any]) -> list[Any] | None:
    """``messages`` without an answer a read showed from the journal (``ANSWER_ID``) that a later
    ``ToolMessage`` for the same call replaces (an answer given after a crash, say by
    ``update_state``, in the same run of answers after the call), or whose call no ``AIMessage``
    before it asks any more (the user removed that message): ``None`` when there is none."""
    later: set[str] = set()  # the calls answered later in the same run of answers
    dropped: set[int] = set()
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if getattr(message, "type", None) != "tool":
            later.clear()  # an answer after a later message answers nothing here
            continue
        call_id = str(getattr(message, "tool_call_id", None))
        if str(getattr(message, "id", None)) == ANSWER_ID + call_id and call_id in later:
            dropped.add(index)
        later.add(call_id)
    asked: set[str] = set()
    for index, message in enumerate(messages):
        if getattr(message, "type", None) in ("ai", "AIMessageChunk"):
            asked.update(str(c.get("id")) for c in getattr(message, "tool_calls", None) or ())
        elif getattr(message, "type", None) == "tool":
            call_id = str(getattr(message, "tool_call_id", None))
            if str(getattr(message, "id", None)) == ANSWER_ID + call_id and call_id not in asked:
                dropped.add(index)
    return [m for i, m in enumerate(messages) if i not in dropped] if dropped else None


def pending_nodes(checkpoint: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """The nodes this checkpoint runs next: a node whose trigger channel holds a value of a
    version the node has not seen (LangGraph's own rule, for a ``StateGraph``'s edges)."""
    versions, seen = checkpoint.get("channel_versions", {}), checkpoint.get("versions_seen", {})
    out = []
    for channel, version in versions.items():
        if channel.startswith(BRANCH) and channel in values:
            node = channel[len(BRANCH) :]
            if seen.get(node, {}).get(channel) != version:
                out.append(node)
    return sorted(out)


def folded_nodes(checkpoint: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """The nodes a read showed as run in this checkpoint (``JournalSaver._fold``): their trigger
    channel still holds a value they have seen (a run LangGraph stored would have consumed it)."""
    versions, seen = checkpoint.get("channel_versions", {}), checkpoint.get("versions_seen", {})
    return sorted(
        channel[len(BRANCH) :]
        for channel, version in versions.items()
        if channel.startswith(BRANCH)
        and channel in values
        and seen.get(channel[len(BRANCH) :], {}).get(channel) == version
    )


def ran_nodes(checkpoint: Mapping[str, Any], parent: Mapping[str, Any]) -> list[str]:
    """The nodes that ran in the step that made ``checkpoint`` (they saw new versions then) and
    have a trigger channel: those of them that asked for its calls."""
    now, before = checkpoint.get("versions_seen", {}), parent.get("versions_seen", {})
    versions = checkpoint.get("channel_versions", {})
    return [n for n in now if n not in _NOT_NODES and now[n] != before.get(n) and BRANCH + n in versions]


def projected_writes(
    task_id: str, channel: str, added: Sequence[Any], back_to: str | None
) -> list[tuple[str, str, Any]]:
    """The pending writes of the tool node's task as if it had returned ``added``: the answers,
    and (``back_to``) the edge to the node that asked, as LangGraph's edge writes it."""
    writes: list[tuple[str, str, Any]] = [(task_id, channel, list(added))]
    if back_to is not None:
        writes.append((task_id, BRANCH + back_to, None))
    return writes
