"""What a file is, read from its bytes before SQLite opens it (G13).

SQLite writes as soon as it reads: it rolls back a hot ``-journal``, rebuilds a ``-shm`` from a
``-wal``, deletes the side files of an empty file, and the last connection to close folds the
``-wal`` into the file and deletes it. So whether a file is a journal is decided here, from the
bytes on disk, before any connection exists; only then may SQLite touch the file.

The formats are SQLite's (https://sqlite.org/fileformat2.html): the database header, the b-tree
header of page 1 (the root of the schema table), the rollback journal's header, and the WAL with
its cumulative checksums. Nothing here imports apsw (only ``store/sqlite.py`` does).
"""

from __future__ import annotations

import enum
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

SQLITE_HEADER = b"SQLite format 3\x00"
# Page 1: the 100-byte database header, then the schema table's b-tree header.
_PAGE_ONE_PREFIX = 108
_LEAF_TABLE, _INTERIOR_TABLE = 0x0D, 0x05
_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")
_JOURNAL_HEADER = 28
_WAL_MAGICS = (0x377F0682, 0x377F0683)  # the low bit: checksums are big-endian words
_WAL_VERSION = 3007000
_WAL_HEADER, _FRAME_HEADER = 32, 24
_MASK = 0xFFFFFFFF


class Verdict(enum.Enum):
    """What a path holds, as far as opening it is concerned."""

    NEW = "new"  # no file, or an empty one: a journal may be created there
    EMPTY = "empty"  # an SQLite database with nothing in it (no table, no application, version 0)
    JOURNAL = "journal"  # a journal (its schema version in ``user_version``)
    FOREIGN = "foreign"  # anything else: it must be left untouched


@dataclass(frozen=True)
class Identity:
    """A verdict, why (for ``FOREIGN``), and a journal's schema version as the bytes show it."""

    verdict: Verdict
    reason: str = ""
    user_version: int = 0


@dataclass(frozen=True)
class PageOne:
    """What page 1 of a database says about it."""

    application_id: int
    user_version: int
    has_schema: bool  # the schema table holds at least one entry


# How many leading bytes ``sqlite_file_kind`` needs: a -shm's header is two copies of 48 bytes.
KIND_PREFIX = 96
_SHM_COPY = 48


def sqlite_file_kind(prefix: bytes) -> str | None:
    """Which of SQLite's files these leading bytes (``KIND_PREFIX`` of them, or the whole file
    if shorter) begin, if any: ``"database"``, ``"wal"``, ``"journal"`` (a hot rollback
    journal) or ``"shm"`` (a WAL index); ``None`` for anything else.

    A file that is one of these must never be written over: it is a database, or a side file
    SQLite would read as part of one."""
    if prefix.startswith(SQLITE_HEADER):
        return "database"
    if len(prefix) >= 4 and struct.unpack_from(">I", prefix)[0] in _WAL_MAGICS:
        return "wal"
    if prefix.startswith(_JOURNAL_MAGIC):
        return "journal"
    # A WAL index starts with two copies of its header, whose first field is the version, in
    # the machine's byte order.
    copies = len(prefix) >= 2 * _SHM_COPY and prefix[:_SHM_COPY] == prefix[_SHM_COPY : 2 * _SHM_COPY]
    if copies and _WAL_VERSION in (struct.unpack_from("<I", prefix)[0], struct.unpack_from(">I", prefix)[0]):
        return "shm"
    return None


def read_page_one(data: bytes) -> PageOne | None:
    """Page 1's owner, version and whether it has a schema, from its first 108 bytes.

    ``None`` if the bytes are not a valid database header and table b-tree page.
    """
    if len(data) < _PAGE_ONE_PREFIX or data[:16] != SQLITE_HEADER:
        return None
    page_size = struct.unpack_from(">H", data, 16)[0]
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return None
    page_type, cells = data[100], struct.unpack_from(">H", data, 103)[0]
    if page_type == _LEAF_TABLE:
        has_schema = cells > 0
    elif page_type == _INTERIOR_TABLE:
        has_schema = True  # an interior root has children, so entries
    else:
        return None
    user_version = struct.unpack_from(">I", data, 60)[0]
    application_id = struct.unpack_from(">I", data, 68)[0]
    return PageOne(application_id, user_version, has_schema)


def judge(page: PageOne, application_id: int) -> Identity:
    """The verdict page 1 alone gives: ours, foreign, or empty."""
    if page.application_id == application_id:
        return Identity(Verdict.JOURNAL, user_version=page.user_version)
    if page.application_id != 0 or page.has_schema or page.user_version != 0:
        return Identity(Verdict.FOREIGN, "an SQLite database of another application")
    return Identity(Verdict.EMPTY)


def identify(path: str, application_id: int) -> Identity:
    """What ``path`` holds, from its bytes and its side files' (raises ``OSError`` if unreadable).

    Page 1 of the file decides when it names an application or has a schema. When it shows an
    empty database (or the file is empty), the side files may still hold the truth: our own new
    journal whose creation is only in its ``-wal`` (a crash before the first checkpoint), or a
    database of another application whose tables are all in its ``-wal``, or whose hot
    ``-journal`` SQLite would roll back. Those are read too.
    """
    try:
        with open(path, "rb") as f:
            prefix = f.read(_PAGE_ONE_PREFIX)
    except FileNotFoundError:
        return Identity(Verdict.NEW)
    if not prefix:
        identity = Identity(Verdict.NEW)
    elif (page := read_page_one(prefix)) is not None:
        identity = judge(page, application_id)
        if identity.verdict is not Verdict.EMPTY:
            return identity
    elif prefix[:16] == bytes(16) and hot_journal_original_pages(path) == 0:
        # A power cut while a new file was being created can leave its first sector unwritten
        # beside the hot journal of that creation, which SQLite rolls back to an empty file.
        identity = Identity(Verdict.EMPTY)
    else:
        return Identity(Verdict.FOREIGN, "not an SQLite database")
    return _side_files(path, application_id, identity)


def _side_files(path: str, application_id: int, identity: Identity) -> Identity:
    """The verdict for a file that looks new or empty, once its side files are read."""
    original = hot_journal_original_pages(path)
    if original is not None and original != 0:
        # Rolling it back would restore pages of a database this library never wrote: our only
        # rollback-journal transaction is the switch to WAL of a new, empty file.
        return Identity(Verdict.FOREIGN, "an SQLite database with a hot rollback journal")
    for image in committed_page_ones(path + "-wal"):
        page = read_page_one(image)
        if page is None:
            return Identity(Verdict.FOREIGN, "an unreadable -wal")
        found = judge(page, application_id)
        if found.verdict is not Verdict.EMPTY:
            # A journal never loses its application id, and a foreign copy of page 1 is reason
            # enough to keep out: the first copy that is not empty decides.
            return found
    return identity


def hot_journal_original_pages(path: str) -> int | None:
    """The size in pages before the transaction of a hot ``-journal`` beside ``path``.

    ``None`` when there is no hot journal (no file, an empty one, or a zeroed first byte: SQLite
    ignores those); ``-1`` when the journal is hot but its header is not a journal header.
    """
    try:
        with open(path + "-journal", "rb") as f:
            header = f.read(_JOURNAL_HEADER)
    except FileNotFoundError:
        return None
    if not header or header[0] == 0:
        return None
    if len(header) < _JOURNAL_HEADER or header[:8] != _JOURNAL_MAGIC:
        return -1
    (pages,) = struct.unpack_from(">I", header, 16)
    return int(pages)


def missing_bytes(path: str) -> int:
    """How many bytes the database file at ``path`` lacks of the size its header gives it (0 if
    none, or if the header's size is not valid, or if its ``-wal`` holds a commit).

    The size in page 1 (offset 28, in pages) is valid when the change counter beside it equals
    the version it is valid for (offset 92): SQLite writes them together. A file shorter than
    that was cut (a copy that stopped short, a truncation); its last pages are gone. While the
    ``-wal`` holds a commit the file may lag its own header (a checkpoint that died after page 1
    was written back), and SQLite reads those pages from the log, so that is no loss."""
    with open(path, "rb") as f:
        prefix = f.read(_PAGE_ONE_PREFIX)
        size = os.fstat(f.fileno()).st_size
    if len(prefix) < _PAGE_ONE_PREFIX or prefix[:16] != SQLITE_HEADER:
        return 0
    page_size = struct.unpack_from(">H", prefix, 16)[0]
    page_size = 65536 if page_size == 1 else page_size
    counter, pages = struct.unpack_from(">II", prefix, 24)
    valid_for = struct.unpack_from(">I", prefix, 92)[0]
    short = pages * page_size - size
    if counter != valid_for or short <= 0 or wal_has_commits(path):
        return 0
    return int(short)


def committed_page_ones(wal_path: str) -> Iterator[bytes]:
    """The first 108 bytes of every copy of page 1 in a committed frame of a WAL, oldest first."""
    return (prefix for page_number, prefix in _committed_frames(wal_path) if page_number == 1)


def wal_has_commits(path: str) -> bool:
    """Whether the ``-wal`` beside ``path`` holds at least one committed frame."""
    return next(_committed_frames(path + "-wal"), None) is not None


def _committed_frames(wal_path: str) -> Iterator[tuple[int, bytes]]:
    """Each committed frame of a WAL as (page number, first 108 bytes of the page), oldest first.

    A frame counts only as SQLite's recovery counts it: its salts are the header's, the
    cumulative checksum holds from the header through it, and a commit frame ends its
    transaction. Frames of an earlier WAL generation, or after a torn write, end the log.
    """
    try:
        f = open(wal_path, "rb")
    except FileNotFoundError:
        return
    with f:
        header = f.read(_WAL_HEADER)
        if len(header) < _WAL_HEADER:
            return
        magic, version, page_size, _, salt_1, salt_2, sum_1, sum_2 = struct.unpack(">8I", header)
        if magic not in _WAL_MAGICS or version != _WAL_VERSION:
            return
        if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
            return
        order = ">" if magic & 1 else "<"
        sums = _wal_checksum(header[:24], order, 0, 0)
        if sums != (sum_1, sum_2):
            return
        size = _FRAME_HEADER + page_size
        pending: list[tuple[int, bytes]] = []
        while len(frame := f.read(size)) == size:
            page_number, commit_size, frame_salt_1, frame_salt_2, frame_sum_1, frame_sum_2 = struct.unpack_from(
                ">6I", frame
            )
            if (frame_salt_1, frame_salt_2) != (salt_1, salt_2):
                return
            sums = _wal_checksum(frame[:8], order, *sums)
            sums = _wal_checksum(frame[_FRAME_HEADER:], order, *sums)
            if sums != (frame_sum_1, frame_sum_2):
                return
            pending.append((page_number, frame[_FRAME_HEADER : _FRAME_HEADER + _PAGE_ONE_PREFIX]))
            if commit_size:
                yield from pending
                pending = []


def _wal_checksum(data: bytes, order: str, sum_1: int, sum_2: int) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data`` (a multiple of 8 bytes), continuing from two sums."""
    words = struct.unpack(f"{order}{len(data) // 4}I", data)
    pairs = iter(words)
    for first, second in zip(pairs, pairs):
        sum_1 = (sum_1 + first + sum_2) & _MASK
        sum_2 = (sum_2 + second + sum_1) & _MASK
    return sum_1, sum_2
