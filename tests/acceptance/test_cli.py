"""The ``runbell`` command as an operator uses it: real processes, real databases."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from runbell.app import build
from runbell.config import Settings
from runbell.domain.errors import NotFound
from runbell.domain.policy import Facts
from runbell.flows import policy
from runbell.flows.accounts import create_tenant
from runbell.store import accounts
from runbell.store.migrate import current_revision
from tests.conftest import SECRET_KEY, free_port, pg_database
from tests.plain_http import TLS
from tests.timeouts import WAIT, scaled

RUNBELL = str(Path(sys.executable).with_name("runbell"))
KEY = re.compile(r"\brbk_[A-Za-z0-9_-]{20,}")
TOKEN = re.compile(r"\brbu_[A-Za-z0-9_-]{20,}")
TENANT = re.compile(r"\bten_[0-9a-z]{26}\b")
WELCOME = "Runbell is set up"
SECRETS_NOTE = re.compile(r"are in (/\S+), readable only by this user")


def secrets_file(stdout: str) -> Path:
    """The private file a first start whose stdout is no terminal names instead of
    printing its secrets (0600: only this user may read it)."""
    [named] = SECRETS_NOTE.findall(stdout)
    path = Path(named)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, oct(path.stat().st_mode)
    return path


def cli_env(data_dir: Path, database_url: str | None = None) -> dict[str, str]:
    """The environment of a fresh shell: no RUNBELL_* leaking in from the test runner."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNBELL_")}
    env.update(RUNBELL_DATA_DIR=str(data_dir), RUNBELL_SECRET_KEY=SECRET_KEY, PYTHONUNBUFFERED="1")
    if database_url:
        env["RUNBELL_DATABASE_URL"] = database_url
    return env


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RUNBELL, *args], env=env, capture_output=True, text=True, timeout=scaled(60), check=False
    )


def ok(env: dict[str, str], *args: str) -> str:
    res = run_cli(env, *args)
    assert res.returncode == 0, f"runbell {' '.join(args)}: {res.stdout}\n{res.stderr}"
    assert "Traceback" not in res.stderr
    return res.stdout


def refused(env: dict[str, str], *args: str) -> str:
    """The command fails with exit code 2 and a message, not a traceback."""
    res = run_cli(env, *args)
    assert res.returncode == 2, f"runbell {' '.join(args)}: rc={res.returncode}\n{res.stderr}"
    assert "Traceback" not in res.stderr + res.stdout
    assert res.stderr.strip(), "a refusal says why"
    return res.stderr


def settings_for(data_dir: Path, database_url: str | None = None) -> Settings:
    return Settings(data_dir=data_dir, database_url=database_url, secret_key=SECRET_KEY)


def principal(settings: Settings, token: str) -> accounts.Principal | None:
    """Who ``token`` authenticates as on the CLI's database, checked in-process."""
    core = build(settings, migrate=False)
    try:
        with core.db.read() as conn:
            return accounts.authenticate(conn, token, core.db.clock())
    finally:
        core.db.dispose()


def one(pattern: re.Pattern[str], text: str) -> str:
    found = set(pattern.findall(text))
    assert len(found) == 1, f"expected one distinct {pattern.pattern} in:\n{text}"
    return str(found.pop())


def with_acme(data_dir: Path, sqlite_template: Path) -> str:
    """Put a database holding tenant ``acme`` (what `runbell tenant create acme` makes)
    in ``data_dir``; its tenant id. Made in-process from the migrated template, for the
    tests of the commands that follow: a first `runbell tenant create` in a fresh
    directory costs a second of CPU (a process, the migrations), and
    `test_account_commands_on_sqlite` already runs it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(sqlite_template, data_dir / "runbell.db")
    core = build(settings_for(data_dir), migrate=False)
    try:
        tenant_id, _ = create_tenant(core, "acme")
    finally:
        core.db.dispose()
    return tenant_id


@pytest.fixture
def acme(tmp_path: Path, sqlite_template: Path) -> tuple[dict[str, str], str]:
    """A fresh shell's environment on a database with tenant ``acme``, and its id."""
    return cli_env(tmp_path), with_acme(tmp_path, sqlite_template)


def account_lifecycle(env: dict[str, str], settings: Settings) -> None:
    """tenant create → key create → user add → user revoke, each checked against the DB."""
    out = ok(env, "tenant", "create", "acme")
    tenant_id = one(TENANT, out)
    admin_key = one(KEY, out)
    who = principal(settings, admin_key)
    assert who is not None
    assert (who.tenant_id, who.kind, who.role) == (tenant_id, "key", "admin")

    runtime_key = one(KEY, ok(env, "key", "create", "--tenant", "acme", "--role", "runtime"))
    assert runtime_key != admin_key
    who = principal(settings, runtime_key)
    assert who is not None and (who.tenant_id, who.role) == (tenant_id, "runtime")

    # A scoped runtime key (issue 18): its capabilities and run patterns are on record.
    scoped = one(
        KEY,
        ok(env, "key", "create", "--tenant", "acme", "--capability", "runs.read",
           "--capability", "runs.report", "--runs", "launch-*", "--own-runs"),
    )  # fmt: skip
    who = principal(settings, scoped)
    assert who is not None and who.scope is not None
    assert who.scope.capabilities == {"runs.read", "runs.report"}
    assert who.scope.run_patterns == ("launch-*",) and who.scope.own_runs
    refused(env, "key", "create", "--tenant", "acme", "--capability", "runs.write")

    out = ok(env, "user", "add", "--tenant", "acme", "a@b.test", "--role", "member")
    token = one(TOKEN, out)
    who = principal(settings, token)
    assert who is not None
    assert (who.tenant_id, who.kind, who.role) == (tenant_id, "user", "member")

    ok(env, "user", "revoke", "--tenant", tenant_id, "a@b.test")
    assert principal(settings, token) is None
    assert principal(settings, admin_key) is not None  # revoking a person leaves keys alone


# --- migrate ---------------------------------------------------------------------------


def test_migrate_is_idempotent_and_prints_the_revision(tmp_path: Path) -> None:
    """`runbell migrate` twice succeeds both times and prints the schema revision."""
    env = cli_env(tmp_path)
    first = ok(env, "migrate")
    second = ok(env, "migrate")
    settings = settings_for(tmp_path)
    core = build(settings, migrate=False)
    try:
        revision = current_revision(core.db.engine)
    finally:
        core.db.dispose()
    assert revision
    assert revision in first
    assert revision in second
    assert "sqlite" in second


# --- accounts ----------------------------------------------------------------------------


def test_account_commands_on_sqlite(tmp_path: Path) -> None:
    """Tenant, keys and users made with the CLI authenticate; a revoked user's token does
    not. Each command closes its database as it exits: the file is left whole, no WAL
    beside it (what a file-level backup copies)."""
    account_lifecycle(cli_env(tmp_path), settings_for(tmp_path))
    ok(cli_env(tmp_path), "key", "create", "--tenant", "acme")
    assert sorted(p.name for p in tmp_path.glob("runbell.db*")) == ["runbell.db"]


@pytest.fixture
def pg_url(pg_template: str | None) -> Iterator[str]:
    yield from pg_database(pg_template)


@pytest.mark.postgres
def test_account_commands_on_postgres(tmp_path: Path, pg_url: str) -> None:
    """The same CLI flow works against PostgreSQL through RUNBELL_DATABASE_URL."""
    env = cli_env(tmp_path, pg_url)
    first = ok(env, "migrate")
    assert "postgresql" in first
    assert ok(env, "migrate") == first
    account_lifecycle(env, settings_for(tmp_path, pg_url))
    assert not (tmp_path / "runbell.db").exists(), "no SQLite file when PostgreSQL is set"


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        (["key", "create", "--tenant", "acme", "--role", "wizard"], "runtime"),
        (["user", "add", "--tenant", "acme", "x@b.test", "--role", "wizard"], "member"),
        (["user", "add", "--tenant", "acme", "not-an-email"], "not-an-email"),
        (["key", "create", "--tenant", "nope"], "nope"),
        (["user", "add", "--tenant", "nope", "x@b.test"], "nope"),
        (["user", "revoke", "--tenant", "acme", "ghost@b.test"], "ghost@b.test"),
    ],
    ids=["key-role", "user-role", "bad-email", "key-tenant", "user-tenant", "revoke-nonmember"],
)
def test_bad_input_exits_2_with_a_message(
    tmp_path: Path, acme: tuple[dict[str, str], str], args: list[str], mentions: str
) -> None:
    """Bad roles, unknown tenants and unknown members exit 2 with a clear message."""
    env, tenant_id = acme
    message = refused(env, *args)
    assert mentions in message
    # Nothing half-made: the refused user is not a member afterwards.
    core = build(settings_for(tmp_path), migrate=False)
    try:
        with core.db.read() as conn:
            for email in ("x@b.test", "not-an-email"):
                with pytest.raises(NotFound):
                    accounts.find_user(conn, tenant_id, email)
    finally:
        core.db.dispose()


def test_every_refusal_is_one_style_with_a_hint_where_there_is_something_to_do(
    acme: tuple[dict[str, str], str],
) -> None:
    """Issue 16 row 17: two error styles (`runbell: …` and `error: …`) and no hint. Now
    `runbell: <what>`, then `hint: <what to do>`; a refusal or usage error exits 2."""
    env, _ = acme
    cases = {
        # `make login-link EMAIL=…` for someone who is not a member
        ("user", "login-link", "bob@example.com", "--tenant", "acme"): (
            "runbell: no member 'bob@example.com' in this tenant",
            "user add bob@example.com --tenant acme",
        ),
        ("user", "add", "x@b.test", "--tenant", "nope"): (
            "runbell: no single tenant named or numbered 'nope'",
            "runbell tenant create NAME",
        ),
        ("user", "add", "x@b.test"): (
            "runbell: missing option '--tenant'",
            "runbell user add --help",
        ),
        ("deliveries", "list", "--tenant", "acme", "--limit", "0"): (
            "runbell: invalid value for '--limit': must be 1 to 1000",
            "runbell deliveries list --help",
        ),
        ("deliveries", "list", "--tenant", "acme", "--status", "deadd"): (
            "runbell: unknown status deadd",
            "hint: one of ",
        ),
        ("nosuch",): ("runbell: no such command 'nosuch'", "runbell --help"),
    }
    for args, (first, hint) in cases.items():
        lines = refused(env, *args).splitlines()
        assert len(lines) == 2, (args, lines)
        assert lines[0] == first or lines[0].startswith(first), (args, lines)
        assert lines[1].startswith("hint: ") and hint in lines[1], (args, lines)
    # Refused without anything to do: one line, no hint.
    assert refused(env, "tenant", "create", "acme").splitlines()[0].startswith("runbell: ")


def test_an_unreachable_database_exits_3_with_one_line(tmp_path: Path) -> None:
    """An error talking to the database is exit 3 (README "Exit codes"), no traceback."""
    env = cli_env(tmp_path, f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nowhere")
    res = run_cli(env, "tenant", "create", "acme")
    assert res.returncode == 3, res.stderr
    lines = res.stderr.splitlines()
    assert lines[0].startswith("runbell: cannot reach the database: "), lines
    assert lines[1].startswith("hint: ") and "RUNBELL_DATABASE_URL" in lines[1]
    assert len(lines) == 2 and "Traceback" not in res.stderr


def test_duplicate_tenant_name_is_refused(acme: tuple[dict[str, str], str]) -> None:
    """Creating a second tenant with a taken name is refused, so the name stays usable."""
    env, _ = acme
    res = run_cli(env, "tenant", "create", "acme")
    ok(env, "key", "create", "--tenant", "acme")
    assert res.returncode == 2
    assert "acme" in res.stderr


# --- policy ----------------------------------------------------------------------------

GOOD_POLICY = """
[[rule]]
id = "acme.quiet_completions"
when = { attention = "completed" }
decision = "inbox"
urgency = "low"
"""

BAD_POLICY = """
[[rule]]
id = "acme.shout"
when = { attention = "completed" }
decision = "shout"
"""


def current_rule(settings: Settings, tenant_id: str) -> str:
    core = build(settings, migrate=False)
    try:
        with core.db.read() as conn:
            effective = policy.policy_for(core, conn, tenant_id)
        return effective.decide(Facts(attention="completed", notify_on_complete=True)).rule_id
    finally:
        core.db.dispose()


def test_tenant_policy_applies_a_valid_file_and_refuses_an_invalid_rule(
    tmp_path: Path, acme: tuple[dict[str, str], str]
) -> None:
    """A valid rules file takes effect; an unknown decision exits 2 and changes nothing."""
    env, tenant_id = acme
    settings = settings_for(tmp_path)
    assert current_rule(settings, tenant_id) == "completed.requested"

    good = tmp_path / "rules.toml"
    good.write_text(GOOD_POLICY)
    out = ok(env, "tenant", "policy", "--tenant", "acme", str(good))
    assert "acme.quiet_completions" in out
    assert current_rule(settings, tenant_id) == "acme.quiet_completions"

    bad = tmp_path / "bad.toml"
    bad.write_text(BAD_POLICY)
    message = refused(env, "tenant", "policy", "--tenant", "acme", str(bad))
    assert "acme.shout" in message
    assert "decision" in message
    assert current_rule(settings, tenant_id) == "acme.quiet_completions"

    broken = tmp_path / "broken.toml"
    broken.write_text("this is [[ not toml")
    message = refused(env, "tenant", "policy", "--tenant", "acme", str(broken))
    assert "broken.toml" in message.replace("\n", "")  # the console may fold a long path


# --- serve -----------------------------------------------------------------------------


class Served:
    """`runbell serve` as a child process, with its output captured to files."""

    def __init__(
        self,
        env: dict[str, str],
        workdir: Path,
        name: str,
        *args: str,
        cwd: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        self.env = env
        self.args = args  # more `serve` options, e.g. --demo
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Served:
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [RUNBELL, "serve", "--host", "127.0.0.1", "--port", str(self.port), *self.args],
                env=self.env,
                stdout=out,
                stderr=err,
                cwd=self.cwd,
            )
        deadline = time.monotonic() + scaled(120)  # generous: the suite shares two busy cores
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited early:\n{self.stdout}\n{self.stderr}")
            try:
                if (
                    httpx.get(f"{self.url}/healthz", timeout=scaled(5), verify=TLS).status_code
                    == 200
                ):
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"serve did not come up:\n{self.stdout}\n{self.stderr}")
            time.sleep(0.1)

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=WAIT)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)

    def __exit__(self, *exc: object) -> None:
        self.kill()


def printed_curls(block: str) -> list[dict[str, Any]]:
    """The welcome block's curl commands, with its exported variables substituted."""
    text = block.replace("\\\n", " ")
    variables: dict[str, str] = {}
    commands = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export "):
            for assignment in shlex.split(line)[1:]:
                name, _, value = assignment.partition("=")
                variables[name] = value
        elif line.startswith("curl "):
            for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
                line = line.replace(f"${name}", value)
            tokens = shlex.split(line)[1:]
            cmd: dict[str, Any] = {"method": "GET", "headers": {}, "data": None, "url": None}
            i = 0
            while i < len(tokens):
                tok = tokens[i]
                if tok == "-X":
                    cmd["method"] = tokens[i + 1]
                    i += 1
                elif tok == "-H":
                    name, _, value = tokens[i + 1].partition(":")
                    cmd["headers"][name.strip()] = value.strip()
                    i += 1
                elif tok == "-d":
                    cmd["data"] = tokens[i + 1]
                    i += 1
                elif tok.startswith("http"):
                    cmd["url"] = tok
                i += 1
            commands.append(cmd)
    return commands


def test_serve_first_start_writes_working_credentials_once_to_a_private_file(
    tmp_path: Path,
) -> None:
    """First `serve` with stdout a pipe (a service journal, a container log): no secret on
    stdout or in the log; they are written once, with working curl examples, to a 0600
    file in the data directory whose path is printed. A restart prints no secret and
    leaves the file as it was."""
    data = tmp_path / "data"
    env = cli_env(data)
    with Served(env, tmp_path, "first") as served:
        printed = served.stdout + served.stderr
        assert printed.count(WELCOME) == 1
        assert not KEY.search(printed) and not TOKEN.search(printed), printed
        assert "/auth/rbl_" not in printed, printed
        path = secrets_file(served.stdout)
        assert path.parent == data.resolve()
        block = path.read_text()
        assert block.count(WELCOME) == 1
        assert f"{served.url}/auth/rbl_" in block
        assert TENANT.search(block)
        keys = KEY.findall(block)
        assert len(set(keys)) == 2, block
        user_token = one(TOKEN, block)
        assert "curl" in block

        curls = printed_curls(block)
        assert [c["method"] for c in curls] == ["PUT", "POST", "GET", "GET"], curls
        results = []
        with httpx.Client(timeout=WAIT) as http:
            for c in curls:
                assert c["url"].startswith(served.url), c
                r = http.request(
                    c["method"],
                    c["url"],
                    headers=c["headers"],
                    content=c["data"].encode() if c["data"] else None,
                )
                assert r.status_code in (200, 201), (c, r.text)
                results.append(r.json())
        put, sig, inbox, events = results
        assert put["state"] == "working"
        assert sig["outcome"] == "applied"
        assert sig["run"]["state"] == "completed"
        notes = inbox["notifications"]
        assert [(n["run_id"], n["attention_type"]) for n in notes] == [("demo-1", "completed")]
        assert "run.transitioned" in {e["type"] for e in events["events"]}
        assert curls[2]["headers"]["Authorization"] == f"Bearer {user_token}"
        runtime_auth = curls[0]["headers"]["Authorization"]
        assert runtime_auth.removeprefix("Bearer ") in keys

        rc = served.terminate()
        assert rc in (0, -signal.SIGTERM), served.stderr  # stopped by the signal, not a crash
        assert "Traceback" not in served.stderr

    with Served(env, tmp_path, "second") as again:
        r = httpx.get(
            f"{again.url}/v1/runs/demo-1",
            headers={"Authorization": runtime_auth},
            timeout=WAIT,
        )
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "completed"
        assert again.terminate() in (0, -signal.SIGTERM)
        assert "Traceback" not in again.stderr
        output = again.stdout
        assert WELCOME not in output
        assert not KEY.search(output) and not TOKEN.search(output), "no secret printed again"
        assert "/auth/rbl_" not in output  # a fresh sign-in link goes to a terminal only
        assert "listening" in output
    assert path.read_text() == block  # written once
    assert sorted(p.name for p in data.glob("first-start*")) == [path.name]


def test_serve_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM ends `serve` with status 0, its SQLite file self-contained (WAL checkpointed)."""
    data = tmp_path / "data"
    with Served(cli_env(data), tmp_path, "serve") as served:
        written = secrets_file(served.stdout).read_text()
        runtime_key = KEY.findall(written.split("runtime key", 1)[1])[0]
        r = httpx.put(
            f"{served.url}/v1/runs/kept-1",
            json={"owner": "you@example.com"},
            headers={"Authorization": f"Bearer {runtime_key}"},
            timeout=WAIT,
        )
        assert r.status_code == 201, r.text
        rc = served.terminate()
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(data / "runbell.db", copy / "runbell.db")  # what a file-level backup takes
    with closing(sqlite3.connect(copy / "runbell.db")) as db:
        runs = [row[0] for row in db.execute("SELECT run_id FROM runs")]
    assert (rc, runs) == (0, ["kept-1"])
