"""The first start's text: the secrets the first start made, printed once, and commands
that work pasted into a second terminal (a new sign-in link for the same database)."""

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

  export RB={base_url} RUNTIME={first.runtime_key} ME={first.user_token}
  curl -sS -X PUT $RB/v1/runs/demo-1 -H "Authorization: Bearer $RUNTIME" \\
       -H 'Content-Type: application/json' \\
       -d {run_body}
  curl -sS -X POST $RB/v1/runs/demo-1/signals -H "Authorization: Bearer $RUNTIME" \\
       -H 'Content-Type: application/json' -d '{{"event_id": "evt-1", "state": "completed"}}'
  curl -sS $RB/v1/notifications -H "Authorization: Bearer $ME"
  curl -sS "$RB/v1/events?after=earliest" -H "Authorization: Bearer $RUNTIME"

API reference: {base_url}/docs   ·   docs/api.md
"""


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
