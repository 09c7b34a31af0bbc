"""Every ``runbell`` command's help in one style (issue 16 row 17): ``UPPER`` placeholders
(never Python types like ``<str>`` or ``{run_id}``), a summary that fits one line of the
command list, help on every option and argument, nothing over 80 columns; and the usage
lines the README writes."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from runbell.cli import main, root
from runbell.cli.specs import Argument, Command, Flag, Group, Option, walk

COMMANDS = list(walk(root))
PATHS = [path for path, _ in COMMANDS]
README = Path(__file__).resolve().parents[2] / "README.md"


def _name(path: tuple[str, ...]) -> str:
    return " ".join(("runbell", *path))


@pytest.fixture
def help_of(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., str]:
    def render(path: tuple[str, ...], columns: int = 80) -> str:
        monkeypatch.setenv("COLUMNS", str(columns))
        code = main([*path, "--help"])
        out, err = capsys.readouterr()
        assert (code, err) == (0, ""), err
        return out

    return render


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(p) for p in PATHS}
    for expected in (
        "report",
        "deliveries list",
        "user login-link",
        "secret-key",
        "hook codex",
        "hook install claude-code",
        "tenant retention set",
        "completion",
    ):
        assert expected in names
    # issue 18: schedule …, delegate, undelegate, grant add|list|revoke, history, claim,
    # supersede, finding; issue 19: tenant machines show|on|off
    assert len(names) == 60


@pytest.mark.parametrize("path", PATHS, ids=_name)
def test_help_is_in_one_style(path: tuple[str, ...], help_of: Callable[..., str]) -> None:
    text = help_of(path)
    name = _name(path)
    assert text.startswith(f"Usage: {name} [OPTIONS]"), text
    assert "<" not in text, f"a Python type as placeholder in `{name} --help`:\n{text}"
    assert "{" not in text, f"a {{name}} placeholder in `{name} --help`:\n{text}"
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, f"lines over 80 columns in `{name} --help`: {wide}"
    # Usage placeholders are UPPER: RUN_ID, EMAIL, [ID]...
    usage = text.splitlines()[0].removeprefix(f"Usage: {name}")
    for word in re.findall(r"[A-Za-z_]+", usage):
        assert word.isupper(), f"`{word}` in the usage line of `{name}`: {usage}"
    assert re.search(r"^Options:\n(.*\n)*  --help +Show this message and exit\.$", text, re.M)


@pytest.mark.parametrize("path", PATHS, ids=_name)
def test_every_parameter_has_help_and_an_upper_placeholder(path: tuple[str, ...]) -> None:
    node = dict(COMMANDS)[path]
    if isinstance(node, Group):
        assert node.help.strip() and node.members, path
        return
    name = _name(path)
    assert node.help.strip(), f"`{name}` has no help"
    for param in node.params:
        assert param.help.strip(), f"`{param.dest}` of `{name}` has no help"
        if isinstance(param, Flag):
            assert all(n.startswith("--") for n in param.names), param.names
        elif isinstance(param, Option):
            assert param.name.startswith("--"), param.name
            # `=` and `:` join the parts of one value: LABEL=URL, KIND:ID.
            assert re.fullmatch(r"[A-Z][A-Z0-9_=:\[\]]*", str(param.metavar)), (name, param.name)
        else:
            assert isinstance(param, Argument)
            assert re.fullmatch(r"[A-Z][A-Z0-9_=]*", str(param.metavar)), (name, param.dest)


@pytest.mark.parametrize("path", [p for p, node in COMMANDS if isinstance(node, Group)], ids=_name)
def test_command_summaries_are_whole_and_fit_the_command_list(
    path: tuple[str, ...], help_of: Callable[..., str]
) -> None:
    """A group lists each command with the first sentence of its help, whole (click used
    to cut a long one with '...'), on one line at 80 columns, and a docstring's line
    breaks never show."""
    group = dict(COMMANDS)[path]
    assert isinstance(group, Group)
    listed = help_of(path).split("Commands:\n", 1)[1].splitlines()
    assert len(listed) == len(group.members), listed
    for line, member in zip(listed, group.members, strict=True):
        assert "\n" not in member.summary and member.summary.endswith("."), member.summary
        assert line.split() == [member.name, *member.summary.split()], line


def test_report_help_is_the_reference(help_of: Callable[..., str]) -> None:
    """The style, to the space: Typer's (click's) as it was, which the README shows."""
    assert help_of(("report",)) == (
        "Usage: runbell report [OPTIONS] RUN_ID STATE\n"
        "\n"
        "  Report a run's state.\n"
        "\n"
        "  The run is created for RUNBELL_OWNER if it does not exist.\n"
        "\n"
        "Arguments:\n"
        "  RUN_ID  your run's id, e.g. ci-$GITHUB_RUN_ID  [required]\n"
        "  STATE   working, completed, failed, cancelled, …  [required]\n"
        "\n"
        "Options:\n"
        "  --title TITLE                the run's title (creates it if new)\n"
        "  --reason REASON              a short public label\n"
        "  --event-id ID                a stable id for this report (retries stay one)\n"
        "  --notify / --no-notify       push when it completes\n"
        "  --summary TEXT               report.summary: what it achieved\n"
        "  --link LABEL=URL             a link in the report (repeatable)\n"
        "  --done-when TEXT             the job: what counts as done\n"
        "  --done-when-operation ID     the job: an operation that must be confirmed\n"
        "                               (repeatable)\n"
        "  --job-link KIND:ID           the job: a linked conversation, message…\n"
        "                               (repeatable)\n"
        "  --depends-on RUN:REQUEST_ID  the job: another run's proposal it depends on\n"
        "                               (:VERSION pins one)\n"
        "  --help                       Show this message and exit.\n"
    )


def test_defaults_env_vars_and_wrapping(help_of: Callable[..., str]) -> None:
    assert "  --limit N          at most N, 1 to 1000  [default: 50]\n" in help_of(
        ("deliveries", "list")
    )
    serve = help_of(("serve",))
    assert "  --demo / --no-demo            a simulated agent run that asks you for\n" in serve
    assert "                                approval  [default: no-demo]\n" in serve
    assert "[default: check]" in " ".join(help_of(("login",)).split())
    source = help_of(("source", "create"))
    assert "command line  [env var: RUNBELL_SIGNING_SECRET]" in source
    assert "  NAME  a name for the source  [required]" in source


@pytest.mark.parametrize("columns", [50, 200])
def test_help_follows_the_terminal_width_up_to_80(
    columns: int, help_of: Callable[..., str]
) -> None:
    narrow_or_wide = help_of(("source", "create"), columns)
    assert max(len(line) for line in narrow_or_wide.splitlines()) <= min(columns, 80)
    if columns > 80:
        assert narrow_or_wide == help_of(("source", "create"), 80)
    else:
        assert narrow_or_wide != help_of(("source", "create"), 80)


def test_usage_names_arguments_as_the_readme_does(help_of: Callable[..., str]) -> None:
    def usage(*path: str) -> str:
        return help_of(path).splitlines()[0]

    assert usage("report") == "Usage: runbell report [OPTIONS] RUN_ID STATE"
    assert usage("deliveries", "replay") == "Usage: runbell deliveries replay [OPTIONS] [ID]..."
    assert usage("user", "login-link") == "Usage: runbell user login-link [OPTIONS] [EMAIL]"
    assert usage("tenant", "retention", "set") == (
        "Usage: runbell tenant retention set [OPTIONS] TABLE=DAYS..."
    )
    assert usage("completion") == "Usage: runbell completion [OPTIONS] [SHELL]"
    assert usage("user") == "Usage: runbell user [OPTIONS] COMMAND [ARGS]..."
    assert "--limit N" in help_of(("deliveries", "list"))


def _readme_commands() -> list[str]:
    """Every `runbell …` the README's "Command line" table writes."""
    text = README.read_text()
    section = text.split("## Command line\n", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("| `runbell")]
    return [m for line in table for m in re.findall(r"`(runbell [^`]+)`", line.split(" | ")[0])]


def test_the_readme_writes_every_command_as_its_help_does() -> None:
    """Each command of the README's table exists, with those options, each followed by
    the placeholder its help shows."""
    written = _readme_commands()
    assert len(written) > 20, written
    seen = set()
    for usage in written:
        words = usage.replace("\\|", "|").split()[1:]
        node: Command | Group = root
        while isinstance(node, Group) and words:
            found = [node.find(w) for w in words[0].split("|")]
            assert all(found), f"{usage}: no command {words[0]!r}"
            if len(found) > 1:  # `tenant retention show|set`: the first one's options
                words[0] = words[0].split("|")[0]
            node = node.find(words.pop(0))  # type: ignore[assignment]
        assert isinstance(node, Command), f"{usage}: names a group, not a command"
        seen.add(node.name)
        options: dict[str, Option | Flag] = {}
        for option in node.options:
            names = option.names if isinstance(option, Flag) else (option.name,)
            options.update(dict.fromkeys(names, option))
        for index, word in enumerate(words):
            name = word.strip("[]…")
            following = words[index + 1] if index + 1 < len(words) else ""
            if not name.startswith("--"):
                continue
            assert name in options, f"{usage}: {name} is no option of `runbell … {node.name}`"
            option = options[name]
            if isinstance(option, Option) and re.match(r"[A-Z]", following):  # a placeholder
                shown = rf"{re.escape(str(option.metavar))}\]*…?"
                assert re.fullmatch(shown, following), f"{usage}: {name} {following}"
    assert {"report", "completion", "login-link", "replay"} <= seen


def test_a_group_without_a_command_shows_its_help_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["user"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("Usage: runbell user [OPTIONS] COMMAND [ARGS]..."), err
    assert "login-link" in err
