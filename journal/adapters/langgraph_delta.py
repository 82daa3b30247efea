"""An append-only LangGraph channel (``messages`` under ``add_messages``) stored as its delta.

LangGraph hands a saver the whole ``messages`` list at every step; stored whole, a thread's bytes
grow with the square of its length. The saver's serde writes a list as one msgpack array whose
body is its elements' encodings one after the other (msgpack has no back-references), so when a
new version's body *starts with the very bytes* of a version stored before, only the rest — the
new elements' encodings — is stored, with the chain of versions it extends. Reading concatenates
the bodies under a fresh array header and decodes once: the bytes decoded are exactly those a
full copy would hold, so a message replaced by id, removed (``RemoveMessage``) or changed in
place breaks the prefix and is stored whole. A chain is at most ``MAX_CHAIN`` rows (then a full
copy starts the next), so a read is two state reads whatever the thread's length; those full
copies still make a long thread's bytes grow with the square of its length (over ``MAX_CHAIN``).

Pure functions over bytes, no I/O.
"""

from __future__ import annotations

import json
import os
from typing import Any

import attrs

MAX_CHAIN = 32
KIND = "lg.delta"  # the serde type slot of a stored value that is a delta (a real serde type never is)
SERDE = "msgpack"  # the one serde encoding whose arrays this splits


@attrs.frozen
class Stored:
    """A version of a list channel this saver stored or read: its body bytes, element count and
    the chain of versions (a full copy first) that rebuilds it."""

    version: str
    count: int
    body: bytes
    chain: tuple[str, ...]


def split_array(data: bytes) -> tuple[int, bytes] | None:
    """A msgpack array's element count and body (its elements' encodings), or ``None``."""
    if not data:
        return None
    first = data[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F, data[1:]
    if first == 0xDC and len(data) >= 3:
        return int.from_bytes(data[1:3], "big"), data[3:]
    if first == 0xDD and len(data) >= 5:
        return int.from_bytes(data[1:5], "big"), data[5:]
    return None


def array(count: int, body: bytes) -> bytes:
    """A msgpack array of ``count`` elements whose encodings are ``body``."""
    if count < 16:
        return bytes([0x90 | count]) + body
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big") + body
    return b"\xdd" + count.to_bytes(4, "big") + body


def extend(base: Stored | None, version: str, kind: str, data: bytes) -> tuple[bytes | None, Stored | None]:
    """How to store ``data`` (serde ``kind``) as ``version`` given the ``base`` last stored: the
    delta row (``None``: store it whole) and what to remember of it (``None``: not a list)."""
    split = split_array(data) if kind == SERDE else None
    if split is None:
        return None, None
    count, body = split
    if base is not None and len(base.chain) < MAX_CHAIN and count >= base.count and body.startswith(base.body):
        header = json.dumps({"chain": _shared(base.chain), "count": count}, separators=(",", ":")).encode()
        row = header + b"\0" + body[len(base.body) :]
        return row, Stored(version, count, body, (*base.chain, version))
    return None, Stored(version, count, body, (version,))


def read_delta(row: bytes) -> tuple[list[str], int, bytes]:
    """A delta row's chain of earlier versions, the list's element count and its own tail."""
    header, _, tail = row.partition(b"\0")
    fields = json.loads(header)
    return _unshared(fields["chain"]), int(fields["count"]), tail


def _shared(versions: tuple[str, ...]) -> list[Any]:
    """``versions`` each as ``[n, rest]``: the first ``n`` characters of the one before, then
    ``rest`` (LangGraph's versions share a long zero-padded prefix: a chain stays small)."""
    out: list[Any] = []
    before = ""
    for version in versions:
        # The shared characters of two version strings (not path components) are what is meant.
        n = len(os.path.commonprefix([before, version]))  # noqa: RUF071
        out.append([n, version[n:]])
        before = version
    return out


def _unshared(entries: list[Any]) -> list[str]:
    out: list[str] = []
    before = ""
    for n, rest in entries:
        before = before[: int(n)] + str(rest)
        out.append(before)
    return out


def rebuild(count: int, snapshot: bytes, tails: list[bytes]) -> bytes:
    """The msgpack array a chain stands for: the full copy's body, then each delta's tail."""
    split = split_array(snapshot)
    if split is None:
        raise ValueError("the first version of a delta chain is not a msgpack array")
    return array(count, split[1] + b"".join(tails))
