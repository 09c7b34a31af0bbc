"""``runbell completion [bash|zsh|fish]``: a shell completion script, printed once and
loaded by the shell at its start, generated from the command declarations
(:mod:`~runbell.cli.specs`): commands, subcommands and option names, with their help
where the shell shows it (zsh, fish). Nothing else is completed: an argument's place
falls back to the shell's file names.

The script is static: a <TAB> never starts ``runbell`` (Typer's completion did, paying a
whole start for every <TAB>). A shell finds where the command line is by walking its
words from ``runbell`` down the tree of commands (``/tenant/retention``), skipping every
word that names no command there.
"""

from __future__ import annotations

import os
import sys

from runbell.cli import common
from runbell.cli.specs import Argument, Command, Commands, Flag, Group, choice, walk

SHELLS = ("bash", "zsh", "fish")

commands = Commands()


@commands.command(
    Argument("shell", "bash, zsh or fish (default: the one $SHELL names)", type=choice(*SHELLS))
)
def completion(shell: str | None = None) -> None:
    """Print a shell completion script: commands and options.

    Load it at the shell's start: bash, in ~/.bashrc: eval "$(runbell completion bash)";
    zsh, in ~/.zshrc after compinit: eval "$(runbell completion zsh)"; fish: runbell
    completion fish > ~/.config/fish/completions/runbell.fish."""
    from runbell.cli import root

    named = os.path.basename(os.environ.get("SHELL", ""))
    shell = shell or named
    if shell not in SHELLS:
        common.fail(
            f"which shell? $SHELL names {named!r}" if named else "which shell? $SHELL is not set",
            "name it: runbell completion bash (or zsh, or fish)",
        )
    sys.stdout.write(script(root, shell))


def script(root: Group, shell: str) -> str:
    """The completion script of ``root`` (``runbell``) for ``shell``."""
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell](root)


def _tree(root: Group) -> list[tuple[str, Command | Group]]:
    """Every command and group by its place: ``""`` (runbell), ``/tenant/retention``…"""
    return [("".join(f"/{name}" for name in path), node) for path, node in walk(root)]


def _options(node: Command | Group) -> list[tuple[str, str]]:
    """A command's option names and their help, ``--help`` last."""
    found: list[tuple[str, str]] = []
    if isinstance(node, Command):
        for option in node.options:
            names = option.names if isinstance(option, Flag) else (option.name,)
            found += [(name, option.help) for name in names]
    return [*found, ("--help", "Show this message and exit.")]


def _members(node: Command | Group) -> list[tuple[str, str]]:
    return [(m.name, m.summary) for m in node.members] if isinstance(node, Group) else []


def _takes_value(node: Command | Group, name: str) -> bool:
    if isinstance(node, Command):
        return any(not isinstance(o, Flag) and o.name == name for o in node.options)
    return False


def _places(tree: list[tuple[str, Command | Group]], sep: str) -> str:
    return sep.join(place for place, _ in tree if place)


def bash(root: Group) -> str:
    tree = _tree(root)

    def case(place: str, pairs: list[tuple[str, str]]) -> str:
        words = " ".join(name for name, _ in pairs)
        pattern = place or '""'
        return f'            {pattern}) words="{words}" ;;'

    options = "\n".join(case(place, _options(node)) for place, node in tree)
    members = "\n".join(
        case(place, _members(node)) for place, node in tree if isinstance(node, Group)
    )
    return f"""\
# runbell completion for bash (from `runbell completion bash`): commands, options.
# Load it from ~/.bashrc: eval "$(runbell completion bash)"
_runbell() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} at= word words= i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${{COMP_WORDS[i]}}
        case $at/$word in
            {_places(tree, "|")}) at=$at/$word ;;
        esac
    done
    if [[ $cur == -* ]]; then
        case $at in
{options}
        esac
    else
        case $at in
{members}
        esac
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _runbell runbell
"""


def _zq(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def zsh(root: Group) -> str:
    tree = _tree(root)

    def items(pairs: list[tuple[str, str]]) -> str:
        return " ".join(_zq(f"{name}:{help}") for name, help in pairs)

    options = "\n".join(
        f"            ({_zq(place)}) items=({items(_options(node))}) ;;" for place, node in tree
    )
    members = "\n".join(
        f"            ({_zq(place)}) items=({items(_members(node))}) ;;"
        for place, node in tree
        if isinstance(node, Group)
    )
    return f"""\
#compdef runbell
# runbell completion for zsh (from `runbell completion zsh`): commands, options.
# Load it from ~/.zshrc, after compinit: eval "$(runbell completion zsh)"
_runbell() {{
    local at= word i
    local -a items
    for ((i = 2; i < CURRENT; i++)); do
        word=${{words[i]}}
        case $at/$word in
            ({_places(tree, "|")}) at=$at/$word ;;
        esac
    done
    if [[ ${{words[CURRENT]}} == -* ]]; then
        case $at in
{options}
        esac
        _describe -t options option items
    else
        case $at in
{members}
        esac
        if (( ${{#items}} )); then
            _describe -t commands command items
        else
            _files
        fi
    fi
}}
if [[ ${{zsh_eval_context[-1]}} == loadautofunc ]]; then
    _runbell "$@"
else
    compdef _runbell runbell
fi
"""


def _fq(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish(root: Group) -> str:
    tree = _tree(root)
    lines = []
    for place, node in tree:
        at = f"-n {_fq(f'__runbell_at {_fq(place)}')}"
        for name, help in _members(node):
            lines.append(f"complete -c runbell {at} -f -a {name} -d {_fq(help)}")
        for name, help in _options(node):
            value = " -r" if _takes_value(node, name) else ""
            lines.append(f"complete -c runbell {at} -l {name[2:]}{value} -d {_fq(help)}")
    completes = "\n".join(lines)
    return f"""\
# runbell completion for fish (from `runbell completion fish`): commands, options.
# Install it: runbell completion fish > ~/.config/fish/completions/runbell.fish
function __runbell_at --description 'Whether the runbell command line is at this command'
    set -l at ''
    set -l tokens (commandline -opc)
    set -e tokens[1]
    for word in $tokens
        switch "$at/$word"
            case {_places(tree, " ")}
                set at "$at/$word"
        end
    end
    test "$at" = "$argv[1]"
end
{completes}
"""
