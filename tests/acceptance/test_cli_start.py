"""``runbell`` starts light (issue 16 row 17: 1.3 s of CPU before any command ran, because
``runbell.cli`` imported the server; then 180-230 ms, because of Typer). Checked by what
is imported, never by a stopwatch (``python -m bench.cli_start`` measures): a fresh
interpreter imports ``runbell.cli``, renders every command's ``--help``, parses a command
line of each kind and runs the commands that need nothing else, and then none of the
server's (or the SDK's) modules may be loaded, nor Typer or click. Each command imports
its own implementation when it runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import runbell
from tests.timeouts import WAIT

#: Where the runbell under test is (a checkout's src/ or a worktree's, whichever this
#: process imported), first on the probe's path.
SRC = str(Path(runbell.__file__).resolve().parents[1])

#: Loaded only when a command that needs them runs: the server, the database, the HTTP
#: client, settings, logging, the terminal renderer.
HEAVY = (
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "httpx",
    "anyio",
    "pydantic",
    "pydantic_settings",
    "structlog",
    "rich",
    "cryptography",
    "yaml",
    "mcp",
    "runbell.app",
    "runbell.api",
    "runbell.web",
    "runbell.flows",
    "runbell.store",
    "runbell.dispatch",
    "runbell.channels",
    "runbell.client",
    "runbell.mcp",
    "runbell.config",
    "runbell.logging",
    "runbell.crypto",
    # The command-line library runbell was built on: Typer's import alone was ~120 ms of
    # the 150 ms budget (docs/architecture.md, "The command line").
    "typer",
    "click",
)

PROBE = textwrap.dedent(
    """
    import contextlib, io, json, os, sys

    from runbell.cli import main, root
    from runbell.cli.parsing import parse
    from runbell.cli.specs import walk

    def run(args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
        return code, out.getvalue(), err.getvalue()

    codes = {}
    for path, _ in walk(root):
        codes[" ".join(path) + " --help"] = run([*path, "--help"])[0]
    # A full command line parsed (not run) for every kind of command and parameter.
    os.environ["RUNBELL_SIGNING_SECRET"] = "whsec_from_the_environment"
    for args in (
        ["report", "ci-1", "completed", "--title", "T", "--link", "run=https://x.example",
         "--notify", "--event-id=e-1"],
        ["progress", "ci-1", "half way", "--count", "done=3", "--count", "left=3"],
        ["ask", "ci-1", "Deploy?", "--kind", "choice", "--option", "a=A", "--timeout", "5"],
        ["wait", "ci-1", "--timeout", "1.5"],
        ["login", "--url", "http://x.example", "--key", "k", "--no-check", "--config", "c.toml"],
        ["deliveries", "list", "--tenant", "default", "--status", "dead", "--limit", "5",
         "--json"],
        ["deliveries", "replay", "--tenant", "t", "dlv_1", "dlv_2", "--", "--dlv_3"],
        ["user", "login-link", "--tenant", "default", "you@example.com"],
        ["tenant", "policy", os.devnull, "--tenant", "t"],
        ["tenant", "retention", "set", "--tenant", "t", "notifications=9"],
        ["source", "create", "openai", "--tenant", "t", "--trust", "authoritative"],
        ["serve", "--port", "0", "--demo", "--no-scheduler"],
        ["worker", "--metrics-port", "9100"],
        ["prune", "--dry-run"],
        ["hook", "install", "claude-code", "--user", "--print"],
        ["hook", "codex", "{}"],
        ["completion", "zsh"],
    ):
        parse(root, args, "runbell")
        codes[" ".join(args)] = "parsed"
    # Commands that need nothing else run to the end.
    code, key, _ = run(["secret-key"])
    codes["secret-key"] = code
    code, script, _ = run(["completion", "bash"])
    codes["completion bash"] = code if "complete -o default -F _runbell runbell" in script else -1
    codes["usage error"] = run(["user", "add", "x@example.com"])[0]
    modules = sorted(m for m, v in sys.modules.items() if v is not None)  # None: absent
    print(json.dumps({"codes": codes, "key": key.strip(), "modules": modules}))
    """
)


def _probe() -> dict[str, object]:
    res = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=WAIT * 4,
        check=False,
        env={"COLUMNS": "80", "PATH": "/usr/bin:/bin", "PYTHONPATH": SRC},
    )
    assert res.returncode == 0, res.stderr
    result: dict[str, object] = json.loads(res.stdout.splitlines()[-1])
    return result


def test_help_parsing_and_light_commands_load_none_of_the_server() -> None:
    result = _probe()
    codes = result["codes"]
    assert isinstance(codes, dict)
    assert codes.pop("usage error") == 2
    assert set(codes.values()) <= {0, "parsed"}, codes
    assert len(codes) > 50, codes  # every command's --help was rendered, every line parsed
    modules = result["modules"]
    assert isinstance(modules, list)
    loaded = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert not loaded, f"a light start loaded {loaded}"


def test_secret_key_prints_a_key_the_server_accepts() -> None:
    from cryptography.fernet import Fernet

    from runbell.config import Settings

    key = str(_probe()["key"])
    Fernet(key)  # 32 url-safe base64-encoded bytes
    assert Settings(secret_key=key).secret_key == key


#: What a ``runbell hook`` call may not load on top of the HTTP client it needs (issue 20
#: row 3: a hook call ≤ 150 ms of CPU, ``python -m bench.cli_start`` measures): the
#: server, the async half of the SDK and asyncio, httpx's own command line (click, rich),
#: the async locks httpcore would bring (anyio), zstandard, and uuid.
HOOK_HEAVY = (
    *(h for h in HEAVY if h not in ("httpx", "runbell.client")),
    "runbell.client._async",
    "asyncio",
    "anyio",
    "zstandard",
    "uuid",
    "httpx._main",
    "difflib",
)

HOOK_PROBE = textwrap.dedent(
    """
    import io, json, sys

    sys.stdin = io.StringIO(open(sys.argv[1], encoding="utf-8").read())
    from runbell.cli import main

    code = main(["hook", "claude-code"])
    loaded = sorted(m for m in sys.modules if sys.modules[m] is not None)
    print(json.dumps({"code": code, "modules": loaded}))
    """
)


def run_probe(args: list[str], home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -c args…`` in a fresh interpreter on this checkout's src, with a bare
    environment (``home`` as HOME) plus ``env``: what it imports is what a start imports."""
    return subprocess.run(
        [sys.executable, "-c", *args],
        capture_output=True,
        text=True,
        timeout=WAIT * 4,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": SRC, "HOME": str(home), **env},
    )


def test_a_hook_call_loads_the_sync_client_and_nothing_heavier(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on: the call fails fast, silently
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    payload = Path(__file__).parents[1] / "fixtures" / "claude_code" / "user_prompt_submit.json"
    res = run_probe(
        [HOOK_PROBE, str(payload)],
        tmp_path,
        RUNBELL_URL=f"http://127.0.0.1:{port}",
        RUNBELL_KEY="rbk_unused",
        RUNBELL_HOOK_STATE_DIR=str(tmp_path / "state"),
        RUNBELL_HOOK_LOG=str(tmp_path / "hook.log"),
    )
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout.splitlines()[-1])
    assert result["code"] == 0
    modules = result["modules"]
    assert "httpx" in modules and "runbell.client._sync" in modules  # it did try to report
    assert "hook failed" in (tmp_path / "hook.log").read_text()  # and nobody answered
    loaded = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HOOK_HEAVY))
    assert not loaded, f"a hook call loaded {loaded}"
