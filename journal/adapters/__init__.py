"""Framework adapters (DESIGN §14): each framework's persistence hook on the journal.

- ``journal.adapters.openai_agents``: a ``Session`` and ``RunHooks`` for openai-agents
  (extra ``agent-journal[openai-agents]``);
- ``journal.adapters.langgraph``: a ``BaseCheckpointSaver`` for LangGraph (``[langgraph]``);
- ``journal.adapters.claude``: a ``SessionStore`` for the Claude Agent SDK (``[claude]``);
- ``journal.adapters.pydantic_ai``: a durability capability, a ``ConversationStore`` and ``JournalAgent``
  for pydantic-ai (``[pydantic-ai]``);
- ``journal.adapters.adk``: a ``BaseSessionService`` and a ``BasePlugin`` for Google ADK (``[adk]``).

Each stores the framework's own payload verbatim as ``x.<framework>.*`` events (it round-trips
deep-equal) and, in the same transaction, the typed events the journal understands where the
framework's format is known, so scan, recover, the messages view and the CLI work on them.
Importing an adapter without its framework raises an ``ImportError`` that names the extra.
"""

from __future__ import annotations


def require(module: str, extra: str) -> None:
    """Import ``module`` (the framework) or raise an ``ImportError`` naming the extra to install."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this adapter needs {module!r}: install it with  python -m pip install 'agent-journal[{extra}]'"
        ) from exc


def refuse_async_journal(target: object) -> None:
    """For an adapter that drives a ``journal.Journal`` (its async methods run the sync ones in a
    worker thread): an ``AsyncJournal``'s writes belong to its event loop, so it is refused with
    an error that says what to pass instead."""
    from journal.aio import AsyncJournal
    from journal.errors import InvalidArgument

    if isinstance(target, AsyncJournal):
        raise InvalidArgument(
            "path_or_journal",
            "an AsyncJournal's writes belong to its event loop: pass a journal.Journal, a path or a DSN "
            "(this adapter's async methods run in a worker thread)",
        )
