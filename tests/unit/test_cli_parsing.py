"""The command-line layer under ``runbell`` (runbell.cli.specs and runbell.cli.parsing):
each kind of parameter, the rules scripts rely on (``--opt=value``, ``--``, the last value
wins, flag pairs, the environment), and every usage error as a person sees it: one
``runbell: …`` line, a ``hint:`` naming the command's help, exit 2 (3 for the commands
scripts call). On a small tree of its own, then on runbell's real commands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from runbell.cli import common, main, root
from runbell.cli.parsing import Help, parse, run
from runbell.cli.specs import Argument, Command, Flag, Group, Option, path

CALLS: list[dict[str, Any]] = []


def _positive(value: int) -> None:
    if value < 1:
        raise common.BadParameter("must be 1 or more")


TOOL = Group("tool", "A tool for these tests.")


@TOOL.command(
    Argument("first", "the first item"),
    Argument("rest", "more items", metavar="ITEM", repeat=True),
    Option("--name", "a name", metavar="NAME"),
    Option("--count", "how many", metavar="N", type=int, check=_positive),
    Option("--ratio", "a ratio", metavar="R", type=float),
    Option("--where", "a path", metavar="PATH", type=path),
    Option("--tag", "a tag (repeatable)", metavar="TAG", repeat=True),
    Option("--secret", "a secret", metavar="SECRET", envvar="TOOL_TEST_SECRET"),
    Flag("--json", "JSON out", dest="as_json"),
    Flag("--notify/--no-notify", "push or not"),
    Flag("--check/--no-check", "check first"),
)
def go(
    first: str,
    rest: list[str] | None = None,
    name: str | None = None,
    count: int = 1,
    ratio: float | None = None,
    where: Path | None = None,
    tag: list[str] | None = None,
    secret: str | None = None,
    as_json: bool = False,
    notify: bool | None = None,
    check: bool = True,
) -> None:
    """Go somewhere."""
    CALLS.append(dict(locals()))


@TOOL.command(Option("--tenant", "required, as it has no default", metavar="TENANT"))
def need(tenant: str) -> None:
    """Need a tenant."""


@TOOL.command(Argument("code", "the exit code", type=int))
def end(code: int) -> None:
    """End with this code."""
    if code == 130:
        raise KeyboardInterrupt
    if code == 99:
        raise EOFError
    raise common.Exit(code)


def read(*argv: str) -> dict[str, Any]:
    command, kwargs = parse(TOOL, argv, "tool")
    assert command.name == "go"
    return kwargs


DEFAULTS = {
    "first": "a",
    "rest": None,
    "name": None,
    "count": 1,
    "ratio": None,
    "where": None,
    "tag": None,
    "secret": None,
    "as_json": False,
    "notify": None,
    "check": True,
}


def refused(capsys: pytest.CaptureFixture[str], *argv: str, tree: Group = TOOL) -> list[str]:
    """The usage error's lines on stderr (nothing on stdout), checked to be exit 2."""
    code = run(tree, argv, tree.name)
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), (code, out, err)
    return err.splitlines()


@pytest.fixture(autouse=True)
def _no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOL_TEST_SECRET", raising=False)
    CALLS.clear()


def test_nothing_given_is_every_default() -> None:
    assert read("go", "a") == DEFAULTS


def test_every_kind_of_parameter() -> None:
    got = read(
        "go", "a", "b", "--name", "n", "c", "--count", "3", "--ratio", "0.5", "--where",
        "x/y", "--tag", "t1", "--tag", "t2", "--json", "--no-notify", "--no-check",
    )  # fmt: skip
    assert got == {
        **DEFAULTS,
        "rest": ["b", "c"],
        "name": "n",
        "count": 3,
        "ratio": 0.5,
        "where": Path("x/y"),
        "tag": ["t1", "t2"],
        "as_json": True,
        "notify": False,
        "check": False,
    }


def test_run_calls_the_function_with_them() -> None:
    assert run(TOOL, ["go", "a", "--notify", "--tag", "x"], "tool") == 0
    assert CALLS == [{**DEFAULTS, "notify": True, "tag": ["x"]}]


def test_option_equals_value() -> None:
    assert read("go", "a", "--name=n=m", "--count=7")["name"] == "n=m"
    assert read("go", "a", "--count=7")["count"] == 7
    assert read("go", "a", "--name=")["name"] == ""


def test_an_options_value_is_the_next_word_whatever_it_is() -> None:
    assert read("go", "a", "--name", "--json")["name"] == "--json"
    assert read("go", "a", "--name", "--help")["name"] == "--help"
    assert read("go", "a", "--name", "-")["name"] == "-"


def test_double_dash_ends_the_options() -> None:
    got = read("go", "--", "--name", "x", "--json")
    assert (got["first"], got["rest"], got["name"], got["as_json"]) == (
        "--name",
        ["x", "--json"],
        None,
        False,
    )
    assert read("go", "-")["first"] == "-"  # a lone dash is a value


def test_the_last_value_wins_unless_the_option_repeats() -> None:
    got = read("go", "a", "--name", "1", "--name", "2", "--tag", "1", "--tag", "2")
    assert (got["name"], got["tag"]) == ("2", ["1", "2"])


def test_flag_pairs_the_last_one_wins() -> None:
    assert read("go", "a", "--notify")["notify"] is True
    assert read("go", "a", "--notify", "--no-notify")["notify"] is False
    assert read("go", "a", "--no-check", "--check")["check"] is True


def test_a_flag_takes_no_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "go", "a", "--json=1") == [
        "runbell: option '--json' does not take a value",
        "hint: tool go --help",
    ]


def test_an_unknown_option_names_close_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "go", "a", "--nmae", "x") == [
        "runbell: no such option: --nmae (Possible options: --name)",
        "hint: tool go --help",
    ]
    assert refused(capsys, "go", "a", "--bogus")[0] == "runbell: no such option: --bogus"
    assert refused(capsys, "go", "a", "-h")[0] == "runbell: no such option: -h"
    assert refused(capsys, "go", "a", "-5")[0] == "runbell: no such option: -5"
    # Control characters from the command line are never echoed raw to the terminal.
    assert refused(capsys, "go", "a", "--x\x1b[2J")[0] == "runbell: no such option: --x\\x1b[2J"


def test_a_missing_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "go", "a", "--name")[0] == (
        "runbell: option '--name' requires an argument"
    )


def test_a_missing_argument_or_required_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "go") == ["runbell: missing argument 'FIRST'", "hint: tool go --help"]
    assert refused(capsys, "need") == [
        "runbell: missing option '--tenant'",
        "hint: tool need --help",
    ]


def test_a_value_that_is_no_number(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "go", "a", "--count", "x")[0] == (
        "runbell: invalid value for '--count': 'x' is not a whole number"
    )
    assert refused(capsys, "go", "a", "--count", "1.5")[0] == (
        "runbell: invalid value for '--count': '1.5' is not a whole number"
    )
    assert refused(capsys, "go", "a", "--ratio", "half")[0] == (
        "runbell: invalid value for '--ratio': 'half' is not a number"
    )
    assert refused(capsys, "end", "x")[0] == (
        "runbell: invalid value for 'CODE': 'x' is not a whole number"
    )


def test_a_check_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "go", "a", "--count=0")[0] == (
        "runbell: invalid value for '--count': must be 1 or more"
    )


def test_words_left_over(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "need", "--tenant", "t", "x", "y") == [
        "runbell: got unexpected extra argument(s) (x y)",
        "hint: tool need --help",
    ]


def test_the_first_problem_in_the_order_given_is_the_one_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Options given come first (in their order), then the arguments, then the options not
    given; the words left over last."""
    assert "'--ratio'" in refused(capsys, "go", "--ratio", "x", "--count", "y")[0]
    assert "'--count'" in refused(capsys, "go", "--count", "y", "--ratio", "x")[0]
    assert "missing argument" in refused(capsys, "go")[0]
    assert "'--count'" in refused(capsys, "go", "--count", "0")[0]


def test_the_environment_when_the_option_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    assert read("go", "a")["secret"] is None
    monkeypatch.setenv("TOOL_TEST_SECRET", "")
    assert read("go", "a")["secret"] is None  # empty is unset
    monkeypatch.setenv("TOOL_TEST_SECRET", "from-env")
    assert read("go", "a")["secret"] == "from-env"
    assert read("go", "a", "--secret", "given")["secret"] == "given"


def test_help_wins_over_every_problem_but_an_unknown_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (["go", "--help"], ["go", "--count", "x", "--help", "extra"], ["need", "--help"]):
        with pytest.raises(Help):
            parse(TOOL, argv, "tool")
    assert refused(capsys, "go", "--help", "--bogus")[0] == "runbell: no such option: --bogus"
    assert refused(capsys, "go", "--help=yes")[0] == (
        "runbell: option '--help' does not take a value"
    )


def test_a_group_without_a_command_shows_its_help_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(TOOL, [], "tool") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("Usage: tool [OPTIONS] COMMAND [ARGS]...\n\n  A tool for these tests.")
    assert "\nCommands:\n  go    Go somewhere.\n  need  Need a tenant.\n" in err


def test_a_groups_help_and_its_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(TOOL, ["--help", "go"], "tool") == 0  # the group's help, not go's
    assert capsys.readouterr().out.startswith("Usage: tool [OPTIONS] COMMAND")
    assert refused(capsys, "goo") == [
        "runbell: no such command 'goo'. Did you mean 'go'?",
        "hint: tool --help",
    ]
    assert refused(capsys, "--") == ["runbell: missing command", "hint: tool --help"]
    assert refused(capsys, "--name", "go")[0] == "runbell: no such option: --name"


def test_how_a_command_ends(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(TOOL, ["end", "5"], "tool") == 5  # common.Exit
    assert run(TOOL, ["end", "130"], "tool") == 130  # Ctrl-C: quietly
    assert capsys.readouterr().err == ""
    assert run(TOOL, ["end", "99"], "tool") == 2  # the end of input
    assert capsys.readouterr().err == "\nrunbell: aborted\n"


def test_a_declaration_must_match_its_function() -> None:
    def f(a: str, b: str = "") -> None:
        """F."""

    Command(f, [Argument("a", "a"), Option("--b", "b")])
    with pytest.raises(TypeError, match="declares"):
        Command(f, [Argument("a", "a")])
    with pytest.raises(TypeError, match="declares"):
        Command(f, [Argument("a", "a"), Option("--b", "b"), Option("--c", "c")])


def test_the_prompt(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    answers = iter(["", "", "typed"])
    monkeypatch.setattr("builtins.input", lambda _: next(answers))
    assert common.prompt("URL", default="http://x") == "http://x"
    assert common.prompt("Key") == "typed"  # asked again: no default
    assert capsys.readouterr().out == "URL [http://x]:Key:Key:"

    def eof(_: str) -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", eof)
    with pytest.raises(common.Exit) as ended:
        common.prompt("Owner", default="")
    assert ended.value.code == 2
    assert capsys.readouterr().err == "runbell: aborted\n"


# --- on runbell's own commands -----------------------------------------------------------


def runbell(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert out == ""
    return code, err.splitlines()


def test_commands_scripts_call_exit_3_on_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert runbell(capsys, "report", "ci-1") == (
        3,
        ["runbell: missing argument 'STATE'", "hint: runbell report --help"],
    )
    assert runbell(capsys, "wait", "ci-1", "--timeout", "soon")[0] == 3
    assert runbell(capsys, "login", "--check=yes")[0] == 3
    assert runbell(capsys, "user", "add", "x@example.com") == (
        2,
        ["runbell: missing option '--tenant'", "hint: runbell user add --help"],
    )


@pytest.mark.parametrize("limit", ["0", "1001", "-3"])
def test_deliveries_limit_is_1_to_1000(capsys: pytest.CaptureFixture[str], limit: str) -> None:
    assert runbell(capsys, "deliveries", "list", "--tenant", "t", f"--limit={limit}") == (
        2,
        [
            "runbell: invalid value for '--limit': must be 1 to 1000",
            "hint: runbell deliveries list --help",
        ],
    )


def test_deliveries_limit_bounds_are_accepted() -> None:
    for limit in ("1", "1000"):
        _, kwargs = parse(root, ["deliveries", "list", "--tenant", "t", "--limit", limit], "r")
        assert kwargs["limit"] == int(limit)
    assert parse(root, ["deliveries", "list", "--tenant", "t"], "r")[1]["limit"] == 50


def test_source_signing_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["source", "create", "openai", "--tenant", "t"]
    monkeypatch.delenv("RUNBELL_SIGNING_SECRET", raising=False)
    assert parse(root, argv, "runbell")[1]["signing_secret"] is None
    monkeypatch.setenv("RUNBELL_SIGNING_SECRET", "whsec_env")
    assert parse(root, argv, "runbell")[1]["signing_secret"] == "whsec_env"
    given = parse(root, [*argv, "--signing-secret", "whsec_arg"], "runbell")[1]
    assert given["signing_secret"] == "whsec_arg"


def test_tenant_policy_takes_a_readable_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text("")
    kwargs = parse(root, ["tenant", "policy", str(rules), "--tenant", "t"], "runbell")[1]
    assert kwargs == {"file": rules, "tenant": "t"}

    def refusal(file: Path) -> list[str]:
        code, lines = runbell(capsys, "tenant", "policy", str(file), "--tenant", "t")
        assert code == 2 and lines[1] == "hint: runbell tenant policy --help", lines
        return lines

    assert refusal(tmp_path / "none.toml")[0] == (
        f"runbell: invalid value for 'FILE': file '{tmp_path}/none.toml' does not exist"
    )
    assert refusal(tmp_path)[0] == (
        f"runbell: invalid value for 'FILE': file '{tmp_path}' is a directory"
    )
    if os.geteuid() != 0:  # root reads every file
        rules.chmod(0)
        assert refusal(rules)[0].endswith("is not readable")


def test_flag_pairs_of_runbell() -> None:
    install = ["hook", "install", "claude-code"]
    unset = {"gate": None, "http": False, "mcp": None}
    assert parse(root, install, "runbell")[1] == {"user": False, "print_only": False, **unset}
    assert parse(root, [*install, "--user", "--print"], "runbell")[1] == {
        "user": True,
        "print_only": True,
        **unset,
    }
    assert parse(root, [*install, "--user", "--project"], "runbell")[1]["user"] is False
    assert parse(root, ["login"], "runbell")[1]["check"] is True
    assert parse(root, ["login", "--no-check"], "runbell")[1]["check"] is False
    assert parse(root, ["report", "r", "s"], "runbell")[1]["notify"] is None
