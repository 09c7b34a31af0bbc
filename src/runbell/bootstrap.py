"""First start: a default tenant, keys and a first user, printed once."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from runbell.core import Runbell
from runbell.store import accounts
from runbell.web.sessions import create_login_link


@dataclass(frozen=True)
class FirstRun:
    tenant_id: str
    admin_key: str
    runtime_key: str
    user_email: str
    user_token: str
    login_token: str  # a one-time browser sign-in link for the first user


def bootstrap_if_empty(core: Runbell, email: str) -> FirstRun | None:
    """Create the first tenant, keys and user when the database has no tenant yet."""
    with core.db.transaction() as tx:
        if accounts.count_tenants(tx.conn) > 0:
            return None
        tenant_id = accounts.create_tenant(tx.conn, "default", tx.now)
        _, admin = accounts.create_api_key(tx.conn, tenant_id, "admin", tx.now, name="admin")
        _, runtime = accounts.create_api_key(tx.conn, tenant_id, "runtime", tx.now, name="runtime")
        user_id = accounts.ensure_user(tx.conn, email, tx.now)
        accounts.add_member(tx.conn, tenant_id, user_id, "owner", tx.now)
        token = accounts.create_user_token(tx.conn, tenant_id, user_id, tx.now)
        login = create_login_link(tx.conn, tenant_id, user_id, tx.now)
    return FirstRun(tenant_id, admin, runtime, accounts.normalize_email(email), token, login)


def welcome_text(first: FirstRun, base_url: str, login_commands: Sequence[str] = ()) -> str:
    """The first start's text. Every command in it works when pasted into a second
    terminal: ``login_commands`` print a new sign-in link (see runbell.cli)."""
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
