"""Every ``runbell`` command's help in one style (issue 16 row 17): ``UPPER`` placeholders
(never Python types like ``<str>`` or ``{run_id}``), a summary that fits one line of the
command list, help on every option and argument, nothing over 80 columns."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from runbell.cli import app

ROOT = get_command(app)


# Typer vendors click (typer._click): commands are told apart by what they have.
def _walk(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    if hasattr(command, "commands"):
        for name, sub in sorted(command.commands.items()):
            yield from _walk(sub, (*path, name))


COMMANDS = list(_walk(ROOT))


def _command(path: tuple[str, ...]) -> Any:
    command: Any = ROOT
    for name in path:
        command = command.commands[name]
    return command


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, prog_name="runbell")
    assert result.exit_code == 0, result.output
    return result.output


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(p) for p in COMMANDS}
    for expected in ("report", "deliveries list", "user login-link", "secret-key", "hook codex"):
        assert expected in names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "runbell")
def test_help_is_in_one_style(path: tuple[str, ...]) -> None:
    text = _help(path)
    name = " ".join(("runbell", *path))
    assert text.startswith(f"Usage: {name}"), text
    assert "<" not in text, f"a Python type as placeholder in `{name} --help`:\n{text}"
    assert "{" not in text, f"a {{name}} placeholder in `{name} --help`:\n{text}"
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, f"lines over 80 columns in `{name} --help`: {wide}"
    # Usage placeholders are UPPER: RUN_ID, EMAIL, [IDS]...
    usage = text.splitlines()[0].removeprefix(f"Usage: {name}")
    for word in re.findall(r"[A-Za-z_]+", usage):
        assert word.isupper(), f"`{word}` in the usage line of `{name}`: {usage}"


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "runbell")
def test_every_parameter_has_help_and_an_upper_placeholder(path: tuple[str, ...]) -> None:
    command = _command(path)
    name = " ".join(("runbell", *path))
    for param in command.params:
        label = "/".join(param.opts)
        if param.param_type_name == "option":
            assert (param.help or "").strip(), f"`{label}` of `{name}` has no help"
            if not param.is_flag:
                assert param.metavar and re.fullmatch(r"[A-Z][A-Z0-9_=\[\]]*", param.metavar), (
                    f"`{label}` of `{name}` shows `{param.metavar}`"
                )
        else:
            assert getattr(param, "help", None), f"argument {label} of `{name}` has no help"
            assert param.metavar and re.fullmatch(r"[A-Z][A-Z0-9_=]*", param.metavar), label


def test_command_summaries_fit_the_command_list() -> None:
    """A group lists each command with the first sentence of its help, whole (click cuts a
    long one with '...'), and a docstring's line breaks never show."""
    for path in COMMANDS:
        command = _command(path)
        if not hasattr(command, "commands"):
            continue
        text = _help(path)
        listed = text.split("Commands:\n", 1)[1]
        for line in listed.splitlines():
            assert not line.rstrip().endswith("..."), f"a cut summary in `{path}`: {line}"
        for sub in command.commands.values():
            summary = sub.get_short_help_str(limit=80)
            assert "\n" not in summary and not summary.endswith("..."), (sub.name, summary)


def test_usage_names_arguments_as_the_readme_does() -> None:
    assert _help(("report",)).splitlines()[0] == "Usage: runbell report [OPTIONS] RUN_ID STATE"
    first = _help(("deliveries", "replay")).splitlines()[0]
    assert first == "Usage: runbell deliveries replay [OPTIONS] [ID]..."
    assert "--limit N" in _help(("deliveries", "list"))


def test_a_group_without_a_command_shows_its_help() -> None:
    result = CliRunner().invoke(app, ["user"], prog_name="runbell")
    assert result.exit_code == 2
    usage = "Usage: runbell user [OPTIONS] COMMAND [ARGS]..."
    assert result.output.startswith(usage), result.output
    assert "login-link" in result.output
