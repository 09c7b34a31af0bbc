"""The first start's text: the secrets the first start made, printed once, and commands
that work pasted into a second terminal."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from runbell.flows.accounts import FirstRun


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
