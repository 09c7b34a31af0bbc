"""``runbell hook codex``: the legacy ``notify`` program and Codex's newer hooks.

- As ``notify = ["runbell", "hook", "codex"]`` in ``~/.codex/config.toml``, Codex appends
  the ``agent-turn-complete`` JSON as the last argument (stdin, stdout and stderr are
  null; nobody reads an answer): the turn is reported as one completed run.
- As a command in ``hooks.json`` (or ``[hooks]`` in ``config.toml``), Codex writes the
  hook's JSON to stdin, like Claude Code: ``UserPromptSubmit`` starts a turn's run,
  ``Stop`` completes it, ``PermissionRequest`` asks the person and prints the decision in
  Codex's output rules (``behavior`` and ``message`` only: ``updatedInput``,
  ``updatedPermissions`` and ``interrupt`` make Codex fail closed), ``SessionStart`` has
  no turn yet and reports nothing.

As with Claude Code, any failure prints nothing and exits 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from runbell.hooks.mapping import PayloadError, plan_codex_hook, plan_codex_notify


def handle(argument: str | None, stdin_text: str | None, environ: Mapping[str, str]) -> str:
    """Report one notify call (``argument``) or hook event (``stdin_text``); return
    what to print."""
    from runbell.hooks import report

    raw = argument if argument is not None else stdin_text
    if not raw or not raw.strip():
        raise PayloadError("no payload: neither an argument nor stdin")
    payload = json.loads(raw)
    if not isinstance(payload, dict):
        raise PayloadError("the payload is not a JSON object")
    plan = plan_codex_notify(payload) if argument is not None else plan_codex_hook(payload)
    if not plan.actions and plan.approval is None:
        return ""
    with report.client(environ) as rb:
        report.carry_out(rb, plan)
        if plan.approval is None:
            return ""
        output = report.decide(rb, plan.approval, report.hook_timeout(environ))
    return "" if output is None else json.dumps(output)
