"""Stored content made safe to show (G14): text escaped for a terminal, JSON escaped for a pipe.

Everything in a journal was written by a model, a tool or a user, so none of it may reach a
terminal raw: control characters (C0, DEL, C1), format characters (bidi overrides and isolates,
zero-width and other invisible ones, category Cf), line and paragraph separators and lone
surrogates are shown as visible escapes (``\\x1b``, ``\\u202e``, ``\\udc80``). A newline in content
is escaped too, so content can neither start a line of its own nor hide one. Pure functions, no
I/O: the command line prints through ``journal.cli.render.echo``.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Every character of categories Cc, Cf, Cs, Zl and Zp (Unicode 15.1; tests/test_g14_terminal.py
# checks this list against the running Python's unicodedata), C0 apart so that JSON, which
# already escapes C0 itself, can leave its own structural newlines alone.
_C0 = "\x00-\x1f"
_OTHERS = (
    "\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
UNSAFE = re.compile(f"[{_C0}{_OTHERS}]")
_UNSAFE_IN_JSON = re.compile(f"[{_OTHERS}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _text_escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape(text: object) -> str:
    """``text`` (or its ``str()``) with every unsafe character shown as a visible escape.

    The result holds no unsafe character, so escaping it again changes nothing; a backslash is
    left as it is (content that spells ``\\x1b`` looks like an escaped ESC, and is as harmless)."""
    value = text if isinstance(text, str) else str(text)
    return UNSAFE.sub(_text_escape, value)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def dumps(document: Any, *, indent: int | None = None) -> str:
    """Exact JSON (``json.loads`` gives back equal values) holding no unsafe character raw.

    ``json.dumps(ensure_ascii=False)`` escapes C0 but writes DEL, C1, bidi controls and lone
    surrogates raw; outside strings JSON text is ASCII, so each of those is inside a string,
    where its ``\\uXXXX`` escape means the same."""
    text = json.dumps(document, ensure_ascii=False, indent=indent, default=str)
    return _UNSAFE_IN_JSON.sub(_json_escape, text)
