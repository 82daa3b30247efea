"""A session's forks as a tree: its ancestors, itself, its forks and theirs (bounded).

``fork_tree(j, session)`` reads the fork parents up the chain (one lookup each, at most
``ANCESTORS_MAX``), the session's forks ``CHILDREN`` a page (``Journal.sessions(parent_id=)``: one
seek of the index of fork parents) and, of each, its first ``GRANDCHILDREN`` forks. The session
page draws it (``pages.session_header``) and ``/api/sessions/ID/forks`` gives it (``to_dict``).
"""

from __future__ import annotations

from typing import Any

import attrs

from journal import Journal, Session, SessionNotFound
from journal.log import check_session_id

ANCESTORS_MAX = 16  # fork parents shown up the chain
CHILDREN = 20  # forks of the session a page
GRANDCHILDREN = 5  # forks of each fork shown


@attrs.frozen
class ForkNode:
    """A fork, the forks of it shown, and whether it has more (a grandchild's own forks are not
    read: its page shows them)."""

    session: Session
    children: tuple[ForkNode, ...] = ()
    more: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.session.id,
            "fork_point": self.session.seed_length - 1,
            "count": self.session.count,
            "children": [c.to_dict() for c in self.children],
            "more": self.more,
        }


@attrs.frozen
class ForkTree:
    """``ancestors``: the fork parents, the root first (``ancestors_left_off``: the chain goes on
    beyond ``ANCESTORS_MAX``); ``children``: a page of the session's forks, ``more_after`` the
    id to ask the next page after (None: no more)."""

    session: Session
    ancestors: tuple[Session, ...]
    ancestors_left_off: bool
    children: tuple[ForkNode, ...]
    more_after: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session.id,
            "parent_id": self.session.parent_id,
            "fork_point": self.session.seed_length - 1 if self.session.parent_id is not None else None,
            "ancestors": [
                {"id": a.id, "parent_id": a.parent_id, "fork_point": a.seed_length - 1 if a.parent_id else None}
                for a in self.ancestors
            ],
            "ancestors_left_off": self.ancestors_left_off,
            "children": [c.to_dict() for c in self.children],
            "more_after": self.more_after,
        }


def fork_tree(j: Journal, session: Session, *, after: str | None = None) -> ForkTree:
    """The tree around ``session``: its fork parents, and its forks after the fork ``after``."""
    ancestors: list[Session] = []
    parent_id = session.parent_id
    while parent_id is not None and len(ancestors) < ANCESTORS_MAX:
        try:
            parent = j.session(parent_id)
        except SessionNotFound:  # purged meanwhile: the chain ends here
            break
        ancestors.append(parent)
        parent_id = parent.parent_id
    ancestors.reverse()
    try:
        page = j.sessions(
            parent_id=session.id, limit=CHILDREN, after=None if after is None else check_session_id(after)
        )
    except SessionNotFound:  # `after` purged meanwhile: from the start again
        page = j.sessions(parent_id=session.id, limit=CHILDREN)
    children = []
    for child in page:
        theirs = j.sessions(parent_id=child.id, limit=GRANDCHILDREN + 1)
        nodes = tuple(ForkNode(g) for g in theirs[:GRANDCHILDREN])
        children.append(ForkNode(child, nodes, len(theirs) > GRANDCHILDREN))
    more_after = page[-1].id if len(page) == CHILDREN else None
    return ForkTree(session, tuple(ancestors), parent_id is not None, tuple(children), more_after)


__all__ = ["ForkNode", "ForkTree", "fork_tree"]
