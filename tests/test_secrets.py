"""G14 for secrets: a DSN's password is never shown (DESIGN §16). ``Journal.path``, every
``repr``, every error (a failed connect, ``NotAJournal``, ``SchemaTooNew``, and the driver's
text they are raised from), the CLI's output and its one-line errors show a DSN through
``journal.store.target.redact``. libpq's keyword form opens the database (or is refused with a
typed error), never a file named after its password.

The server's tests run on a throwaway server (trust authentication: any password connects,
which is all a test of what is shown needs) as a role that has a password."""

from __future__ import annotations

import asyncio
import os
import traceback
import urllib.parse
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import journal
import journal.aio
from journal.cli import main as cli
from journal.store.target import (
    MASK,
    is_dsn,
    is_keyword_dsn,
    is_url_dsn,
    malformed_dsn,
    redact,
    secrets,
    split_password,
)
from tests.raw import Raw

MARK = "s3cr3t"  # every password below holds it: no output may
PASSWORD = f"Zq9-{MARK}!pa55"
QUOTED_PASSWORD = f"Zq9 {MARK}'x\\y"  # a space, a quote and a backslash: the keyword form must quote it


def _quote(value: str) -> str:
    """A libpq keyword value, quoted as libpq reads it."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def assert_hidden(text: str) -> None:
    assert MARK not in text, text
    assert urllib.parse.quote(PASSWORD, safe="") not in text, text


# -- the redaction function, table-driven ----------------------------------------------------------

REDACTED = [
    ("url", f"postgresql://bot:{PASSWORD}@db.internal:5432/agents", "postgresql://bot:***@db.internal:5432/agents"),
    ("url-short-scheme", f"postgres://bot:{PASSWORD}@db/agents", "postgres://bot:***@db/agents"),
    ("url-no-user", f"postgres://:{PASSWORD}@db", "postgres://:***@db"),
    ("url-empty-password", "postgresql://bot:@db/agents", "postgresql://bot:***@db/agents"),
    (
        "url-percent-encoded",
        f"postgresql://bot:{urllib.parse.quote(PASSWORD, safe='')}@db/a",
        "postgresql://bot:***@db/a",
    ),
    ("url-raw-at-in-password", f"postgresql://bot:p@{MARK}@db/a", "postgresql://bot:***@db/a"),
    (
        "url-ipv6",
        f"postgresql://bot:{PASSWORD}@[::1]:5432/a?sslmode=require",
        "postgresql://bot:***@[::1]:5432/a?sslmode=require",
    ),
    ("url-many-hosts", f"postgresql://bot:{PASSWORD}@h1:5432,h2:5433/a", "postgresql://bot:***@h1:5432,h2:5433/a"),
    (
        "url-password-parameter",
        f"postgresql://bot@db/a?password={PASSWORD}&sslmode=x",
        "postgresql://bot@db/a?password=***&sslmode=x",
    ),
    ("url-encoded-parameter-name", f"postgresql:///a?pass%77ord={MARK}", "postgresql:///a?pass%77ord=***"),
    ("url-sslpassword", f"postgresql:///a?sslpassword={MARK}", "postgresql:///a?sslpassword=***"),
    ("url-no-password", "postgresql://bot@/agents?host=/run", "postgresql://bot@/agents?host=/run"),
    ("keyword", f"host=/run dbname=a password={PASSWORD}", "host=/run dbname=a password=***"),
    ("keyword-quoted", f"host=/run password={_quote(QUOTED_PASSWORD)} user=bot", "host=/run password=*** user=bot"),
    ("keyword-spaced", f"host=/run password = {_quote(QUOTED_PASSWORD)}", "host=/run password = ***"),
    ("keyword-escaped-space", f"host=/run password=a\\ {MARK}", "host=/run password=***"),
    ("keyword-oauth-secret", f"host=/run oauth_client_secret={MARK}", "host=/run oauth_client_secret=***"),
    ("keyword-no-password", "host=/run dbname=a", "host=/run dbname=a"),
    ("file", "/var/lib/bot/journal.db", "/var/lib/bot/journal.db"),
    # In other text a DSN ends at the first space.
    (
        "message-url",
        f"cannot connect to postgresql://bot:{PASSWORD}@db/a: refused",
        "cannot connect to postgresql://bot:***@db/a: refused",
    ),
    (
        "message-keyword",
        f"at host=/run password={_quote(QUOTED_PASSWORD)} dbname=a: no",
        "at host=/run password=*** dbname=a: no",
    ),
    (
        "message-two-urls",
        f"postgres://a:{MARK}@x and postgres://b:{MARK}@y",
        "postgres://a:***@x and postgres://b:***@y",
    ),
    # A malformed keyword form is masked from its first secret on (libpq would read "a" and fail on the rest).
    ("malformed-keyword", f"host=/run password=a {MARK} dbname=x", "host=/run password=***"),
    ("upper-case-scheme", f"POSTGRESQL://bot:{PASSWORD}@db/a", "POSTGRESQL://bot:***@db/a"),
]


@pytest.mark.parametrize(("text", "shown"), [case[1:] for case in REDACTED], ids=[case[0] for case in REDACTED])
def test_g14_redact_masks_every_dsn_secret_and_nothing_else(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert MARK not in redact(text)
    assert redact(redact(text)) == redact(text)  # masking twice changes nothing


KINDS = [
    ("url", "postgresql://bot@db/agents", "url"),
    ("short-url", "postgres://db", "url"),
    ("keyword", "host=/run dbname=agents", "keyword"),
    ("keyword-one-pair", "dbname=agents", "keyword"),
    ("keyword-quoted", "host='/run dir' password='a b'", "keyword"),
    ("file", "journal.db", "file"),
    ("file-with-equals-in-a-directory", "./dbname=agents", "file"),
    ("file-unknown-keyword-first", "a=b", "file"),
    ("upper-case-scheme", "POSTGRESQL://db/a", "malformed"),
    ("one-slash", "postgresql:/db", "malformed"),
    ("unquoted-space", "host=/run password=a b", "malformed"),
    ("unterminated-quote", "host=/run password='a b", "malformed"),
    ("unknown-keyword", "host=/run pasword=x", "malformed"),
    ("upper-case-keyword", "PASSWORD=x host=/run", "malformed"),
]


@pytest.mark.parametrize(("target", "kind"), [case[1:] for case in KINDS], ids=[case[0] for case in KINDS])
def test_g13_a_target_is_a_url_a_keyword_dsn_a_file_or_refused(target: str, kind: str) -> None:
    assert is_url_dsn(target) == (kind == "url")
    assert is_keyword_dsn(target) == (kind == "keyword")
    assert is_dsn(target) == (kind in ("url", "keyword"))
    reason = malformed_dsn(target)
    assert (reason is not None) == (kind == "malformed")
    if reason is not None:
        assert target not in reason and "x" not in reason.split(":")[-1].split()  # never quoted


def test_g14_secrets_and_split_password_read_the_password_as_libpq_does() -> None:
    encoded = urllib.parse.quote(PASSWORD, safe="")
    assert secrets(f"postgresql://bot:{encoded}@db/a") == (PASSWORD,)
    assert secrets(f"host=/run password={_quote(QUOTED_PASSWORD)}") == (QUOTED_PASSWORD,)
    assert secrets("postgresql://bot@db/a") == () == secrets("journal.db")
    assert split_password(f"postgresql://bot:{encoded}@db/a?host=/run") == ("postgresql://bot@db/a?host=/run", PASSWORD)
    assert split_password(f"postgresql://bot@db/a?password={encoded}&x=1") == ("postgresql://bot@db/a?x=1", PASSWORD)
    kept, password = split_password(f"host=/run password={_quote(QUOTED_PASSWORD)} dbname=a")
    assert password == QUOTED_PASSWORD and MARK not in kept and is_keyword_dsn(kept)
    assert split_password("host=/run dbname=a") == ("host=/run dbname=a", None)
    # A driver's message that quotes the password itself is masked too, given the DSN's secrets.
    said = f"bad value <{QUOTED_PASSWORD}>"
    assert redact(said, secrets(f"password={_quote(QUOTED_PASSWORD)}")) == f"bad value <{MASK}>"


_PASSWORDS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20).map(lambda s: MARK + s)


@given(_PASSWORDS, st.sampled_from(["postgresql", "postgres"]))
def test_g14_no_url_password_survives_redaction(password: str, scheme: str) -> None:
    encoded = urllib.parse.quote(password, safe="")
    for dsn in (f"{scheme}://bot:{encoded}@db:5432/a", f"{scheme}://bot@db/a?sslmode=x&password={encoded}"):
        for text in (dsn, f"cannot connect to {dsn}: refused", repr(dsn)):
            assert MARK not in redact(text)
        assert secrets(dsn) == (password,)


@given(_PASSWORDS, st.booleans())
def test_g14_no_keyword_password_survives_redaction(password: str, quoted: bool) -> None:
    value = _quote(password) if quoted or any(c in password for c in " '\\") else password
    dsn = f"host=/run password={value} dbname=a"
    assert is_keyword_dsn(dsn) and secrets(dsn) == (password,)
    assert MARK not in redact(dsn)
    assert MARK not in redact(f"error at {dsn}: no")


# -- on a server: every surface ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def role(pg_server) -> str:
    """A role with a password (trust authentication lets it in whatever password it gives)."""
    name = f"bot_{uuid.uuid4().hex[:8]}"
    with Raw(pg_server.dsn("contract")) as raw:
        raw.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{PASSWORD}'")
        raw.execute(f"GRANT CREATE ON DATABASE contract TO {name}")  # the torture campaign makes its schemas
    return name


@pytest.fixture
def dsns(pg_server, role: str) -> dict[str, str]:
    """One new schema owned by ``role``, named by each DSN form, each carrying a password."""
    schema = f"s_{uuid.uuid4().hex[:10]}"
    with Raw(pg_server.dsn("contract")) as raw:
        raw.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {role}")
    host, encoded = pg_server.socket_dir, urllib.parse.quote(PASSWORD, safe="")
    path = f"options=-csearch_path%3D{schema}"
    return {
        "url": f"postgresql://{role}:{encoded}@/contract?host={host}&{path}",
        "url-parameter": f"postgresql://{role}@/contract?host={host}&password={encoded}&{path}",
        "keyword": f"host={host} dbname=contract user={role} password={PASSWORD} options='-csearch_path={schema}'",
        "keyword-quoted": (
            f"host={host} dbname=contract user={role} password={_quote(QUOTED_PASSWORD)} "
            f"options='-csearch_path={schema}'"
        ),
    }


FORMS = ["url", "url-parameter", "keyword", "keyword-quoted"]


def _error_text(exc: BaseException) -> str:
    """Everything an error can show: its message, repr, args and the traceback with its causes."""
    return "\n".join([str(exc), repr(exc), repr(exc.args), "".join(traceback.format_exception(exc))])


def _broken(dsn: str, how: str) -> str:
    """``dsn`` naming a port nothing listens on, or a database that does not exist."""
    if dsn.startswith("postgresql://"):
        return dsn.replace("/contract?", "/nope?") if how == "database" else dsn + "&port=1"
    return dsn.replace("dbname=contract", "dbname=nope") if how == "database" else dsn + " port=1"


@pytest.mark.parametrize("form", FORMS)
def test_g14_a_journal_on_a_server_shows_its_dsn_without_the_password(
    dsns: dict[str, str], form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a DSN taken for a file would appear here
    dsn = dsns[form]
    with journal.open(dsn) as j:
        j.create_session("s", meta={"team": "ops"})
        assert MASK in j.path and j.path == redact(dsn)
        for text in (j.path, repr(j), repr(j._store), str(vars(j._store).get("path"))):
            assert_hidden(text)
    with journal.open(dsn, readonly=True) as j:  # the keyword form opened the database: the session is there
        assert [s.id for s in j.sessions()] == ["s"]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("how", ["port", "database"])
def test_g14_a_failed_connect_names_the_dsn_without_the_password(dsns: dict[str, str], form: str, how: str) -> None:
    with pytest.raises(journal.JournalIOError, match="cannot connect") as caught:
        journal.open(_broken(dsns[form], how))
    assert_hidden(_error_text(caught.value))


@pytest.mark.parametrize("form", FORMS)
def test_g14_not_a_journal_and_schema_too_new_name_the_dsn_without_the_password(
    dsns: dict[str, str], form: str
) -> None:
    dsn, raw_dsn = dsns[form], dsns["url"]  # (every form names the same schema; Raw takes a URL)
    with Raw(raw_dsn) as raw:
        raw.execute("CREATE TABLE orders (id int)")
    with pytest.raises(journal.NotAJournal) as caught:
        journal.open(dsn)
    assert MASK in str(caught.value)
    assert_hidden(_error_text(caught.value))
    with Raw(raw_dsn) as raw:
        raw.execute("DROP TABLE orders")
    journal.open(dsn).close()
    with Raw(raw_dsn) as raw:
        raw.execute("UPDATE journal_meta SET schema_version = schema_version + 1")
    with pytest.raises(journal.SchemaTooNew) as too_new:
        journal.open(dsn)
    assert MASK in str(too_new.value)
    assert_hidden(_error_text(too_new.value))


def _run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args, env=env)
    try:
        stderr = result.stderr
    except ValueError:  # (an older click that mixes stderr into output)
        stderr = ""
    return result.exit_code, result.output + stderr


@pytest.mark.parametrize("form", FORMS)
def test_g14_the_cli_never_prints_the_password(dsns: dict[str, str], form: str) -> None:
    dsn = dsns[form]
    code, out = _run(["init", "--db", dsn])
    assert code == 0 and MASK in out, out
    assert_hidden(out)
    with journal.open(dsn) as j:
        j.create_session("s", meta={"team": "ops"})
        j.append("s", "user_message", {"content": "hello"})
    for args in (["sessions"], ["sessions", "--json"], ["stats"], ["stats", "--json"], ["scan", "--json"], ["scan"]):
        for given_as in ("--db", "JOURNAL_DB"):
            argv, env = (args + ["--db", dsn], None) if given_as == "--db" else (args, {"JOURNAL_DB": dsn})
            code, out = _run(argv, env)
            assert code == 0, out
            assert_hidden(out)
    for broken in (_broken(dsn, "port"), _broken(dsn, "database")):
        code, out = _run(["scan", "--db", broken])
        assert code == 1 and out.startswith("journal: ") and "cannot connect" in out, out
        assert_hidden(out)
        code, out = _run(["sessions"], {"JOURNAL_DB": broken})
        assert code == 1
        assert_hidden(out)


def test_g14_a_malformed_dsn_is_refused_unquoted_and_never_becomes_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for target in (
        f"host=/nowhere password=a {MARK}",
        f"host=/nowhere pasword={MARK}",
        f"POSTGRESQL://bot:{MARK}@db/a",
    ):
        with pytest.raises(journal.InvalidArgument) as caught:
            journal.open(target)
        assert_hidden(_error_text(caught.value))
        for args in (["init", "--db", target], ["scan", "--db", target]):
            code, out = _run(args)
            assert code != 0 and out.startswith("journal: "), out
            assert_hidden(out)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("form", ["url", "keyword-quoted"])
def test_g14_the_async_face_shows_the_dsn_without_the_password(dsns: dict[str, str], form: str) -> None:
    dsn = dsns[form]

    async def main() -> None:
        aj = journal.aio.open(dsn)
        assert_hidden(repr(aj) + aj.path)
        async with aj:
            await aj.create_session("s")
            assert_hidden(repr(aj) + aj.path)
            assert MASK in aj.path
        assert_hidden(repr(aj))
        with pytest.raises(journal.JournalIOError) as caught:
            async with journal.aio.open(_broken(dsn, "port")):
                pass
        assert_hidden(_error_text(caught.value))

    asyncio.run(main())


@pytest.mark.parametrize("form", ["url", "keyword"])
def test_g14_adapters_that_open_a_dsn_do_not_show_its_password(dsns: dict[str, str], form: str) -> None:
    dsn = dsns[form]
    shown: list[str] = []
    langgraph = pytest.importorskip("journal.adapters.langgraph", reason="langgraph is not installed")
    saver = langgraph.JournalSaver(dsn)
    shown += [repr(saver), repr(saver.journal), saver.journal.path]
    saver.close()
    openai_agents = pytest.importorskip("journal.adapters.openai_agents", reason="openai-agents is not installed")
    session = openai_agents.JournalSession("chat", dsn)
    shown += [repr(session), repr(session.journal)]
    session.close()
    claude = pytest.importorskip("journal.adapters.claude", reason="claude-agent-sdk is not installed")
    store = claude.JournalSessionStore(dsn)
    shown += [repr(store), repr(store._journal)]
    store.close()
    for text in shown:
        assert_hidden(text)


def test_g14_torture_on_a_keyword_dsn_never_prints_the_password(dsns: dict[str, str], tmp_path: Path) -> None:
    code, out = _run(["torture", "--db", dsns["keyword"], "--trials", "2", "--jobs", "1", "--workdir", str(tmp_path)])
    assert "journal torture on PostgreSQL" in out and code == 0, out
    assert_hidden(out)
    code, out = _run(
        ["torture", "--db", dsns["url"], "--trials", "1", "--jobs", "1", "--json", "--workdir", str(tmp_path)]
    )
    assert code == 0, out
    assert_hidden(out)
