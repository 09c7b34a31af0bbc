"""`make test` reads cleanly in a terminal (issue 16 row 17): lint-imports, run the way the
Makefile runs it, prints no logo and no spinner codes, and a broken contract still shows."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from tests.terminal import in_a_terminal

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def lint_imports() -> tuple[dict[str, str], list[str]]:
    """The environment and argv of the Makefile's ``LINT_IMPORTS`` line."""
    line = re.search(r"^LINT_IMPORTS\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert line, "the Makefile runs lint-imports through LINT_IMPORTS"
    words = shlex.split(line.group(1).replace("$(BIN)", str(BIN)))
    env = dict(os.environ)
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def test_lint_imports_prints_no_logo_and_no_spinner() -> None:
    env, argv = lint_imports()
    code, text = in_a_terminal(argv, env, cwd=ROOT, keep_escapes=True)
    assert code == 0, text
    assert "\x1b" not in text, f"terminal control codes in make test's output: {text!r}"
    assert "Import Linter" not in text
    assert re.search(r"Contracts: \d+ kept, 0 broken", text), text


def test_a_broken_contract_is_still_printed(tmp_path: Path) -> None:
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "runbell"\n\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "The CLI never names the domain"\n'
        'type = "forbidden"\n'
        'source_modules = ["runbell.cli"]\n'
        'forbidden_modules = ["runbell.domain"]\n'
    )
    env, argv = lint_imports()
    code, text = in_a_terminal([*argv, str(config)], env, cwd=ROOT, keep_escapes=True)
    assert code != 0, text
    assert "\x1b" not in text
    assert "The CLI never names the domain BROKEN" in text, text
    assert "runbell.cli" in text.split("Broken contracts", 1)[1], text
