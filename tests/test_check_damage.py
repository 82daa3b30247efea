"""``journal check`` on a damaged file: whatever bytes the damage left, ``--json`` prints its
document (``ok`` false, with the problems) and the text form its report; exit status 0 or 1,
never a traceback or an "unexpected" error (DESIGN §10).

The damage is done to the file's bytes, as a failing disk or a stray writer would: random byte
ranges overwritten (seeded, so a failure names its case), a truncation, an overwritten header,
and targeted edits of one event's stored data (bytes that are not UTF-8, text that is not JSON).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import journal
from journal.cli import main

SEED = 20261201
CASES = 40
# One event's content, unique in the file: the targeted cases find its bytes and edit them.
MARKER = "M" * 200


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cleanly closed, checkpointed journal with sessions, metas, turns, calls and state."""
    path = tmp_path_factory.mktemp("healthy") / "j.db"
    with journal.open(path) as j:
        for i in range(8):
            session = j.create_session(f"s{i}", meta={"user": f"u{i}"}).id
            turn = j.turn_start(session)
            turn.step_start()
            turn.assistant("", tool_calls=[{"id": "c1", "name": "tool", "arguments": {"n": i}}])
            j.append_many(session, [("user_message", {"content": "x" * 300})] * 10)
            j.set_state(session, {"k": i})
        j.append("s0", "user_message", {"content": MARKER})
        j.checkpoint()
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    return path


def _copy(healthy: Path, tmp_path: Path) -> Path:
    path = tmp_path / "damaged.db"
    shutil.copyfile(healthy, path)
    return path


def _checked(path: Path) -> dict:
    """Run ``check --json`` and ``check``; assert the contract of both; return the document."""
    runner = CliRunner()
    result = runner.invoke(main, ["check", "--json", "--db", str(path)])
    assert result.exit_code in (0, 1), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "unexpected" not in result.stderr and "Traceback" not in result.output
    document = json.loads(result.stdout)
    assert isinstance(document["ok"], bool) and (result.exit_code == 0) is document["ok"]
    assert document["ok"] or document["integrity"] != ["ok"] or document["disagreements"]
    text = runner.invoke(main, ["check", "--db", str(path)])
    assert text.exit_code == result.exit_code, text.output
    assert text.exception is None or isinstance(text.exception, SystemExit), text.exception
    assert "unexpected" not in text.output and "Traceback" not in text.output
    assert text.stdout.splitlines()[-1] == ("ok" if document["ok"] else "PROBLEMS FOUND")
    return document


def _overwrite(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _damage_cases() -> list[list[tuple[int, bytes]]]:
    """Each case: one to three byte ranges of 1-64 random bytes at random offsets (the file's
    size is fixed by the fixture's content; offsets past it are taken modulo its size)."""
    rng = random.Random(SEED)
    return [
        [(rng.randrange(2**32), rng.randbytes(rng.randint(1, 64))) for _ in range(rng.randint(1, 3))]
        for _ in range(CASES)
    ]


@pytest.mark.parametrize("ranges", _damage_cases(), ids=[f"case{i}" for i in range(CASES)])
def test_check_reports_random_damage_as_its_document_never_a_traceback(healthy: Path, tmp_path: Path, ranges) -> None:
    path = _copy(healthy, tmp_path)
    size = path.stat().st_size
    for offset, data in ranges:
        _overwrite(path, offset % size, data)
    _checked(path)


def _marker_offset(path: Path) -> int:
    found = path.read_bytes().find(MARKER.encode())
    assert found > 0, "the marked event's data is in the file"
    return found


@pytest.mark.parametrize(
    "edit, says",
    [
        (b"\xff\xfe", "cannot be read back"),  # not UTF-8: the driver cannot decode the column
        (b"\xc3", "cannot be read back"),  # a UTF-8 sequence cut short
        (b'"}', "cannot be read back"),  # UTF-8, not JSON: the content string closed early
    ],
    ids=["invalid-utf8", "truncated-utf8-sequence", "not-json"],
)
def test_check_reports_an_event_whose_stored_data_cannot_be_decoded(healthy: Path, tmp_path: Path, edit, says) -> None:
    path = _copy(healthy, tmp_path)
    _overwrite(path, _marker_offset(path) + 50, edit)
    document = _checked(path)
    assert document["ok"] is False
    assert any(says in line for line in document["integrity"]), document


def test_check_reports_a_truncated_file(healthy: Path, tmp_path: Path) -> None:
    path = _copy(healthy, tmp_path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)
    assert _checked(path)["ok"] is False


# The magic, the page size, the write version, the page count, user_version, application_id.
@pytest.mark.parametrize("offset", [0, 16, 18, 28, 60, 68], ids=lambda o: f"header-byte-{o}")
def test_check_reports_an_overwritten_header(healthy: Path, tmp_path: Path, offset: int) -> None:
    path = _copy(healthy, tmp_path)
    _overwrite(path, offset, b"\xa5" * 4)
    assert _checked(path)["ok"] is False


@pytest.mark.parametrize("start", [0, 64], ids=["whole-page", "past-the-page-header"])
def test_check_reports_a_page_of_garbage(healthy: Path, tmp_path: Path, start: int) -> None:
    path = _copy(healthy, tmp_path)
    page = _marker_offset(path) // 4096 * 4096  # the page that holds the marked event
    _overwrite(path, page + start, bytes(range(256)) * 16)
    assert _checked(path)["ok"] is False


def test_check_of_the_undamaged_copy_is_ok(healthy: Path, tmp_path: Path) -> None:
    assert _checked(_copy(healthy, tmp_path)) == {"ok": True, "integrity": ["ok"], "disagreements": []}


@pytest.mark.parametrize("edit", [b"\xff\xfe", b'"}'], ids=["invalid-utf8", "not-json"])
def test_the_library_s_check_gives_a_typed_error_for_a_row_it_cannot_decode(
    healthy: Path, tmp_path: Path, edit
) -> None:
    """`Journal.check()` on a damaged row raises CorruptJournal naming the file, never the
    decoder's own UnicodeDecodeError or ValueError; the file is left as it was."""
    path = _copy(healthy, tmp_path)
    _overwrite(path, _marker_offset(path) + 50, edit)
    before = path.read_bytes()
    with (
        journal.open(path, readonly=True) as j,
        pytest.raises(journal.CorruptJournal, match="cannot be read back") as caught,
    ):
        j.check()
    assert str(path) in str(caught.value)
    assert path.read_bytes() == before
