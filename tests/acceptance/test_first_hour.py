"""A newcomer's first hour with the ``runbell`` command: everything `runbell serve` prints
works when pasted into a second terminal in the checkout, links follow the port really
served, tables stay whole when piped, a bad setting is one line naming it, and the data
files are private. Real processes, a real shell (bash), real HTTP."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import stat
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from runbell.api.deps import SESSION_COOKIE
from runbell.app import build, create_app, record_served_url
from runbell.store import sessions
from runbell.testing import add_user, make_tenant
from tests.acceptance.test_cli import (
    RUNBELL,
    WELCOME,
    Served,
    cli_env,
    ok,
    refused,
    run_cli,
    secrets_file,
    settings_for,
    with_acme,
)
from tests.conftest import bearer, free_port
from tests.timeouts import WAIT, scaled

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(https?://[^\s/]+)/auth/(rbl_[A-Za-z0-9_-]{20,})")


def second_terminal() -> dict[str, str]:
    """The environment of a new shell in the checkout after `make run`: no RUNBELL_*
    setting, and the virtualenv's bin/ not on PATH (nobody activated it)."""
    venv_bin = Path(RUNBELL).parent.resolve()
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNBELL_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in path if Path(p).resolve() != venv_bin)
    return env


def paste(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``command`` as a person pasting it into a shell in the checkout."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
    )


def block_after(text: str, heading: str) -> list[str]:
    """The indented lines under ``heading`` up to the next blank line after them."""
    lines = text.split(heading, 1)[1].splitlines()[1:]
    while lines and not lines[0].strip():
        lines.pop(0)
    block = []
    for line in lines:
        if not line.strip():
            break
        block.append(line.strip())
    return block


def signs_in(url: str) -> None:
    """The link opens a session on the running server: 303 and the session cookie."""
    r = httpx.get(url, follow_redirects=False, timeout=WAIT, trust_env=False)
    assert r.status_code == 303, (url, r.status_code, r.text[:300])
    assert SESSION_COOKIE in r.cookies, r.headers


def pasted_links(commands: list[str], env: dict[str, str], served_url: str) -> None:
    """Each command, pasted, prints one link to the server at ``served_url`` that works."""
    for command in commands:
        res = paste(command, env)
        assert res.returncode == 0, f"{command}\n{res.stdout}\n{res.stderr}"
        assert "Traceback" not in res.stderr
        links = LINK.findall(res.stdout)
        assert len(links) == 1, f"{command}\n{res.stdout}"
        base, token = links[0]
        assert base == served_url, f"{command} linked to {base}, the server is at {served_url}"
        signs_in(f"{base}/auth/{token}")


def json_documents(text: str) -> list[Any]:
    """The JSON answers of several curl calls, printed back to back."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
    return docs


# --- item 1: the start banner ----------------------------------------------------------


def test_every_command_the_start_prints_works_pasted_into_a_second_terminal(
    tmp_path: Path,
) -> None:
    """`make run PORT=…` with its output piped (not a terminal): the sign-in link, the
    "another link later" commands and the curl block written to the first start's private
    file, and the commands printed, all work pasted into a second shell in the checkout,
    and point at the port really served; a restart on another port prints commands whose
    links follow it, and no demo promise. No line is folded, even in a narrow terminal."""
    shell = second_terminal()
    # A data dir of its own (so the printed commands must name it) and no secret key
    # in the environment, as after a plain `make run`; a 60-column terminal.
    server_env = {**shell, "RUNBELL_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "60"}
    server_env["PYTHONUNBUFFERED"] = "1"
    with Served(server_env, tmp_path, "first", "--demo", cwd=ROOT) as served:
        banner = served.stdout
        assert banner.count(WELCOME) == 1
        written = secrets_file(banner).read_text()

        # Nothing folded at 60 columns: whole sentences, whole commands, no wrap residue.
        lines = banner.splitlines()
        assert not [line for line in lines + written.splitlines() if line.endswith(" ")]
        assert (
            "Demo: a run will ask for your approval in a few seconds. Sign in with the "
            "sign-in link in the file named below, then open the inbox." in lines
        ), banner
        assert any(line.startswith("Runbell listening on ") and "Ctrl-C" in line for line in lines)

        # The sign-in link written once, never printed.
        assert not LINK.findall(banner)
        [(base, token)] = LINK.findall(written)
        assert base == served.url
        signs_in(f"{base}/auth/{token}")

        # Another link later, from a second terminal: in the file and printed.
        later = block_after(written, "Another sign-in link later")
        assert later == block_after(banner, "A new browser sign-in link")
        if Path(RUNBELL).resolve() == (ROOT / ".venv" / "bin" / "runbell").resolve():
            assert any(c.endswith("make login-link") for c in later), later
            assert any(".venv/bin/runbell user login-link" in c for c in later), later
        assert all(str(tmp_path / "data") in c for c in later), later
        pasted_links(later, shell, served.url)

        # The curl block, pasted as written.
        start = written.index("  export RB=")
        curls = written[start : written.index("\n\n", start)]
        res = paste(curls, shell)
        assert res.returncode == 0, res.stderr
        put, signal, inbox, feed = json_documents(res.stdout)
        assert put["state"] == "working"
        assert signal["outcome"] == "applied"
        assert ("demo-1", "completed") in {
            (n["run_id"], n["attention_type"]) for n in inbox["notifications"]
        }
        assert "run.transitioned" in {e["type"] for e in feed["events"]}
        served.terminate()

    # A later start on another port: the printed commands now link there.
    again = Served(server_env, tmp_path, "again", "--demo", cwd=ROOT)
    while again.port == served.port:
        again.port = free_port()
        again.url = f"http://127.0.0.1:{again.port}"
    with again:
        later = block_after(again.stdout, "A new browser sign-in link")
        assert later and WELCOME not in again.stdout
        assert "will ask for your approval" not in again.stdout, again.stdout  # no promise
        pasted_links(later, shell, again.url)
        again.terminate()


def test_login_link_uses_the_public_url_else_what_serve_recorded(
    tmp_path: Path, sqlite_template: Path
) -> None:
    """`runbell user login-link`: RUNBELL_PUBLIC_URL when set, else the address `serve`
    recorded, else the default; without an email, the tenant's first owner. It needs no
    secret key (a second terminal may not have RUNBELL_SECRET_KEY)."""
    settings = settings_for(tmp_path)
    shutil.copy(sqlite_template, tmp_path / "runbell.db")  # migrated once per session
    core = build(settings, migrate=False)
    try:
        first = make_tenant(core, name="default", owner_email="first@example.test")
        add_user(core, first.tenant_id, "later@example.test", role="owner")
    finally:
        core.db.dispose()
    env = cli_env(tmp_path)

    def link(*args: str, **extra: str) -> tuple[str, str | None]:
        out = ok({**env, **extra}, "user", "login-link", "--tenant", "default", *args)
        [(base, token)] = LINK.findall(out)
        core = build(settings, migrate=False)
        try:
            with core.db.transaction() as tx:
                used = sessions.consume_login_link(tx.conn, token, tx.now)
        finally:
            core.db.dispose()
        assert isinstance(used, tuple), used
        return base, used[1]

    assert link() == ("http://127.0.0.1:8080", first.owner_id)  # never served: the default
    core = build(settings, migrate=False)
    try:
        record_served_url(core.db, "http://127.0.0.1:18999")
    finally:
        core.db.dispose()
    assert link("first@example.test")[0] == "http://127.0.0.1:18999"
    public = link(RUNBELL_PUBLIC_URL="https://rb.example.com/")
    assert public == ("https://rb.example.com", first.owner_id)

    # No secret key at all: still a link, and no stray key file made.
    no_key = {k: v for k, v in env.items() if k != "RUNBELL_SECRET_KEY"}
    assert LINK.search(ok(no_key, "user", "login-link", "--tenant", "default"))
    assert not (tmp_path / "secret.key").exists()
    assert "nobody@example.test" in refused(
        env, "user", "login-link", "--tenant", "default", "nobody@example.test"
    )


def test_serve_on_a_taken_port_fails_before_creating_anything(tmp_path: Path) -> None:
    """A taken port is a one-line refusal that names it, before any secret is printed
    (they are shown once) or the database is made."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_cli(cli_env(tmp_path / "data"), "serve", "--port", str(port))
    assert res.returncode == 2, res.stderr
    assert f"127.0.0.1:{port}" in res.stderr and "Traceback" not in res.stderr
    assert WELCOME not in res.stdout
    assert not (tmp_path / "data" / "runbell.db").exists()


# --- item 9: tables when piped ------------------------------------------------------------


def test_deliveries_list_piped_prints_whole_values_and_json(
    tmp_path: Path, sqlite_template: Path
) -> None:
    """Piped, `deliveries list` prints one tab-separated line per delivery with whole ids
    (nothing cut to a column width); --json prints every field as GET /v1/deliveries."""
    shutil.copy(sqlite_template, tmp_path / "runbell.db")  # migrated once per session
    core = build(settings_for(tmp_path), migrate=False)
    try:
        creds = make_tenant(core)
        with TestClient(create_app(core, bridge=False)) as client:
            rt = bearer(creds.runtime_key)
            body = {"owner": creds.owner_email, "state": "working", "notify_on_complete": True}
            for i in range(3):
                assert client.put(f"/v1/runs/r-{i}", json=body, headers=rt).status_code == 201
                signal = {"event_id": f"e-{i}", "state": "completed"}
                client.post(f"/v1/runs/r-{i}/signals", json=signal, headers=rt)
            api = client.get("/v1/deliveries", headers=bearer(creds.admin_key)).json()
    finally:
        core.db.dispose()
    expected = api["deliveries"]
    assert len(expected) >= 3

    res = run_cli(cli_env(tmp_path), "deliveries", "list", "--tenant", "acme")  # a pipe
    assert res.returncode == 0, res.stderr
    header, *rows = res.stdout.splitlines()
    assert header.split("\t")[:3] == ["id", "channel", "status"]
    assert [row.split("\t")[0] for row in rows] == [d["id"] for d in expected]
    for row, d in zip(rows, expected, strict=True):
        cells = row.split("\t")
        assert len(cells) == len(header.split("\t"))
        assert (cells[1], cells[2]) == (d["channel"], d["status"])
        assert d["notification_id"] in cells

    as_json = json.loads(ok(cli_env(tmp_path), "deliveries", "list", "--tenant", "acme", "--json"))
    assert as_json == expected


# --- item 10: settings ------------------------------------------------------------------


def test_list_settings_accept_a_comma_separated_value(
    tmp_path: Path, sqlite_template: Path
) -> None:
    """RUNBELL_OUTBOUND_ALLOW_HOSTS=a,b works like ["a","b"]: a reader on an allow-listed
    plain-http host is accepted, and refused without it."""
    env = cli_env(tmp_path)
    with_acme(tmp_path, sqlite_template)
    port = free_port()
    reader = json.dumps(
        {"type": "http_json", "url_template": f"http://127.0.0.1:{port}/{{run_id}}"}
    )
    args = ["source", "create", "--tenant", "acme", "--kind", "api", "--reader", reader]
    refused(env, *args, "ci-0")
    for i, value in enumerate([f"127.0.0.1:{port}", f"example.com, 127.0.0.1:{port}"], 1):
        created = ok({**env, "RUNBELL_OUTBOUND_ALLOW_HOSTS": value}, *args, f"ci-{i}")
        assert json.loads(created)["reader"]["url_template"].startswith("http://127.0.0.1")
    listed = json.dumps(["example.com", f"127.0.0.1:{port}"])
    ok({**env, "RUNBELL_OUTBOUND_ALLOW_HOSTS": listed}, *args, "ci-3")
    ok({**env, "RUNBELL_MISMATCH_BACKOFF_S": "1, 2.5,10"}, "migrate")


BAD_SETTINGS = [
    ("RUNBELL_OUTBOUND_ALLOW_HOSTS", '["127.0.0.1"', "JSON list"),
    ("RUNBELL_MISMATCH_BACKOFF_S", "5,soon", "item 2"),
    ("RUNBELL_SMTP_PORT", "twenty-five", "integer"),
    ("RUNBELL_MAX_BODY_BYTES", "10", "1024"),
    ("RUNBELL_PUBLIC_URL", "runbell.example.com", "https://"),
    ("RUNBELL_DATABASE_URL", "mysql://root:hunter2@db/runbell", "not supported"),
    ("RUNBELL_DATABASE_URL", "::hunter2::", "not a database URL"),
    ("RUNBELL_SECRET_KEY", "hunter2", "base64"),
    ("RUNBELL_LOG_JSON", "maybe", "boolean"),
]


@pytest.mark.parametrize(("name", "value", "says"), BAD_SETTINGS)
def test_an_invalid_setting_is_one_line_naming_its_variable(
    tmp_path: Path, name: str, value: str, says: str
) -> None:
    """Exit 2 and one line `runbell: RUNBELL_X: why`; no traceback, the value not echoed
    (it may be a password or a key)."""
    res = run_cli({**cli_env(tmp_path), name: value}, "migrate")
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()], res.stderr
    assert res.stderr.startswith(f"runbell: {name}: "), res.stderr
    assert says in res.stderr
    assert "hunter2" not in res.stderr + res.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["serve"],
        ["worker"],
        ["api"],
        ["tenant", "create", "acme"],
        ["user", "login-link", "you@example.com", "--tenant", "default"],
        ["deliveries", "list", "--tenant", "acme"],
    ],
    ids=lambda args: "-".join(args[:2]),
)
def test_every_command_reports_a_bad_setting_the_same_way(tmp_path: Path, args: list[str]) -> None:
    """The plain value from the issue, made invalid: every command says the same line."""
    env = {
        **cli_env(tmp_path),
        "RUNBELL_OUTBOUND_ALLOW_HOSTS": "127.0.0.1",
        "RUNBELL_SMTP_PORT": "0",
    }
    res = run_cli(env, *args)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == (
        "runbell: RUNBELL_SMTP_PORT: Input should be greater than or equal to 1"
    ), res.stderr


# --- item 13: private data files -----------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_directory_and_database_files_are_private(tmp_path: Path) -> None:
    """Under the usual umask 022: the data directory 0700; runbell.db, its -wal and -shm
    and secret.key 0600 — after `migrate` and while `serve` runs."""
    data = tmp_path / "data"
    env = {k: v for k, v in cli_env(data).items() if k != "RUNBELL_SECRET_KEY"}
    res = subprocess.run(
        [RUNBELL, "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        umask=0o022,
    )
    assert res.returncode == 0, res.stderr
    assert (mode(data), mode(data / "runbell.db")) == (0o700, 0o600)

    old_umask = os.umask(0o022)  # Served inherits it
    try:
        with Served(env, tmp_path, "serve") as served:
            files = ["runbell.db", "runbell.db-wal", "runbell.db-shm", "secret.key"]
            assert {name: mode(data / name) for name in files} == dict.fromkeys(files, 0o600)
            served.terminate()
    finally:
        os.umask(old_umask)


def test_database_files_an_older_version_left_readable_are_tightened(tmp_path: Path) -> None:
    """A data directory from before this fix (0644 database and WAL): the files become
    0600 on the next start; the directory, which the operator may manage, is left alone."""
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o755)  # noqa: S103 (what an older version left; the test checks it stays)
    db = data / "runbell.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE legacy (x)")
        conn.commit()
        # Keep the WAL around as a crash would.
        conn.execute("INSERT INTO legacy VALUES (1)")
        conn.commit()
        for name in (db, data / "runbell.db-wal"):
            if name.exists():
                os.chmod(name, 0o644)
        ok(cli_env(data), "migrate")
    assert mode(db) == 0o600
    wal = data / "runbell.db-wal"
    assert not wal.exists() or mode(wal) == 0o600
    assert mode(data) == 0o755
