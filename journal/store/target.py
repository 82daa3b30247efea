"""What ``journal.open`` was given: a file's path, or a PostgreSQL database's DSN."""

from __future__ import annotations


def is_dsn(target: str) -> bool:
    """Whether ``target`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return target.startswith(("postgresql://", "postgres://"))
