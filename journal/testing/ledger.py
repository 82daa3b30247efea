"""The ledger: a record of side effects kept outside the journal, the witness in crash tests.

One JSON object a line, appended with ``O_APPEND`` and fsynced before ``record`` returns, so an
entry that a tool recorded survives the tool's process being killed right after. The journal is
what is being tested; the ledger is how a test knows what really happened.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any


class Ledger:
    """An append-only file of side effects."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def record(self, **entry: Any) -> None:
        """Append one entry durably (written and fsynced before this returns)."""
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def entries(self) -> list[dict[str, Any]]:
        """Every complete entry, in order (a torn last line from a kill is ignored)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def count(self, **match: Any) -> int:
        """How many entries have all the given fields."""
        return sum(all(e.get(k) == v for k, v in match.items()) for e in self.entries())

    def repeated(self, field: str) -> dict[Any, int]:
        """Values of ``field`` that appear more than once: side effects that happened twice."""
        counts = Counter(e.get(field) for e in self.entries() if field in e)
        return {value: n for value, n in counts.items() if n > 1}
