"""Who may finish a run, and who did what (issue 18 items 2, 3 and 8), for scripts and
agents, on :mod:`runbell.client` like :mod:`~runbell.cli.agent`: ``history`` (the run's
per-step trace), ``claim`` (take the run, or take it over), ``supersede`` (the completion
owner lets new work through past an operation still in flight, saying why) and
``finding`` (anyone reports what they found about an operation: a report on the ledger,
never a decision). Configured and failing as :mod:`~runbell.cli.agent`'s commands do: an
error, a 403 included, is one line on stderr (the problem's detail: the
completion-owner rule, or the capability the key lacks), a hint, exit 3.
"""

from __future__ import annotations

from runbell.cli import agent
from runbell.cli.specs import Argument, Commands, Flag, Option

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from typing import Any

__all__ = ["claim", "commands", "finding", "history", "step_line", "supersede"]

commands = Commands(usage_exit=agent.EXIT_ERROR)
FINDINGS = ("conflict", "confirmed", "absent", "failed", "uncertain", "evidence")
OPERATION_ID = Argument("operation_id", "the operation's id, as declared")
WORKER_ID = Option("--worker-id", "the worker acting (recorded with the step)", metavar="W")


@commands.command(
    agent.RUN_ID, Flag("--json", "the steps as the API gives them, a JSON array", dest="as_json")
)
def history(run_id: str, as_json: bool = False) -> None:
    """Show a run's per-step trace, oldest first.

    One line per step: when, what, and by whom (the actor's kind, credential id, worker
    and person). Never a secret."""
    import json
    import sys

    from runbell.client import RunbellError

    with agent._client() as core:
        try:
            steps = core.history(run_id)
        except RunbellError as exc:
            agent._error(exc)
    if as_json:
        json.dump(steps, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    for step in steps:
        print(step_line(step))


def step_line(step: dict[str, Any]) -> str:
    """``<at>  <what>  by <actor>``: one step of ``GET /v1/runs/{id}/history``."""
    return f"{step.get('at') or '-'}  {_what(step)}  by {_actor(step.get('actor'))}"


def _what(step: dict[str, Any]) -> str:
    kind = step.get("kind")
    if kind == "transition":
        text = (
            f"{step.get('transition')} v{step.get('version')}: "
            f"{step.get('from_state') or '-'} -> {step.get('to_state')}"
        )
        return text + (f" ({step['reason']})" if step.get("reason") else "")
    if kind == "operation":
        op, action = step.get("operation_id"), step.get("action")
        if action == "finding":
            return f"operation {op} finding {step.get('finding')}"
        if action == "superseded":
            return f"operation {op} superseded ({step.get('state')}): {step.get('reason')}"
        moved = f"{step.get('from_state') or '-'} -> {step.get('state')}"
        return f"operation {op} {action} {moved}"
    if kind == "owner_change":
        text = (
            f"owner {step.get('change')}: {_owner(step.get('previous'))} -> "
            f"{_owner(step.get('owner'))}, epoch {step.get('epoch')}"
        )
        if step.get("previous_may_still_act"):
            text += ", previous may still act"
        return text + (f" ({step['reason']})" if step.get("reason") else "")
    if kind == "answer":
        return f"answer {step.get('input_request_id')} {step.get('decision')}"
    if kind == "amendment":
        return f"amendment {step.get('amendment_id')} {step.get('state')}"
    return str(kind)


def _owner(owner: Any) -> str:
    if not isinstance(owner, dict) or not owner.get("credential_id"):
        return "none"
    worker = f" worker {owner['worker_id']}" if owner.get("worker_id") else ""
    return f"{owner['credential_id']}{worker}"


def _actor(actor: Any) -> str:
    """``key key_… (runtime) worker w``, ``user usr_…``, ``sweep``; ``unknown`` for a step
    written before the trace existed."""
    if not isinstance(actor, dict):
        return "unknown"
    words = [str(actor.get("kind"))]
    if actor.get("credential_id"):
        words.append(str(actor["credential_id"]))
    if actor.get("role"):
        words.append(f"({actor['role']})")
    for field, label in (("worker_id", "worker"), ("user_id", "person"), ("source_id", "source")):
        if actor.get(field):
            words += [label, str(actor[field])]
    return " ".join(words)


@commands.command(
    agent.RUN_ID,
    Option("--worker-id", "the worker that takes the run", metavar="W"),
    Option("--reason", "why, shown in the run's history", metavar="TEXT"),
)
def claim(run_id: str, worker_id: str, reason: str | None = None) -> None:
    """Claim a run for a worker; print its epoch.

    Another worker or key takes it over: completion ownership moves, recorded in the
    run's history."""
    from runbell.client import RunbellError

    with agent._client() as core:
        try:
            epoch = core.claim(run_id, worker_id, reason=reason)
        except RunbellError as exc:
            agent._error(exc)
    print(f"claimed {run_id} for {worker_id}: epoch {epoch}")


@commands.command(
    agent.RUN_ID,
    OPERATION_ID,
    Option("--reason", "why new work may go ahead (recorded)", metavar="TEXT"),
    WORKER_ID,
)
def supersede(run_id: str, operation_id: str, reason: str, worker_id: str | None = None) -> None:
    """Let new work past an operation still in flight.

    Only the run's completion owner; the operation keeps its state and the reason is
    recorded."""
    from runbell.client import RunbellError

    with agent._client() as core:
        try:
            op = core.supersede_operation(run_id, operation_id, reason, worker_id=worker_id)
        except RunbellError as exc:
            agent._error(exc)
    print(f"superseded {op.operation_id} ({op.state})")


@commands.command(
    agent.RUN_ID,
    OPERATION_ID,
    Option("--finding", "conflict, confirmed, absent, failed, uncertain or evidence", metavar="F"),
    Option("--evidence", "a JSON object: what you saw", metavar="JSON"),
    WORKER_ID,
)
def finding(
    run_id: str,
    operation_id: str,
    finding: str,
    evidence: str | None = None,
    worker_id: str | None = None,
) -> None:
    """Report what you found about an operation.

    It lands on the ledger as a report; the operation's state does not change."""
    import json

    from runbell.client import RunbellError

    if finding not in FINDINGS:
        agent._fail(f"--finding must be one of {', '.join(FINDINGS)}, not {finding!r}")
    seen: dict[str, Any] | None = None
    if evidence is not None:
        try:
            seen = json.loads(evidence)
        except ValueError as exc:
            agent._fail(f"--evidence is not JSON: {exc}")
        if not isinstance(seen, dict):
            agent._fail("--evidence must be a JSON object")
    with agent._client() as core:
        try:
            op = core.report_finding(
                run_id, operation_id, finding, evidence=seen, worker_id=worker_id
            )
        except RunbellError as exc:
            agent._error(exc)
    print(f"reported {finding} on {op.operation_id} ({op.state})")
