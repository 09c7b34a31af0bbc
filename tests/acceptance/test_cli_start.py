"""``runbell`` starts light (issue 16 row 17: 1.3 s of CPU before any command ran, because
``runbell.cli`` imported the server). Checked by what is imported, never by a stopwatch: a
fresh interpreter imports ``runbell.cli``, renders every command's ``--help``, parses a
command line of each kind and runs the commands that need nothing else, and then none of
the server's (or the SDK's) modules may be loaded. Each command imports its own
implementation when it runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.timeouts import WAIT

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
)

PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys

    from typer.main import get_command

    from runbell.cli import app

    root = get_command(app)

    def walk(command, path=()):
        yield path
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from walk(sub, (*path, name))

    def run(args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                root.main(list(args), prog_name="runbell")
            except SystemExit as exc:
                return exc.code or 0, out.getvalue(), err.getvalue()
        return 0, out.getvalue(), err.getvalue()

    codes = {}
    for path in walk(root):
        codes[" ".join(path) + " --help"] = run([*path, "--help"])[0]
    # A full command line parsed (not run) for every kind of command.
    for args in (
        ["report", "ci-1", "completed", "--title", "T", "--link", "run=https://x.example"],
        ["ask", "ci-1", "Deploy?", "--kind", "choice", "--option", "a=A", "--timeout", "5"],
        ["wait", "ci-1", "--timeout", "1"],
        ["deliveries", "list", "--tenant", "default", "--status", "dead", "--limit", "5"],
        ["user", "login-link", "--tenant", "default", "you@example.com"],
        ["tenant", "retention", "set", "--tenant", "t", "notifications=9"],
        ["serve", "--port", "0", "--demo"],
        ["worker", "--metrics-port", "9100"],
    ):
        command, rest = root, list(args)
        while hasattr(command, "commands"):
            command = command.commands[rest.pop(0)]
        command.make_context(args[0], rest)
        codes[" ".join(args)] = "parsed"
    # Commands that need nothing else run to the end.
    code, key, _ = run(["secret-key"])
    codes["secret-key"] = code
    codes["usage error"] = run(["user", "add", "x@example.com"])[0]
    print(json.dumps({"codes": codes, "key": key.strip(), "modules": sorted(sys.modules)}))
    """
)


def _probe() -> dict[str, object]:
    res = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=WAIT * 4,
        check=False,
        env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"},
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
    assert len(codes) > 30, codes  # every command's --help was rendered
    modules = result["modules"]
    assert isinstance(modules, list)
    loaded = sorted(
        m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)
    )
    assert not loaded, f"a light start loaded {loaded}"


def test_secret_key_prints_a_key_the_server_accepts() -> None:
    from cryptography.fernet import Fernet

    from runbell.config import Settings

    key = str(_probe()["key"])
    Fernet(key)  # 32 url-safe base64-encoded bytes
    assert Settings(secret_key=key).secret_key == key
