"""An append-only LangGraph channel (``messages`` under ``add_messages``) stored as its delta.

LangGraph hands a saver the whole ``messages`` list at every step; stored whole, a thread's bytes
grow with the square of its length. The saver's serde writes a list as one msgpack array whose
body is its elements' encodings one after the other (msgpack has no back-references), so when a
new version's body *starts with the very bytes* of a version stored before, only the rest — the
new elements' encodings — is stored, with the chain of versions it extends. Reading concatenates
the bodies under a fresh array header and decodes once: the bytes decoded are exactly those a
full copy would hold, so a message replaced by id, removed (``RemoveMessage``) or changed in
place breaks the prefix and is stored whole.

Which versions a row extends follows its place ``n`` in its lineage (the full copy is place 0),
written in base ``FANOUT``: a row whose place ends in ``k`` zero digits holds the bytes of the
last ``FANOUT**k`` versions, and the chain that rebuilds place ``n`` steps through its digits
from the highest (``n = 19``, 23 in base 8: places 0, 8, 16, 17, 18, 19). So a message's bytes
are stored once per digit a place has (``log`` of the lineage's length, base ``FANOUT``), never
again in a full copy: a thread's bytes grow as its messages do (times that small log), and a
read is still two state reads (the version's row, then its chain's, at most ``FANOUT - 1`` a
digit).

Pure functions over bytes, no I/O.
"""

from __future__ import annotations

import json
import os
from typing import Any

import attrs

FANOUT = 8  # a row holds the last FANOUT**k versions' bytes, k the zero digits its place ends in
MAX_CHAIN = 64  # a chain that would be longer (a lineage of ~8**9 versions) starts a full copy
KIND = "lg.delta"  # the serde type slot of a stored value that is a delta (a real serde type never is)
SERDE = "msgpack"  # the one serde encoding whose arrays this splits


@attrs.frozen
class Stored:
    """A version of a list channel this saver stored or read: its body bytes, element count, the
    chain of versions (a full copy first, itself last) that rebuilds it, the body's length at
    each of them, and its place in its lineage (``-1``: unknown, a row of an older saver's
    layout; the next version is then stored whole)."""

    version: str
    count: int
    body: bytes
    chain: tuple[str, ...]
    marks: tuple[int, ...] = ()
    place: int = 0


def places(n: int) -> list[int]:
    """The places of the lineage whose rows rebuild place ``n``, the full copy (0) first, ``n``
    last: ``n``'s base-``FANOUT`` digits from the highest, a step per unit of each."""
    digits = []
    rest = n
    while rest:
        rest, digit = divmod(rest, FANOUT)
        digits.append(digit)
    out, at = [0], 0
    for k in reversed(range(len(digits))):
        for _ in range(digits[k]):
            at += FANOUT**k
            out.append(at)
    return out


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


def whole(version: str, kind: str, data: bytes) -> Stored | None:
    """What to remember of ``data`` stored whole as ``version`` (``None``: not a list)."""
    split = split_array(data) if kind == SERDE else None
    if split is None:
        return None
    count, body = split
    return Stored(version, count, body, (version,), (len(body),), 0)


def extend(base: Stored | None, version: str, kind: str, data: bytes) -> tuple[bytes | None, Stored | None]:
    """How to store ``data`` (serde ``kind``) as ``version`` given the ``base`` last stored: the
    delta row (``None``: store it whole) and what to remember of it (``None``: not a list)."""
    stored = whole(version, kind, data)
    if stored is None or base is None or base.place < 0 or stored.count < base.count:
        return None, stored
    body, place = stored.body, base.place + 1
    # The row extends the chain of place n - FANOUT**k, which is a beginning of the base's chain
    # (the base, n - 1, is that place plus FANOUT**k - 1: lower digits only).
    upon = len(places(place)) - 1
    if upon > MAX_CHAIN or len(base.chain) != len(places(base.place)) or not body.startswith(base.body):
        return None, stored
    chain, marks = base.chain[:upon], base.marks[:upon]
    header = json.dumps({"chain": _shared(chain), "count": stored.count, "place": place}, separators=(",", ":"))
    row = header.encode() + b"\0" + body[marks[-1] :]
    return row, Stored(version, stored.count, body, (*chain, version), (*marks, len(body)), place)


def read_delta(row: bytes) -> tuple[list[str], int, bytes, int]:
    """A delta row's chain of earlier versions, the list's element count, its own tail, and its
    place in its lineage (``-1`` for a row of the older layout, each extending the one before)."""
    header, _, tail = row.partition(b"\0")
    fields = json.loads(header)
    return _unshared(fields["chain"]), int(fields["count"]), tail, int(fields.get("place", -1))


def remembered(version: str, count: int, chain: list[str], snapshot: bytes, tails: list[bytes], place: int) -> Stored:
    """A list read back from its chain -- the full copy (``snapshot``), then each row's tail --
    as what to remember of it, the base of the next version (``array(count, body)`` is its
    serde bytes)."""
    split = split_array(snapshot)
    if split is None:
        raise ValueError("the first version of a delta chain is not a msgpack array")
    marks = [len(split[1])]
    for tail in tails:
        marks.append(marks[-1] + len(tail))
    body = split[1] + b"".join(tails)
    return Stored(version, count, body, (*chain, version), tuple(marks), place)


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
