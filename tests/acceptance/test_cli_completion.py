"""``runbell completion bash|zsh|fish``: each script, loaded into the real shell, completes
commands, subcommands and option names where the command line is, and leaves arguments
to the shell's file names. (zsh and fish run when installed, and must be in CI: .ci/run
installs them; bash always.)"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from runbell.cli import main, root
from runbell.cli.completion import script
from runbell.cli.specs import Command, Flag, walk
from tests.conftest import IN_CI
from tests.timeouts import WAIT


def _shell(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if IN_CI:
            pytest.fail(f"CI requires {name} (.ci/run installs it)")
        pytest.skip(f"{name} is not installed")
    return found


@pytest.fixture
def complete(tmp_path: Path) -> Callable[[str, str], list[str]]:
    """``complete(shell, line)``: what the shell offers at the end of ``line``."""

    def run(shell: str, line: str) -> list[str]:
        loaded = tmp_path / f"runbell.{shell}"
        loaded.write_text(script(root, shell))
        words = line.split(" ")
        if shell == "bash":
            quoted = " ".join(f"'{w}'" for w in words)
            program = (
                f"source {loaded}; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
                '_runbell; printf "%s\\n" "${COMPREPLY[@]}"'
            )
            argv = [_shell("bash"), "--norc", "-c", program]
        elif shell == "zsh":
            # Outside a completion widget: _describe and _files print what they would offer.
            program = (
                "compdef() { :; }; "
                '_describe() { printf "%s\\n" "${(@P)4}"; }; _files() { print "<files>"; }; '
                f"source {loaded}; words=({' '.join(repr(w) for w in words)}); "
                "CURRENT=${#words}; _runbell"
            )
            argv = [_shell("zsh"), "-f", "-c", program]
        else:
            argv = [_shell("fish"), "-c", f"source {loaded}; complete -C '{line}'"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT, check=True)
        assert done.stderr == "", done.stderr
        return [item.split(":")[0].split("\t")[0] for item in done.stdout.splitlines() if item]

    return run


TOP = {"migrate", "serve", "report", "completion", "tenant", "deliveries", "hook"}


def test_bash(complete: Callable[[str, str], list[str]]) -> None:
    assert complete("bash", "runbell ten") == ["tenant"]
    assert set(complete("bash", "runbell ")) >= TOP
    assert sorted(complete("bash", "runbell tenant retention s")) == ["set", "show"]
    assert complete("bash", "runbell report ci-1 --ti") == ["--title"]
    assert complete("bash", "runbell --") == ["--help"]
    assert complete("bash", "runbell deliveries list --tenant t --l") == ["--limit"]
    assert complete("bash", "runbell hook install ") == ["claude-code", "codex"]
    assert complete("bash", "runbell report x ") == []  # an argument: the shell's files


def test_zsh(complete: Callable[[str, str], list[str]]) -> None:
    assert set(complete("zsh", "runbell ten")) >= TOP  # zsh itself keeps what matches
    assert complete("zsh", "runbell tenant retention s") == ["show", "set"]
    assert "--title" in complete("zsh", "runbell report ci-1 --ti")
    assert complete("zsh", "runbell hook install ") == ["claude-code", "codex"]
    assert complete("zsh", "runbell report x ") == ["<files>"]


def test_fish(complete: Callable[[str, str], list[str]]) -> None:
    assert complete("fish", "runbell ten") == ["tenant"]
    assert sorted(complete("fish", "runbell tenant retention ")) == ["set", "show"]
    assert complete("fish", "runbell report ci-1 --ti") == ["--title"]
    assert complete("fish", "runbell deliveries list --tenant t --j") == ["--json"]
    assert sorted(complete("fish", "runbell hook install ")) == ["claude-code", "codex"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_every_command_and_option_is_in_the_script(shell: str) -> None:
    text = script(root, shell)
    for path, node in walk(root):
        if path:
            assert "/" + "/".join(path) in text, (shell, path)
        if isinstance(node, Command):
            for option in node.options:
                for name in option.names if isinstance(option, Flag) else (option.name,):
                    assert name.removeprefix("--" if shell == "fish" else "") in text


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_script_is_valid_for_its_shell(shell: str, tmp_path: Path) -> None:
    loaded = tmp_path / f"runbell.{shell}"
    loaded.write_text(script(root, shell))
    check = {"bash": ["-n"], "zsh": ["-n"], "fish": ["--no-execute"]}[shell]
    subprocess.run([_shell(shell), *check, str(loaded)], check=True, timeout=WAIT)


def test_the_shell_defaults_to_the_one_shell_names(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHELL", "/usr/bin/zsh")
    assert main(["completion"]) == 0
    assert capsys.readouterr().out == script(root, "zsh")
    monkeypatch.setenv("SHELL", "/bin/tcsh")
    assert main(["completion"]) == 2
    assert capsys.readouterr().err == (
        "runbell: which shell? $SHELL names 'tcsh'\n"
        "hint: name it: runbell completion bash (or zsh, or fish)\n"
    )
    assert main(["completion", "tcsh"]) == 2
    assert capsys.readouterr().err.startswith(
        "runbell: invalid value for 'SHELL': 'tcsh' is not one of bash, zsh, fish\n"
    )
