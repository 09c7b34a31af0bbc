"""The layout stays readable: no module grows past ~500 lines without saying why.

The layer rules themselves (faces → flows → store/domain, no cycles) are import-linter
contracts in pyproject.toml, checked by ``lint-imports`` in ``make test``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "runbell"
LIMIT = 520  # "about 500"
# Files whose length is their nature: the schema, and migrations (history, never edited).
EXEMPT = ("store/tables.py", "store/migrations/")
REASON = "# size:"  # a module over the limit says why in its first lines, e.g. "# size: …"


def modules() -> list[Path]:
    return sorted(
        p
        for p in SRC.rglob("*.py")
        if not any(str(p.relative_to(SRC)).startswith(e) for e in EXEMPT)
    )


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_is_over_500_lines_without_a_reason(path: Path) -> None:
    lines = path.read_text().splitlines()
    if len(lines) <= LIMIT:
        return
    head = "\n".join(lines[:40])
    assert REASON in head, (
        f"{path.relative_to(SRC)} has {len(lines)} lines: split it by concept, or say why "
        f"it is one module with a '{REASON} …' comment near its top"
    )
