"""The first start's text: the secrets the first start made, shown once (printed to a
terminal, else written to a private file whose path is printed), and commands that work
pasted into a second terminal (a new sign-in link for the same database)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when a command runs, not when `runbell` starts
    from runbell.config import Settings
    from runbell.flows.accounts import FirstRun


def welcome_text(first: FirstRun, base_url: str, login_commands: Sequence[str] = ()) -> str:
    """The first start's text. Every command in it works when pasted into a second
    terminal: ``login_commands`` print a new sign-in link (see :func:`login_commands`)."""
    base_url = base_url.rstrip("/")
    later = "".join(f"  {command}\n" for command in login_commands)
    if later:
        later = (
            "Another sign-in link later (each works once), from a second terminal in this "
            f"directory:\n\n{later}\n"
        )
    run_body = shlex.quote(
        f'{{"owner": {json.dumps(first.user_email)}, "title": "Demo run", '
        '"state": "working", "notify_on_complete": true}'
    )
    return f"""
Runbell is set up. These secrets are shown ONCE — store them now.

  tenant        {first.tenant_id}
  admin key     {first.admin_key}
  runtime key   {first.runtime_key}
  first user    {first.user_email}
  user token    {first.user_token}

Open Runbell in your browser (this sign-in link works once, for 15 minutes):

  {base_url}/auth/{first.login_token}

{later}Try it (a run that finishes and lands in the inbox):

  export RB={base_url} RUNTIME={first.runtime_key} ME={first.user_token} ADMIN={first.admin_key}
  curl -sS -X PUT $RB/v1/runs/demo-1 -H "Authorization: Bearer $RUNTIME" \\
       -H 'Content-Type: application/json' \\
       -d {run_body}
  curl -sS -X POST $RB/v1/runs/demo-1/signals -H "Authorization: Bearer $RUNTIME" \\
       -H 'Content-Type: application/json' -d '{{"event_id": "evt-1", "state": "completed"}}'
  curl -sS $RB/v1/notifications -H "Authorization: Bearer $ME"
  curl -sS "$RB/v1/events?after=earliest" -H "Authorization: Bearer $RUNTIME"

API reference (served by this server): {base_url}/docs
"""


#: The first start's secrets go here, in the data directory, when stdout is no terminal.
SECRETS_FILE = "first-start-secrets.txt"


def write_secrets(data_dir: Path, first: FirstRun, text: str, at: str) -> Path:
    """Write the first start's ``text`` once to a new file in ``data_dir`` that only this
    user can read (0600; the directory is created 0700 if missing, as on PostgreSQL);
    its absolute path. An existing file is never overwritten (one from an earlier
    database gets a sibling named after the new tenant)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    header = (
        f"Written once by Runbell's first start on this database ({at}), instead of to "
        "stdout,\nwhich was not a terminal (a service journal or a container log keeps "
        "what it prints).\nOnly this user can read it. Store the secrets somewhere safe, "
        "then delete this file.\n"
    )
    for name in (SECRETS_FILE, f"first-start-secrets-{first.tenant_id}.txt"):
        path = (data_dir / name).absolute()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as f:
            f.write(header + text)
        return path
    raise FileExistsError(f"{data_dir / SECRETS_FILE} (and its sibling) already exist")


def secrets_file_note(path: Path) -> str:
    """What stdout says instead of the secrets."""
    return (
        "Runbell is set up. Its first secrets (admin key, runtime key, user token and a "
        f"one-time sign-in link) are in {path}, readable only by this user: store them, "
        "then delete the file. (They are printed only when stdout is a terminal.)"
    )


def sign_in_text(link: str, login_commands: Sequence[str]) -> str:
    """A restart's sign-in link (stdout is a terminal), and how to get another later."""
    later = "".join(f"  {command}\n" for command in login_commands)
    return (
        "Sign in to Runbell in your browser (this link works once, for 15 minutes):\n\n"
        f"  {link}\n\n"
        "Another sign-in link later, from a second terminal in this directory:\n\n"
        f"{later}"
    )


def this_command() -> str:
    """How a shell in the current directory runs the `runbell` that is running now."""
    import shutil

    exe = Path(sys.argv[0])
    if exe.name != "runbell":  # python -m runbell.cli
        return f"{shlex.quote(sys.executable)} -m runbell.cli"
    found = shutil.which("runbell")
    if found and exe.exists() and os.path.samefile(found, exe):
        return "runbell"
    path = Path(os.path.abspath(exe))
    try:
        rel = path.relative_to(Path.cwd())
    except ValueError:
        return shlex.quote(str(path))
    return shlex.quote(str(rel) if len(rel.parts) > 1 else f"./{rel}")


def same_database(settings: Settings) -> tuple[str, str | None]:
    """The RUNBELL_* assignments a fresh shell needs to reach this process's database, and
    a note when something had to be left out (a password is never printed)."""
    import sqlalchemy as sa

    given = settings.model_fields_set
    if settings.database_url and "database_url" in given:
        url = sa.make_url(settings.database_url)
        note = None
        if url.password is not None:
            url = url.set(password=None)
            note = "(the database password is left out: set PGPASSWORD or use ~/.pgpass)"
        shown = url.render_as_string(hide_password=False)
        return f"RUNBELL_DATABASE_URL={shlex.quote(shown)} ", note
    if "data_dir" in given:
        return f"RUNBELL_DATA_DIR={shlex.quote(str(settings.data_dir.resolve()))} ", None
    return "", None


def login_commands(settings: Settings, email: str | None) -> list[str]:
    """Commands that print a new sign-in link for the first tenant's owner (``email``, or
    its first owner) when pasted into a second terminal in this directory; then a note if
    the database URL had to be shortened."""
    env, note = same_database(settings)
    me = this_command()
    commands = []
    makefile = Path("Makefile")
    in_checkout = me == ".venv/bin/runbell" and makefile.is_file()
    if in_checkout and "\nlogin-link:" in makefile.read_text(errors="replace"):
        commands.append(f"{env}make login-link")
    who = f" {shlex.quote(email)}" if email else ""
    commands.append(f"{env}{me} user login-link{who} --tenant default")
    return commands + ([note] if note else [])
