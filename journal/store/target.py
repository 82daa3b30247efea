"""What ``journal.open`` was given: a file's path, or a PostgreSQL database's DSN, and the one
function that hides a DSN's secrets wherever a DSN may be shown (``redact``).

A DSN is a ``postgresql://`` (or ``postgres://``) URL, or libpq's keyword form
(``host=/tmp dbname=app password=...``), parsed here as libpq parses it. A text that starts like
either but is not well formed (``POSTGRESQL://...``, ``host=x password=a b``) is neither a DSN
nor a file: ``malformed_dsn`` says why, without quoting it, and ``journal.open`` refuses it.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

# libpq's connection keywords (PostgreSQL 17's, and 18's new ones). A text made only of
# ``keyword=value`` pairs whose keywords are all libpq's names a database, never a file.
_KEYWORDS = frozenset(
    """host hostaddr port dbname user password passfile require_auth channel_binding connect_timeout
    client_encoding options application_name fallback_application_name keepalives keepalives_idle
    keepalives_interval keepalives_count tcp_user_timeout replication gssencmode sslmode requiressl
    sslcompression sslcert sslkey sslpassword sslcertmode sslrootcert sslcrl sslcrldir sslsni
    sslnegotiation sslkeylogfile requirepeer ssl_min_protocol_version ssl_max_protocol_version
    min_protocol_version max_protocol_version krbsrvname gsslib gssdelegation service
    target_session_attrs load_balance_hosts scram_client_key scram_server_key oauth_issuer
    oauth_client_id oauth_client_secret oauth_scope""".split()
)
# The keywords (and URL parameters) whose values are secrets.
SECRET_KEYWORDS = frozenset({"password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"})
MASK = "***"
MIN_SECRET_CHARS = 4  # a shorter secret is not hunted for in free text: it would mask common letters

_SPACE = " \t\n\v\f\r"  # C's isspace, as libpq tests it
_URL_PREFIXES = ("postgresql://", "postgres://")
_URL_START = re.compile(r"postgres(?:ql)?://", re.IGNORECASE)
_URL_LIKE = re.compile(r"\s*postgres(?:ql)?:", re.IGNORECASE)
_KEYWORD_START = re.compile(r"\s*(\w+)\s*=")
_SECRETS = "|".join(sorted(SECRET_KEYWORDS))
# In free text: a secret keyword's value, quoted (to its closing quote, or to the end if there is
# none) or bare (to the next space; a backslash escapes the character after it).
_KEYWORD_SECRET = re.compile(
    rf"((?<![\w.%?&-])(?:{_SECRETS})\s*=\s*)('(?:[^'\\]|\\.)*(?:'|\\?$)|(?:\\.|[^\s\\])+\\?)", re.IGNORECASE
)


def is_url_dsn(target: str) -> bool:
    """Whether ``target`` is a ``postgresql://`` (or ``postgres://``) URL (libpq's own test:
    the scheme in lower case, at the very start)."""
    return target.startswith(_URL_PREFIXES)


def _keyword_pairs(text: str) -> list[tuple[str, str, int, int]] | None:
    """libpq's parse of the keyword form (``conninfo_parse``): each pair's ``(keyword, value,
    start, end)``, ``start:end`` the value as written (quotes included); ``None`` if it is not
    well formed (a word without ``=``, an unterminated quote)."""
    pairs: list[tuple[str, str, int, int]] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] in _SPACE:
            i += 1
            continue
        start = i
        while i < n and text[i] != "=" and text[i] not in _SPACE:
            i += 1
        keyword = text[start:i]
        while i < n and text[i] in _SPACE:
            i += 1
        if i >= n or text[i] != "=" or not keyword:
            return None
        i += 1
        while i < n and text[i] in _SPACE:
            i += 1
        value_start, value = i, []
        quoted = i < n and text[i] == "'"
        i += quoted
        # One scan for both forms: a backslash escapes the next character; a quoted value ends
        # at its closing quote (none: not well formed), a bare one at the next space.
        while i < n and (quoted or text[i] not in _SPACE):
            if text[i] == "\\":
                value.append(text[i + 1 : i + 2])  # nothing after a trailing backslash
                i = min(i + 2, n)
                continue
            if quoted and text[i] == "'":
                break
            value.append(text[i])
            i += 1
        if quoted:
            if i >= n:
                return None  # unterminated quoted string
            i += 1  # the closing quote
        pairs.append((keyword, "".join(value), value_start, i))
    return pairs


def is_keyword_dsn(target: str) -> bool:
    """Whether ``target`` is libpq's keyword/value form (``host=/tmp dbname=app password=...``):
    one or more well-formed ``keyword=value`` pairs, every keyword one of libpq's."""
    pairs = _keyword_pairs(target)
    if not pairs:
        return False
    return all(keyword in _KEYWORDS for keyword, *_ in pairs)


def is_dsn(target: str) -> bool:
    """Whether ``target`` names a PostgreSQL database: a ``postgresql://``/``postgres://`` URL or
    libpq's keyword/value form. Anything else is a file's path (see ``malformed_dsn``)."""
    return is_url_dsn(target) or is_keyword_dsn(target)


def malformed_dsn(target: str) -> str | None:
    """Why ``target``, which starts like a DSN but is not one, is refused (neither a database
    nor a file: a file named after a password is how secrets end up in directory listings);
    ``None`` for a DSN and for a file's path. The reason never quotes ``target``."""
    if is_dsn(target):
        return None
    if _URL_LIKE.match(target):
        return (
            "it looks like a PostgreSQL URL but is not one: the scheme is postgresql:// or postgres://, in lower case"
        )
    start = _KEYWORD_START.match(target)
    if start is None or start.group(1).lower() not in _KEYWORDS:  # (libpq's keywords are lower case)
        return None
    pairs = _keyword_pairs(target)
    if pairs is None:
        return (
            "it looks like libpq's keyword form (keyword=value ...) but is not well formed: a word without '=' "
            "or an unterminated quote (quote a value that holds spaces: password='a b')"
        )
    unknown = [n for n, (keyword, *_) in enumerate(pairs, 1) if keyword not in _KEYWORDS]
    return f"it looks like libpq's keyword form but pair {unknown[0]} is not a libpq keyword"


def secrets(dsn: str) -> tuple[str, ...]:
    """The secret values ``dsn`` carries, as libpq reads them (percent-decoded, unquoted)."""
    found: list[str] = []
    if is_url_dsn(dsn):
        userinfo, query = _url_parts(dsn, free=False)[1:3]
        if userinfo is not None and ":" in dsn[userinfo[0] : userinfo[1]]:
            found.append(urllib.parse.unquote(dsn[userinfo[0] : userinfo[1]].split(":", 1)[1]))
        found += [urllib.parse.unquote(dsn[a:b]) for a, b in query]
    else:
        found += [value for keyword, value, *_ in _keyword_pairs(dsn) or () if keyword.lower() in SECRET_KEYWORDS]
    return tuple(secret for secret in found if secret)


def split_password(dsn: str) -> tuple[str, str | None]:
    """``dsn`` without its password, and the password (``None`` if it has none): for a client
    that takes the password from ``PGPASSWORD``, not from its command line."""
    if not is_url_dsn(dsn):
        pairs = [pair for pair in _keyword_pairs(dsn) or () if pair[0] == "password"]
        if not pairs:
            return dsn, None
        keep, last = [], 0
        for _, _, start, end in pairs:
            keep.append(dsn[last : dsn.rindex("password", last, start)])
            last = end
        return "".join(keep) + dsn[last:], pairs[-1][1]  # libpq: the last one wins
    parts = urllib.parse.urlsplit(dsn)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    password = next((value for key, value in reversed(query) if key == "password"), None)
    if parts.password is not None:  # (a ?password= parameter overrides it, as in libpq)
        password = urllib.parse.unquote(parts.password) if password is None else password
        user, _, host = parts.netloc.rpartition("@")
        parts = parts._replace(netloc=f"{user.split(':', 1)[0]}@{host}")
    if password is None:
        return dsn, None
    query = [(key, value) for key, value in query if key != "password"]
    text = urllib.parse.urlencode(query, safe="/", quote_via=urllib.parse.quote)
    return urllib.parse.urlunsplit(parts._replace(query=text)), password


def _url_parts(text: str, *, free: bool) -> tuple[int, tuple[int, int] | None, list[tuple[int, int]]]:
    """Where a URL DSN at the start of ``text`` ends, the span of its userinfo (``user:password``),
    and the spans of its secret parameters' values. ``free``: the URL is inside other text and
    ends at the first space."""
    end = len(text)
    if free:
        space = re.search(r"\s", text)
        end = space.start() if space else end
    rest = text.index("//") + 2
    # The userinfo ends at the last '@' before the path: libpq stops at the first '@' (so a
    # password holds none raw), Python at the last one; masking to the last hides both readings.
    slash = text.find("/", rest, end)
    at = text.rfind("@", rest, slash if slash != -1 else end)
    userinfo = (rest, at) if at != -1 else None
    query: list[tuple[int, int]] = []
    mark = text.find("?", at + 1 if at != -1 else rest, end)
    if mark != -1:
        position = mark + 1
        while position <= end:
            amp = text.find("&", position, end)
            stop = amp if amp != -1 else end
            name, equals, _ = text[position:stop].partition("=")
            if equals and urllib.parse.unquote(name).strip().lower() in SECRET_KEYWORDS:
                query.append((position + len(name) + 1, stop))
            position = stop + 1
    return end, userinfo, query


def _redact_url(text: str, *, free: bool) -> tuple[str, int]:
    """``text`` (a URL DSN at its start) with its secrets masked, and where the URL ended in it."""
    end, userinfo, query = _url_parts(text, free=free)
    spans = list(query)
    if userinfo is not None:
        colon = text.find(":", userinfo[0], userinfo[1])
        if colon != -1:
            spans.append((colon + 1, userinfo[1]))
    out, last = [], 0
    for a, b in sorted(spans):
        out += [text[last:a], MASK]
        last = b
    out.append(text[last:end])
    return "".join(out), end


def redact(text: str, secret_values: Iterable[str] = ()) -> str:
    """``text`` with the secrets of every DSN in it replaced by ``***``: a URL's ``user:PW@``
    and ``?password=PW``, the keyword form's ``password=PW`` (quoted or not), and their
    ``sslpassword``, ``oauth_client_secret`` and ``scram_*_key`` too. Every surface that may show a
    DSN or a message about one (``Journal.path``, ``repr``, errors, the CLI, the viewer) passes
    it through here. ``secret_values`` (``secrets(dsn)``) are masked wherever they appear, for
    text a driver wrote about the DSN.

    A text that is wholly a DSN is parsed exactly (a value may hold spaces); in other text a DSN
    ends at the first space, and a malformed keyword form is masked from its first secret on."""
    whole = _redact_whole(text)
    text = _redact_free(text if whole is None else whole)  # (the free pass: any other DSN in it)
    for secret in secret_values:
        if len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, MASK)
    return text


def _redact_whole(text: str) -> str | None:
    """``text`` masked when all of it is one DSN (or a malformed keyword form); else ``None``."""
    if is_url_dsn(text):
        return _redact_url(text, free=False)[0]
    pairs = _keyword_pairs(text)
    if pairs:
        out, last = [], 0
        for keyword, _, a, b in pairs:
            if keyword.lower() in SECRET_KEYWORDS:
                out += [text[last:a], MASK]
                last = b
        return "".join(out) + text[last:]
    if malformed_dsn(text) is not None:
        found = _KEYWORD_SECRET.search(text)
        if found is not None:  # everything after the first secret may be part of it
            return text[: found.start(2)] + MASK
    return None


def _redact_free(text: str) -> str:
    """``text`` with the secrets of the DSNs inside it masked (each ends at the first space)."""
    out, position = [], 0
    for found in _URL_START.finditer(text):
        if found.start() < position:
            continue
        masked, end = _redact_url(text[found.start() :], free=True)
        out += [text[position : found.start()], masked]
        position = found.start() + end
    out.append(text[position:])
    text = "".join(out)
    lowered = text.lower()  # (a cheap look first: most texts name no secret keyword at all)
    if not any(keyword in lowered for keyword in SECRET_KEYWORDS):
        return text
    return _KEYWORD_SECRET.sub(lambda m: m.group(1) + MASK, text)
