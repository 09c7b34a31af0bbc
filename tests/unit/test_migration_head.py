"""``runbell.store.migrate.script_head`` reads the newest revision from the migration
files' text so that a start on a current database skips Alembic: it must name the head
Alembic itself finds, or (for a history it cannot read) nothing, never another one."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from runbell.store import migrate


def test_script_head_is_alembics_head() -> None:
    scripts = ScriptDirectory.from_config(migrate.alembic_config("sqlite://"))
    assert migrate.script_head() == scripts.get_current_head()


def _versions(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    "files",
    [
        # A branch: two heads.
        {
            "a.py": 'revision = "a"\ndown_revision = None\n',
            "b.py": 'revision = "b"\ndown_revision = "a"\n',
            "c.py": 'revision = "c"\ndown_revision = "a"\n',
        },
        # A merge revision's tuple of parents is not read: Alembic decides.
        {
            "a.py": 'revision = "a"\ndown_revision = None\n',
            "m.py": 'revision = "m"\ndown_revision = ("a", "b")\n',
        },
        # A parent no file names.
        {"b.py": 'revision = "b"\ndown_revision = "a"\n'},
        # Written another way (annotated).
        {"a.py": 'revision: str = "a"\ndown_revision = None\n'},
    ],
)
def test_a_history_it_cannot_read_surely_gives_no_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]
) -> None:
    monkeypatch.setattr(migrate, "VERSIONS", _versions(tmp_path, files))
    migrate.script_head.cache_clear()
    try:
        assert migrate.script_head() is None
    finally:
        migrate.script_head.cache_clear()
